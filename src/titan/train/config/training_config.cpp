#include "titan/train/config/training_config.h"

#include "titan/core/error.h"

namespace titan::train {

std::vector<std::string> training_objectives() {
  return {"causal_lm", "sft", "grpo"};
}

void declare_keys(config::Keys<TrainingConfig>& keys) {
  using C = TrainingConfig;
  keys.add("objective", &C::objective, config::one_of(training_objectives()),
           "what the loss trains: causal_lm (every next token of the data), sft (the completions of "
           "prompt/completion examples, read as [sft] says) or grpo (GRPO post-training on [grpo]'s prompts, "
           "rollouts drawn by the model itself and scored by [grpo]'s reward)")
      .add("local_batch_size", &C::local_batch_size, config::positive(), "sequences per rank per micro-batch")
      .add("global_batch_size", &C::global_batch_size, config::or_minus_one(config::positive()),
           "sequences per optimizer step over all ranks; -1: local x data-parallel x accumulation")
      .add("gradient_accumulation_steps", &C::gradient_accumulation_steps, config::at_least_one(),
           "micro-batches per optimizer step; unset: 1, or derived from global_batch_size")
      .add("seq_len", &C::seq_len, config::positive(), "tokens per sequence")
      .add("steps", &C::steps, config::positive(), "optimizer steps to train")
      .add("max_norm", &C::max_norm, config::positive(), "clip the global gradient norm to this")
      .add("mixed_precision_param", &C::mixed_precision_param, config::one_of({"float32", "bfloat16"}),
           "dtype the matrix products of forward and backward multiply in (bfloat16: bf16 operands, float32 "
           "accumulation, weights, activations, reductions and optimizer; needs AVX512-BF16 or AMX)")
      .add("mixed_precision_reduce", &C::mixed_precision_reduce, config::one_of({"float32"}),
           "dtype FSDP reduce-scatters and averages gradients in; float32 only (bf16 reduction is not built)")
      .add("seed", &C::seed, config::non_negative(), "seed of initialisation and data order")
      .add("memory_check", &C::memory_check, config::one_of({"refuse", "warn"}),
           "when this rank's memory plan exceeds the memory available at start-up: refuse (stop with the "
           "figures) or warn (go ahead)");
}

BatchPlan plan_batches(const TrainingConfig& t, int64_t dp_degree) {
  TITAN_CHECK(dp_degree >= 1, "plan_batches: the data-parallel degree must be at least 1, got ", dp_degree);
  int64_t per_micro_batch = t.local_batch_size * dp_degree;
  if (t.global_batch_size == -1) {
    int64_t accumulation = t.gradient_accumulation_steps.value_or(1);
    return {per_micro_batch * accumulation, accumulation};
  }
  TITAN_CHECK(t.global_batch_size % per_micro_batch == 0,
              "training.global_batch_size = ", t.global_batch_size,
              " is not a multiple of training.local_batch_size (", t.local_batch_size,
              ") x data-parallel degree (", dp_degree, ") = ", per_micro_batch, "; set it to a multiple of ",
              per_micro_batch, ", or to -1 to derive it");
  int64_t accumulation = t.global_batch_size / per_micro_batch;
  TITAN_CHECK(!t.gradient_accumulation_steps || *t.gradient_accumulation_steps == accumulation,
              "training.gradient_accumulation_steps = ", t.gradient_accumulation_steps.value_or(0),
              " disagrees with training.global_batch_size / (local_batch_size x data-parallel degree) = ",
              t.global_batch_size, " / (", t.local_batch_size, " x ", dp_degree, ") = ", accumulation,
              "; set one of the two, not both");
  return {t.global_batch_size, accumulation};
}

}  // namespace titan::train
