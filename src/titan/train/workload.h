#pragma once
// What differs between the model families the trainer trains, behind one interface: the data and
// its checkpointed position, the model built on meta with its parallel plans, the step engine,
// validation, the log's data and objective lines and the figures of MFU. The trainer's loop and
// everything else it builds (layout, mesh, deferred initialisation, optimizer, LR, metrics,
// checkpoints, signals, memory plan, profiling) do not know which family runs. A family's
// TrainSpec names its workload (models::TrainSpec::workload); make_workload makes it.
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/rng.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/model_summary.h"
#include "titan/models/registry.h"
#include "titan/nn/module.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/data_parallel.h"
#include "titan/train/config/job_config.h"
#include "titan/train/memory_plan.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/step/step_engine.h"

namespace titan::train {

// What the trainer has laid out when the workload builds: the job, this process's ranks and the
// batch plan over them.
struct WorkloadContext {
  const JobConfig& cfg;
  dist::DeviceMesh& mesh;
  const dist::ParallelDims& dims;
  const BatchPlan& plan;
  // The layout's data-parallel ranks or devices this process feeds (graph mode: several).
  int64_t devices_fed = 1;
  ExecutionMode& mode;
  std::ostream& log;
};

// What the trainer has built when the workload makes its step: the model with its plans applied
// and initialised (or loaded), and what the optimizer steps.
struct EngineParts {
  const JobConfig& cfg;
  optim::AdamW& optimizer;
  const std::vector<std::pair<std::string, Tensor>>& named_params;
  models::Parallelized& plans;
  parallel::DataParallel* ddp;  // null without replicated data parallelism
  dist::DeviceMesh& mesh;
  dist::ProcessGroup& world;
  std::ostream& log;
  int64_t start_step = 0;  // the step a resume continues after; 0: a fresh start
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Refuses by key what the family does not run in this layout, before anything is built.
  virtual void check_layout(const JobConfig& cfg, const dist::ParallelDims& dims) = 0;
  // The training data (a dry run reads none).
  virtual void build_data(const WorkloadContext& ctx) = 0;
  // The model with its parallel plans applied into `plans`. Shapes only: built under a MetaScope
  // (core/meta.h), each rank allocating and initialising what it holds once the plans have split
  // and sharded it (deferred initialisation, drawing from `rng`), so that no rank ever holds the
  // whole model.
  virtual std::shared_ptr<nn::Module> build_model(const WorkloadContext& ctx, Generator& rng,
                                                  models::Parallelized& plans) = 0;
  virtual const models::ModelSummary& summary() const = 0;
  // The model's repeated blocks (FSDP's units) and the activations one micro-batch keeps for
  // backward, for the memory plan; nullopt: the decoder's estimate (memory_plan.h).
  virtual std::optional<int64_t> activation_bytes(const JobConfig&) const { return std::nullopt; }
  // Frozen models the step runs besides the trained one, for the memory plan (memory_plan.h).
  // `mesh` is the processes' (in graph mode too, where ParallelDims counts devices).
  virtual FrozenBytes frozen_bytes(const JobConfig&, dist::DeviceMesh&) const { return {}; }
  virtual std::vector<const nn::Module*> blocks() const { return {}; }
  // After deferred initialisation: what the model needs of the layout (MoE's global counts).
  virtual void after_initialise(dist::DeviceMesh&) {}
  // The lines of the start-up log about the model's attention, the data and the objective.
  virtual void log_model(std::ostream& log, const JobConfig& cfg, const std::string& checkpointing) const = 0;
  virtual void log_data(std::ostream& log, const JobConfig& cfg) const = 0;
  virtual void log_layout(std::ostream& log, const JobConfig& cfg, const dist::DeviceMesh& mesh,
                          const models::Parallelized& plans) const {}
  // The loader whose position checkpoints keep; null where the samples are a function of the step.
  virtual data::DataLoader* loader() { return nullptr; }
  // The folder a Hugging Face export copies the tokenizer from; empty: none.
  virtual std::filesystem::path tokenizer_dir() const { return {}; }
  // Made after any checkpoint is loaded.
  virtual void make_validator(const WorkloadContext& ctx) = 0;
  virtual std::unique_ptr<StepEngine> make_engine(const EngineParts& parts) = 0;
  virtual bool should_validate(int64_t step, int64_t last_step) const = 0;
  virtual ValidationMetrics validate(int64_t step, models::Parallelized& plans) = 0;
  // What a step reads on one device, for throughput and MFU: its tokens (a FLUX sample's image
  // tokens) and the training FLOPs per token.
  virtual int64_t tokens_per_step(const JobConfig& cfg, const dist::ParallelDims& dims,
                                  int64_t micro_batches) const = 0;
  // The loop's micro-batches for a step of the engine (a language model's loader).
  virtual NextBatch next_batch() { return nullptr; }
};

// The workload of cfg.model.name's family (TrainSpec::workload). `objective_engine` makes the step
// of an objective above train/ (GRPO), for the language models.
std::unique_ptr<Workload> make_workload(const JobConfig& cfg, MakeEngine objective_engine);

}  // namespace titan::train
