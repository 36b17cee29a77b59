#include "titan/dist/dist_config.h"

namespace titan::dist {

void declare_keys(config::Keys<ParallelismConfig>& keys) {
  using C = ParallelismConfig;
  keys.add("data_parallel_replicate_degree", &C::data_parallel_replicate_degree, config::at_least_one(),
           "replicas of the weights (DDP, or HSDP with sharding)")
      .add("data_parallel_shard_degree", &C::data_parallel_shard_degree,
           config::or_minus_one(config::at_least_one()),
           "ranks the weights are sharded over (FSDP); -1: the ranks left over")
      .add("fsdp_reshard_after_forward", &C::fsdp_reshard_after_forward,
           config::one_of({"default", "always", "never"}),
           "free gathered weights after forward (default and always), or keep them for backward (never)")
      .add("tensor_parallel_degree", &C::tensor_parallel_degree, config::at_least_one(),
           "ranks each layer's matmuls are split over")
      .add("enable_sequence_parallel", &C::enable_sequence_parallel, {},
           "with tensor parallelism, split norms and the residual stream over the sequence (seq_len must "
           "divide by tensor_parallel_degree)")
      .add("disable_loss_parallel", &C::disable_loss_parallel, {},
           "with tensor parallelism, gather the logits for the loss instead of computing it over the split "
           "vocabulary")
      .add("pipeline_parallel_degree", &C::pipeline_parallel_degree, config::at_least_one(),
           "pipeline stages (ranks)")
      .add("pipeline_parallel_schedule", &C::pipeline_parallel_schedule,
           config::one_of({"GPipe", "1F1B", "Interleaved1F1B", "ZBH1", "ZBVZeroBubble"}),
           "pipeline schedule: GPipe, 1F1B, Interleaved1F1B (several stages per rank), ZBH1 and ZBVZeroBubble "
           "(zero-bubble: weight gradients deferred into the bubbles)")
      .add("pipeline_parallel_microbatch_size", &C::pipeline_parallel_microbatch_size, config::positive(),
           "sequences per pipeline micro-batch; divides local_batch_size")
      .add("pipeline_parallel_split_points", &C::pipeline_parallel_split_points, {},
           "comma-separated first layers of the stages after the first (\"layers.4,layers.8\"); empty: an even "
           "split")
      .add("context_parallel_degree", &C::context_parallel_degree, config::at_least_one(),
           "ranks each sequence is split over (ring attention)")
      .add("expert_parallel_degree", &C::expert_parallel_degree, config::at_least_one(),
           "of the data_parallel_shard_degree ranks, how many the experts of MoE layers are split over "
           "(TorchTitan's layout: a divisor of dp_shard; everything else stays FSDP-sharded over all of dp_shard)")
      .add("expert_tensor_parallel_degree", &C::expert_tensor_parallel_degree, config::at_least_one(),
           "tensor-parallel ranks each expert is split over (TorchTitan's ETP); titan keeps experts whole over "
           "tp, so only 1");
}

void declare_keys(config::Keys<CommConfig>& keys) {
  keys.add("timeout_seconds", &CommConfig::timeout_seconds, config::positive(),
           "a collective still waiting after this long fails, naming the ranks that did not answer");
}

}  // namespace titan::dist
