#pragma once
// The [parallelism] and [comm] sections: how ranks split the work, and how long a collective may
// wait.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::dist {

struct ParallelismConfig {
  int64_t data_parallel_replicate_degree = 1;
  int64_t data_parallel_shard_degree = -1;  // -1: the ranks the other degrees leave
  std::string fsdp_reshard_after_forward = "default";
  int64_t tensor_parallel_degree = 1;
  // With tensor parallelism: split the residual stream and its norms over the sequence between
  // the split regions (Megatron's sequence parallelism), which divides their activation memory
  // by the degree at the same traffic.
  bool enable_sequence_parallel = true;
  // With tensor parallelism: gather the logits and take the ordinary cross-entropy, instead of
  // computing it over the vocabulary split (TorchTitan's key).
  bool disable_loss_parallel = false;
  int64_t pipeline_parallel_degree = 1;
  std::string pipeline_parallel_schedule = "1F1B";
  int64_t pipeline_parallel_microbatch_size = 1;
  // Where each stage after the first begins, comma-separated ("layers.4,layers.8"); empty: the
  // layers split evenly.
  std::string pipeline_parallel_split_points = "";
  int64_t context_parallel_degree = 1;
  int64_t expert_parallel_degree = 1;
  // TorchTitan's key, so that its MoE configs carry over: titan never splits experts over the
  // tensor-parallel ranks, which is its value 1.
  int64_t expert_tensor_parallel_degree = 1;
};

struct CommConfig {
  // A collective that has not completed after this long fails, naming the ranks that did not
  // answer, instead of hanging.
  double timeout_seconds = 300;
};

void declare_keys(config::Keys<ParallelismConfig>& keys);
void declare_keys(config::Keys<CommConfig>& keys);

}  // namespace titan::dist
