#pragma once
// The validation loop, as TorchTitan's Validator: after every validation.freq-th step and after
// the last, the model's mean cross-entropy per token over a held-out set, with its perplexity.
//
// A pass leaves training as it found it. Its own loader, rewound before each pass, reads the set
// in stream order, so every pass sees the same batches whatever training.seed. The forward
// records no autograd graph and runs with the model in eval mode, so MoE layers count none of its
// tokens towards the step's expert load or the expert bias; nothing draws from an RNG. Under FSDP
// the blocks free their gathered parameters after forward as in training (no gradient hook is
// installed without a graph), and the root unit, which training frees after backward, is freed
// at the end of the pass. The loss is the cross-entropy alone: an MoE model's auxiliary loss is
// a training objective, not a measure of the text.
#include <cstdint>
#include <iosfwd>
#include <memory>

#include "titan/data/dataset.h"
#include "titan/data/loader.h"
#include "titan/dist/process_group.h"
#include "titan/models/causal_lm.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/config/validation_config.h"

namespace titan::parallel {
class FullyShard;
class TensorParallel;
}  // namespace titan::parallel

namespace titan::train {

struct JobConfig;

class Validator {
 public:
  // Over `tokens` cut as data::DataLoader cuts them, in stream order: window w holds tokens
  // [w * seq_len, (w + 1) * seq_len], and batch b is windows [b * N, (b + 1) * N) with
  // N = dp.size() * local_batch_size, of which dp rank r reads the r-th slice. With eos_id >= 0
  // batches carry document ids, as training's do under attention.document_masking. A pass is
  // validation.steps batches, or (-1) all the whole batches the set holds; windows after the last
  // whole batch are left out. Throws when the set holds no whole batch, or fewer than steps.
  // cfg.seq_len is a length here: make_validator resolves -1 (training.seq_len). With a loss mask
  // (SFT), labels that carry no loss are ignored, as in training, and the loss is the mean over
  // the others.
  Validator(const ValidationConfig& cfg, data::TokenStream tokens, int32_t eos_id, dist::ProcessGroup dp,
            data::LossMask loss_mask = nullptr);

  // After every freq-th step and after `last_step`.
  bool should_validate(int64_t step, int64_t last_step) const;

  // One pass after training step `step`. Collective over the dp group: every rank returns the
  // loss averaged over the tokens of all ranks (and its own time). `fsdp` is the model's
  // sharding, `tp` its tensor parallelism (whose loss reads split logits), null without.
  ValidationMetrics validate(int64_t step, models::CausalLM& model, parallel::FullyShard* fsdp = nullptr,
                             const parallel::TensorParallel* tp = nullptr);

  int64_t num_batches() const { return batches_; }
  // Windows of the set that no pass reads (after the last whole batch, with validation.steps -1).
  int64_t windows_left_out() const;

 private:
  ValidationConfig cfg_;
  dist::ProcessGroup dp_;
  data::DataLoader loader_;
  int64_t batches_ = 0;
};

// The trainer's validator: null unless validation.enable. The set is what validation.dataset and
// dataset_path name, read in [training]'s format and as training.objective reads data; when that is
// the training data (under sft, packed to the same seq_len), its tokens are shared rather than read
// again. Logs what it validates on to `log`.
std::unique_ptr<Validator> make_validator(const JobConfig& cfg, const data::DatasetOptions& training_options,
                                          const data::Dataset& training_data,
                                          const data::Tokenizer& tokenizer, int32_t eos_id,
                                          dist::ProcessGroup dp, std::ostream& log);

}  // namespace titan::train
