#include "titan/train/validator.h"

#include <algorithm>
#include <chrono>
#include <ostream>
#include <utility>

#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/ops/loss.h"
#include "titan/parallel/fully_shard.h"
#include "titan/parallel/tensor_parallel.h"
#include "titan/train/config/job_config.h"
#include "titan/train/objective_data.h"

namespace titan::train {

namespace {

// The model in eval mode for a scope, back in the mode it was in after.
class EvalMode {
 public:
  explicit EvalMode(nn::Module& m) : module_(m), was_training_(m.is_training()) { module_.eval(); }
  ~EvalMode() { module_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  nn::Module& module_;
  bool was_training_;
};

// Checked before the loader exists, so that a set too small is reported as validation's.
data::DataLoader make_loader(const ValidationConfig& cfg, data::TokenStream tokens, int32_t eos_id,
                             const dist::ProcessGroup& dp, data::LossMask loss_mask) {
  const int64_t per_batch = cfg.local_batch_size * dp.size();
  // tokens >= per_batch * seq_len + 1, without the product, which can overflow.
  TITAN_CHECK(tokens.size() >= 1 && (tokens.size() - 1) / per_batch >= cfg.seq_len,
              "validation: the validation set holds ", tokens.size(), " tokens, too few for one batch of ",
              per_batch, " windows (validation.local_batch_size ", cfg.local_batch_size, " x ", dp.size(),
              " data-parallel ranks) of validation.seq_len ", cfg.seq_len,
              " tokens and one more; lower validation.local_batch_size or validation.seq_len, or give a "
              "larger validation set");
  return data::DataLoader(std::move(tokens), {.seq_len = cfg.seq_len,
                                              .local_batch_size = cfg.local_batch_size,
                                              .shuffle = false,
                                              .dp_rank = dp.rank(),
                                              .dp_world = dp.size(),
                                              .eos_id = eos_id},
                          std::move(loss_mask));
}

// Labels other than -100 (ops::cross_entropy's ignore_index).
int64_t count_loss_labels(const Tensor& labels) {
  const int64_t* l = labels.data<int64_t>();
  return labels.numel() - std::count(l, l + labels.numel(), int64_t{-100});
}

}  // namespace

Validator::Validator(const ValidationConfig& cfg, data::TokenStream tokens, int32_t eos_id,
                     dist::ProcessGroup dp, data::LossMask loss_mask)
    : cfg_(cfg),
      dp_(std::move(dp)),
      loader_(make_loader(cfg_, std::move(tokens), eos_id, dp_, std::move(loss_mask))) {
  const int64_t per_batch = cfg_.local_batch_size * dp_.size();
  const int64_t whole = loader_.num_windows() / per_batch;
  TITAN_CHECK(cfg_.steps <= whole, "validation.steps = ", cfg_.steps, " batches of ", per_batch,
              " windows exceed the validation set, which holds ", whole, " (", loader_.num_windows(),
              " windows of validation.seq_len ", cfg_.seq_len,
              " tokens and one more); lower validation.steps, or set it to -1 to read the whole set once");
  batches_ = cfg_.steps == -1 ? whole : cfg_.steps;
}

int64_t Validator::windows_left_out() const {
  return loader_.num_windows() - batches_ * cfg_.local_batch_size * dp_.size();
}

bool Validator::should_validate(int64_t step, int64_t last_step) const {
  return step % cfg_.freq == 0 || step == last_step;
}

ValidationMetrics Validator::validate(int64_t step, models::CausalLM& model, parallel::FullyShard* fsdp,
                                      const parallel::TensorParallel* tp) {
  const auto t0 = std::chrono::steady_clock::now();
  loader_.set_state({});
  // Each batch's mean as training computes its loss (the kernel sums in double, the mean is f32),
  // weighted by its labels that carry loss and summed in double over batches and ranks.
  double loss_sum = 0;
  int64_t tokens = 0;
  {
    autograd::NoGradGuard no_grad;
    EvalMode eval(model);
    for (int64_t b = 0; b < batches_; ++b) {
      data::Batch batch = loader_.next();
      const Tensor logits = model(batch.inputs, batch.document_ids);
      const Tensor loss = tp ? tp->loss(logits, batch.labels) : ops::cross_entropy(logits, batch.labels);
      const int64_t counted = count_loss_labels(batch.labels);
      loss_sum += loss.item() * static_cast<double>(counted);
      tokens += counted;
    }
  }
  if (fsdp) fsdp->reshard_all();
  if (dp_.size() > 1) {
    loss_sum = dp_.all_reduce(loss_sum, dist::ReduceOp::sum);
    tokens = static_cast<int64_t>(dp_.all_reduce(static_cast<double>(tokens), dist::ReduceOp::sum));
  }
  return {.step = step,
          .loss = loss_sum / static_cast<double>(tokens),
          .tokens = tokens,
          .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

std::unique_ptr<Validator> make_validator(const JobConfig& cfg, const data::DatasetOptions& training_options,
                                          const data::Dataset& training_data,
                                          const data::Tokenizer& tokenizer, int32_t eos_id,
                                          dist::ProcessGroup dp, std::ostream& log) {
  if (!cfg.validation.enable) return nullptr;
  ValidationConfig v = cfg.validation;
  v.seq_len = v.seq_len_with(cfg.training.seq_len);
  const data::DatasetOptions options = v.dataset_options(cfg.data);
  // Both read in [training]'s format: the same path gives the same tokens.
  const bool shared = options.path == training_options.path &&
                      (cfg.training.objective != "sft" || v.seq_len == cfg.training.seq_len);
  const data::Dataset ds =
      shared ? training_data : load_objective_data(cfg, options, tokenizer, v.seq_len).dataset;
  auto validator = std::make_unique<Validator>(v, ds.stream, eos_id, std::move(dp), ds.loss_mask);
  log << "titan: validation every " << v.freq << " steps and after the last: " << v.dataset << " ("
      << options.path << ")" << (shared ? " (the training data)" : "") << ", " << validator->num_batches()
      << " batches of " << v.local_batch_size << " x " << v.seq_len << " tokens per rank";
  if (v.steps == -1 && validator->windows_left_out() > 0)
    log << " (the whole set but its last " << validator->windows_left_out() << " windows)";
  log << "\n";
  if (!shared && !ds.stats.skipped.empty())
    log << "titan: validation data: " << ds.stats.skipped_summary() << " (training.bad_data = skip)\n";
  return validator;
}

}  // namespace titan::train
