#pragma once
// The seam between the trainer loop and how a step runs. The loop asks a StepEngine for one
// optimizer step over the micro-batches it hands it, brings the state to the host before anything
// reads it (validation, checkpoints, the end), and never asks which mode it is in. An
// ExecutionMode, made from [compile] by make_execution_mode, decides what differs before there is
// an engine: what the [parallelism] degrees split (ranks, or a PJRT plugin's devices), and which
// activation checkpointing the model's blocks are wrapped in; then it makes the engine:
//   eager     op by op over MPI ranks, gradients synchronised as the plans say (step/eager_step.h)
//   pipeline  the eager step whose forwards and backwards run a pipeline schedule (step/pipeline_step.h)
//   graph     the whole step compiled by a PJRT plugin and replayed (graph_mode/graph_engine.h)
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "titan/data/loader.h"
#include "titan/data/tokenizer.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/causal_lm.h"
#include "titan/models/registry.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/data_parallel.h"
#include "titan/train/config/job_config.h"
#include "titan/train/metrics/metrics.h"

namespace titan::train {

struct StepStats {
  double loss = 0;       // mean over the micro-batches, the model's auxiliary loss included
  double grad_norm = 0;  // before clipping
  // The model's figures (CausalLM::end_step), after "aux_loss" (its mean) when it has one.
  Scalars extra;
  // The tokens this rank's forwards read, where the engine decides them (GRPO's rollouts); 0: the
  // configured batch's.
  int64_t tokens = 0;
};

using NextBatch = std::function<data::Batch()>;

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // One optimizer step over `micro_batches` batches drawn from `next_batch`: forwards, backwards,
  // the gradients' reduction, clipping to training.max_norm, the update and the model's end of
  // step. The loss is this rank's; the learning-rate schedule is the caller's.
  virtual StepStats step(int64_t micro_batches, const NextBatch& next_batch) = 0;
  // Brings the model's parameters and the optimizer's state on the host up to date, for what reads
  // them next; they already are where the step runs on the host.
  virtual void to_host() {}
  // What runs the step, for the start-up log.
  virtual std::string describe() const = 0;
  // The device's peak memory, where the step runs on one that reports it.
  virtual std::optional<int64_t> device_peak_bytes() const { return std::nullopt; }
};

// What the trainer has built when it makes its engine: this rank's model with its parallel plans
// applied, the parameters the optimizer steps (FSDP's shards, or the parameters) and the optimizer.
struct StepParts {
  const JobConfig& cfg;
  const models::TrainSpec& spec;
  models::CausalLM& model;
  optim::AdamW& optimizer;
  const std::vector<std::pair<std::string, Tensor>>& named_params;
  models::Parallelized& plans;
  parallel::DataParallel* ddp;  // null without replicated data parallelism
  dist::DeviceMesh& mesh;       // this process's ranks
  dist::ProcessGroup& world;
  std::ostream& log;
  const data::Tokenizer& tokenizer;
  int64_t start_step = 0;  // the step a resume continues after; 0: a fresh start
};

// Makes the engine of an objective whose step lives above train/ (rl/grpo_engine.h), in place of
// the execution mode's.
using MakeEngine = std::function<std::unique_ptr<StepEngine>(const StepParts& parts)>;

class ExecutionMode {
 public:
  virtual ~ExecutionMode() = default;

  // The [parallelism] degrees resolved over what this mode splits, and the mesh of this process's
  // ranks that eager plans and the data loader use. Collective over `world`.
  struct Layout {
    dist::ParallelDims dims;
    std::unique_ptr<dist::DeviceMesh> mesh;
  };
  virtual Layout lay_out(const dist::MeshDegrees& degrees, dist::ProcessGroup world, const JobConfig& cfg) = 0;

  // The activation checkpointing the model's blocks are wrapped in ([activation_checkpoint]), and
  // how the log states what the step keeps for backward.
  struct Checkpointing {
    std::string mode = "none";
    int64_t every_k = 1;
    std::string summary;
  };
  virtual Checkpointing checkpointing(const JobConfig& cfg) const;

  // The metrics line's note of where steps run; empty for the host.
  virtual std::string label() const { return ""; }

  // What the memory plan of process `rank` of `size` counts (train/memory_plan.h), for the log.
  virtual std::string memory_plan_scope(int rank, int size) const {
    return "rank " + std::to_string(rank) + " of " + std::to_string(size) + ", eager";
  }

  // Called once, after the model, the optimizer and any checkpoint are loaded.
  virtual std::unique_ptr<StepEngine> make_engine(const StepParts& parts) = 0;
};

// compile.enable = true: graph mode; else eager (with pipeline stages when pp > 1).
std::unique_ptr<ExecutionMode> make_execution_mode(const JobConfig& cfg);
// Eager mode whatever the config says: what a dry run lays its simulated ranks out as.
std::unique_ptr<ExecutionMode> make_eager_mode();

}  // namespace titan::train
