#pragma once
// What one rank of a layout needs in memory, computed from its model built on meta and
// parallelized (shapes only: nothing proportional to the model exists yet), and the check of that
// plan against the memory the process may use. The trainer prints and checks it before deferred
// initialisation allocates the shards; a dry run prints and checks it without allocating at all.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/nn/module.h"
#include "titan/parallel/activation_checkpoint_config.h"
#include "titan/parallel/fully_shard.h"
#include "titan/parallel/pipeline_parallel.h"

namespace titan::train {

// What a memory plan is computed from: a rank's model after its parallel plans, and its step.
// Frozen models a step runs besides the trained one (FLUX's encoders every step): what a rank keeps
// of them throughout, and the most they gather and their activations hold while they run (without
// gradients, on a micro-batch's rows), before the trained model's forward.
struct FrozenBytes {
  int64_t kept = 0;
  int64_t gathered = 0;
  int64_t activations = 0;
};

struct MemoryPlanInputs {
  nn::Module& model;                     // built on meta, parallelized (tp/ep/pp slices applied)
  const parallel::FullyShard* fsdp;      // null without FSDP
  bool ddp = false;                      // replicated data parallelism, whose gradient buckets persist
  const parallel::PipelineParallel* pp;  // null without pipeline stages
  int64_t pp_rank = 0;                   // this rank's place in the pipeline
  // What the optimizer steps: FSDP's shards, else the parameters.
  const std::vector<std::pair<std::string, Tensor>>& optimized;
  int64_t sequences_per_forward = 1;  // local_batch_size, or the pipeline's micro-batch size
  int64_t tokens_per_sequence = 1;    // seq_len over the context-parallel degree
  int64_t micro_batches = 1;          // gradient accumulation steps
  parallel::ActivationCheckpointConfig checkpointing = {};
  DType matmul_dtype = kF32;          // training.mixed_precision_param
  bool reshard_after_forward = true;  // parallelism.fsdp_reshard_after_forward
  std::string scope;                  // what the plan is for, for the log
  // A model that is not a decoder (models/common/decoder.h) names its repeated blocks (FSDP's
  // units) and estimates its activations itself (train/workload.h).
  std::vector<const nn::Module*> blocks = {};
  std::optional<int64_t> activation_bytes = std::nullopt;
  FrozenBytes frozen = {};
};

struct MemoryPlan {
  std::string scope;
  int64_t param_bytes = 0;     // the parameters this rank keeps: FSDP's shards, else its slices
  int64_t gathered_bytes = 0;  // parameters held whole for compute at once (FSDP's all-gathers, bf16 copies)
  int64_t grad_bytes = 0;      // gradients at their most, at the end of backward
  // Of those, what exists while a forward's activations are all held: the gradients of the
  // micro-batches before it under gradient accumulation.
  int64_t held_grad_bytes = 0;
  int64_t optimizer_bytes = 0;   // AdamW's two moments
  int64_t bucket_bytes = 0;      // DDP's flat gradient buckets, made at start-up and kept
  int64_t activation_bytes = 0;  // an estimate of what a step keeps for backward (memory_plan.cpp)
  FrozenBytes frozen = {};
  // Deferred initialisation and the optimizer: the parameters this rank keeps, their moments,
  // DDP's buckets and the frozen models.
  int64_t startup_bytes() const { return param_bytes + optimizer_bytes + bucket_bytes + frozen.kept; }
  // The most a step holds at once: parameters, gathered copies and moments throughout, and at
  // backward's start the activations (with the gradients held), or at its end the gradients, by
  // which time backward has freed the activations; or, while frozen models run before the
  // forward, what they gather and their activations with the gradients held.
  int64_t peak_bytes() const {
    return startup_bytes() + std::max(gathered_bytes + std::max(grad_bytes, held_grad_bytes + activation_bytes),
                                      frozen.gathered + frozen.activations + held_grad_bytes);
  }
};

MemoryPlan plan_memory(const MemoryPlanInputs& in);

// The bytes of named tensors' elements (a module's named_parameters()).
int64_t bytes_of(const std::vector<std::pair<std::string, Tensor>>& named);

// The most FSDP holds gathered at once with reshard_after_forward, in the units of `whole` (all of
// a model) and `blocks` (each block unit): the root unit (what no block holds) and the two largest
// blocks (the one running and the next, prefetched).
int64_t fsdp_gathered_at_most(int64_t whole, std::vector<int64_t> blocks);

// The plan's lines for the start-up log.
void log_memory_plan(const MemoryPlan& plan, std::ostream& log);

// The memory this process may use: the smaller of /proc/meminfo's MemAvailable and the cgroup
// (v2 memory.max, v1 memory.limit_in_bytes) limit when one is set, divided among the ranks the MPI
// launcher started on this node; and where the figure comes from.
struct AvailableMemory {
  int64_t bytes = 0;  // 0: unknown (no /proc/meminfo)
  std::string source;
};
AvailableMemory available_memory();

// Compares the plan's peak with `available`, saying so in `log`. Over it, training.memory_check =
// "refuse" throws a config error with the figures and what to change; "warn" hands that text to
// `warn` and goes on.
void check_memory_plan(const MemoryPlan& plan, const AvailableMemory& available,
                       const std::string& memory_check, std::ostream& log,
                       const std::function<void(const std::string&)>& warn);

}  // namespace titan::train
