#include "titan/rl/grpo_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/core/stopwatch.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/ops/token_log_probs.h"
#include "titan/rl/generate.h"
#include "titan/rl/graph_decoder.h"
#include "titan/rl/policy_loss.h"
#include "titan/rl/prompt_set.h"
#include "titan/rl/reward.h"
#include "titan/rl/saved_model.h"
#include "titan/train/step/eager_step.h"

namespace titan::rl {

namespace {

using Clock = std::chrono::steady_clock;

// splitmix64's finaliser: a seed per (run seed, step, sample) that no two samples share.
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

AdvantageNorm advantage_norm(const std::string& name) {
  if (name == "none") return AdvantageNorm::none;
  if (name == "unbiased_std") return AdvantageNorm::unbiased_std;
  return AdvantageNorm::std;
}

// One completion and what the update needs of it.
struct Rollout {
  const Prompt* prompt = nullptr;
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;
  double reward = 0;
  double advantage = 0;
};

// A reward of 1 (or more) counts as solved: the built-in rewards score 1 or 0.
bool solved(double reward) {
  return reward >= 1.0 - 1e-9;
}

// The step's figures that sum over ranks, in one all-reduce.
struct Sums {
  enum : size_t {
    samples,
    reward,
    reward_sq,
    solved,
    groups,
    groups_equal,
    response_tokens,
    rollout_tokens,
    valid_tokens,
    clipped,
    ratio,
    kl,
    entropy,
    count
  };
  std::vector<double> v = std::vector<double>(count, 0.0);
  double& operator[](size_t i) { return v[i]; }
};

class GrpoStep : public train::StepEngine {
 public:
  explicit GrpoStep(const train::StepParts& parts)
      : cfg_(parts.cfg),
        g_(parts.cfg.grpo),
        model_(parts.model),
        optimizer_(parts.optimizer),
        fsdp_(parts.plans.fsdp.get()),
        dp_(parts.mesh[dist::MeshAxis::dp]),
        tokenizer_(parts.tokenizer),
        log_(parts.log),
        step_(parts.start_step) {
    for (const auto& [name, p] : parts.named_params) params_.push_back(p);
    config::require(
        !parts.plans.tp && !parts.plans.cp && !parts.plans.pp && !parts.plans.ep,
        "training.objective = \"grpo\" splits its work over data-parallel ranks only; set the tensor, "
        "context, pipeline and expert parallel degrees to 1");
    sync_ = train::step_parallelism(parts);
    // A mini-batch is the same prompts whatever the ranks: each rank takes an equal share of each.
    const int64_t shares = g_.mini_batches * dp_.size();
    config::require(g_.prompts_per_step % shares == 0, "grpo.prompts_per_step = ", g_.prompts_per_step,
                    " does not split into grpo.mini_batches = ", g_.mini_batches, " x ", dp_.size(),
                    " data-parallel ranks; pick a multiple of ", shares);
    rows_ = g_.prompts_per_step / dp_.size() * g_.group_size;
    const std::optional<int32_t> eos = tokenizer_.eos_id();
    config::require(eos.has_value(),
                    "GRPO needs a tokenizer with an end-of-sequence token, to end completions: ",
                    tokenizer_.description(), " has none");
    eos_ = *eos;
    // A prompt and its completion, fed back but for its last token, fit the model's positions.
    const int64_t max_prompt = cfg_.training.seq_len + 1 - g_.max_new_tokens;
    config::require(max_prompt >= 1, "grpo.max_new_tokens = ", g_.max_new_tokens,
                    " leaves no room for a prompt within training.seq_len = ", cfg_.training.seq_len);
    prompts_ = read_prompts({.path = g_.prompts_path,
                             .prompt_field = g_.prompt_field,
                             .answer_field = g_.answer_field,
                             .max_prompt_tokens = max_prompt},
                            tokenizer_);
    if (!g_.eval_path.empty())
      eval_ = read_prompts({.path = g_.eval_path,
                            .prompt_field = g_.prompt_field,
                            .answer_field = g_.answer_field,
                            .key = "grpo.eval_path",
                            .limit = g_.eval_prompts,
                            .max_prompt_tokens = max_prompt},
                           tokenizer_);
    reward_ = make_reward({.kind = g_.reward_kind,
                           .marker = g_.reward_marker,
                           .tolerance = g_.reward_tolerance,
                           .relative = g_.reward_relative,
                           .pattern = g_.reward_pattern,
                           .command = g_.reward_command,
                           .timeout_seconds = g_.reward_timeout_seconds});
    // The model is whole on this rank (no FSDP) and read after every step: it generates itself.
    // Otherwise a whole copy does, refreshed from the trained weights.
    if (fsdp_ || g_.max_staleness > 0) {
      Generator init(0);
      generator_copy_ = parts.spec.build(cfg_.model, cfg_.training.seq_len, init);
    }
    if (g_.kl_coef > 0) {
      // The reference is the weights the job started from: the trained model's now, or, on a
      // resume, those of checkpoint.initial_load_path again (the checkpoint keeps no reference).
      Generator init(0);
      reference_ = parts.spec.build(cfg_.model, cfg_.training.seq_len, init);
      if (step_ == 0) {
        pull_weights(*reference_);
      } else {
        config::require(
            !cfg_.checkpoint.initial_load_path.empty(), "grpo.kl_coef = ", g_.kl_coef,
            " on a resumed run that started from random weights: the KL's reference is the weights the "
            "job started from, which no checkpoint keeps; start from checkpoint.initial_load_path");
        autograd::NoGradGuard no_grad;
        const nn::StateDict from =
            load_saved_model(read_saved_model(cfg_.checkpoint.initial_load_path))->state_dict();
        for (auto& [name, t] : reference_->state_dict()) t.copy_(from.at(name));
      }
    }
    if (generator_copy_) pull_weights(*generator_copy_);
    if (g_.generator == "graph") {
      graph::RuntimeOptions runtime =
          graph::parse_runtime_options(cfg_.compile.plugin, cfg_.compile.plugin_options, "compile.plugin_options");
      runtime.xla_options = graph::parse_xla_options(cfg_.compile.xla_options, "compile.xla_options");
      graph_decoder_ = std::make_unique<GraphDecoder>(generator(),
                                                      GraphDecoderOptions{.runtime = runtime,
                                                                          .custom_kernels = cfg_.compile.custom_kernels,
                                                                          .cudnn_attention = cfg_.compile.cudnn_attention},
                                                      &log_);
    }
    log_ << "titan: grpo: " << prompts_.size() << " prompts (" << g_.prompts_path << "), "
         << g_.prompts_per_step << " a step x " << g_.group_size << " completions of up to "
         << g_.max_new_tokens << " tokens at temperature " << g_.temperature << "; reward "
         << reward_->describe() << "; advantages "
         << (g_.advantage_norm == "none" ? "r - mean" : "(r - mean) / (" + g_.advantage_norm + " + 1e-6)")
         << "; clip [1 - " << g_.clip_low << ", 1 + " << g_.clip_high << "]"
         << (g_.kl_coef > 0 ? ", k3 KL x " + std::to_string(g_.kl_coef) : ", no KL") << "; " << g_.ppo_epochs
         << " epoch(s) x " << g_.mini_batches
         << " mini-batch(es) a step; generator: " << (generator_copy_ ? "a whole copy" : "the trained model")
         << ", " << g_.generator
         << (g_.max_staleness > 0 ? ", weights up to " + std::to_string(g_.max_staleness) + " steps old" : "")
         << (eval_.empty()
                 ? ""
                 : "; held-out: " + std::to_string(eval_.size()) + " prompts (" + g_.eval_path + ")")
         << "\n";
    if (!eval_.empty() && g_.eval_every > 0) {
      const double accuracy = evaluate();
      log_ << "titan: grpo: held-out greedy accuracy before training " << accuracy << "\n";
    }
  }

  train::StepStats step(int64_t, const train::NextBatch&) override {
    ++step_;
    if (step_ > 1 && (step_ - 1) % (g_.max_staleness + 1) == 0) refresh_generator();
    Sums sums;
    const auto t0 = Clock::now();
    std::vector<Rollout> rollouts = roll_out(sums);
    const double rollout_seconds = seconds_since(t0);
    score(rollouts, sums);
    const auto t1 = Clock::now();
    train::StepStats stats = update(rollouts, sums);
    const double train_seconds = seconds_since(t1);
    if (!eval_.empty() && g_.eval_every > 0 && step_ % g_.eval_every == 0) {
      refresh_generator();
      stats.extra.emplace_back("eval/accuracy", evaluate());
    }
    if (dp_.size() > 1) {
      Tensor t = Tensor::from_vector(sums.v, {static_cast<int64_t>(sums.v.size())});
      dp_.all_reduce(t, dist::ReduceOp::sum).wait();
      sums.v = t.to_vector<double>();
    }
    const double n = std::max(1.0, sums[Sums::samples]), tokens = std::max(1.0, sums[Sums::valid_tokens]);
    const double mean = sums[Sums::reward] / n;
    const double slowest_rollout =
        dp_.size() > 1 ? dp_.all_reduce(rollout_seconds, dist::ReduceOp::max) : rollout_seconds;
    const double slowest_train =
        dp_.size() > 1 ? dp_.all_reduce(train_seconds, dist::ReduceOp::max) : train_seconds;
    train::Scalars figures = {
        {"reward/mean", mean},
        {"reward/std", std::sqrt(std::max(0.0, sums[Sums::reward_sq] / n - mean * mean))},
        {"reward/accuracy", sums[Sums::solved] / n},
        {"reward/groups_all_equal", sums[Sums::groups_equal] / std::max(1.0, sums[Sums::groups])},
        {"response/length", sums[Sums::response_tokens] / n},
        {"policy/clip_fraction", sums[Sums::clipped] / tokens},
        {"policy/ratio_mean", sums[Sums::ratio] / tokens},
        {"policy/kl", sums[Sums::kl] / tokens},
        {"policy/entropy",
         sums[Sums::entropy] / std::max(1.0, sums[Sums::valid_tokens] / static_cast<double>(g_.ppo_epochs))},
        {"policy/logp_diff_max", logp_diff_max_},
        {"rollout/tokens_per_s", sums[Sums::rollout_tokens] / std::max(1e-9, slowest_rollout)},
        {"train/tokens_per_s", sums[Sums::valid_tokens] / std::max(1e-9, slowest_train)}};
    figures.insert(figures.end(), stats.extra.begin(), stats.extra.end());
    stats.extra = std::move(figures);
    return stats;
  }

  std::string describe() const override {
    return "grpo: rollouts by titan's sampler (" + g_.generator + "), then " +
           std::to_string(g_.ppo_epochs * g_.mini_batches) +
           " eager optimizer step(s) on the clipped ratio loss" +
           (fsdp_            ? ", FSDP-sharded"
            : dp_.size() > 1 ? ", gradients averaged over " + std::to_string(dp_.size()) + " ranks"
                             : "");
  }

 private:
  models::CausalLM& generator() { return generator_copy_ ? *generator_copy_ : model_; }

  // Copies the trained weights (FSDP's gathered whole) into `dst`. Collective under FSDP.
  void pull_weights(models::CausalLM& dst) {
    if (fsdp_) fsdp_->unshard_all();
    {
      autograd::NoGradGuard no_grad;
      const nn::StateDict from = model_.state_dict();
      for (auto& [name, t] : dst.state_dict()) t.copy_(from.at(name));
    }
    if (fsdp_) fsdp_->reshard_all();
  }

  // The generator reads the trained weights: a copy's are pulled in, and graph mode's decoder
  // uploads its model's again (the eager model generating itself reads them as they are).
  void refresh_generator() {
    if (generator_copy_) pull_weights(*generator_copy_);
    if (graph_decoder_) graph_decoder_->reload_weights();
  }

  Decoder& decoder() {
    if (graph_decoder_) return *graph_decoder_;
    if (!eager_decoder_ || &eager_decoder_->model() != &generator())
      eager_decoder_ = std::make_unique<EagerDecoder>(generator());
    return *eager_decoder_;
  }

  GenerateOptions generate_options(double temperature, uint64_t seed) const {
    return {.max_new_tokens = g_.max_new_tokens,
            .eos_ids = {eos_},
            .vocab_size = tokenizer_.vocab_size(),
            .sampling = {.temperature = temperature, .seed = seed}};
  }

  // The prompt at global position `position` of the run: epochs of a seeded permutation.
  const Prompt& prompt_at(int64_t position) {
    const auto n = static_cast<int64_t>(prompts_.size());
    const int64_t epoch = position / n;
    if (epoch != order_epoch_) {
      order_.resize(prompts_.size());
      std::iota(order_.begin(), order_.end(), 0);
      std::mt19937_64 rng(mix(static_cast<uint64_t>(cfg_.training.seed), static_cast<uint64_t>(epoch)));
      for (int64_t i = n - 1; i > 0; --i)
        std::swap(order_[static_cast<size_t>(i)], order_[rng() % static_cast<uint64_t>(i + 1)]);
      order_epoch_ = epoch;
    }
    return prompts_[static_cast<size_t>(order_[static_cast<size_t>(position % n)])];
  }

  std::vector<Rollout> roll_out(Sums& sums) {
    autograd::NoGradGuard no_grad;
    // Mini-batch m is the step's prompts [m * P / M, (m + 1) * P / M); rank r takes the r-th
    // share of each, so that an update sees the same prompts on any number of ranks.
    const int64_t per_mini = g_.prompts_per_step / g_.mini_batches, share = per_mini / dp_.size();
    std::vector<Rollout> out;
    std::vector<uint64_t> seeds;
    for (int64_t k = 0; k < g_.prompts_per_step / dp_.size(); ++k) {
      const int64_t position =
          (step_ - 1) * g_.prompts_per_step + k / share * per_mini + dp_.rank() * share + k % share;
      const Prompt& prompt = prompt_at(position);
      for (int64_t s = 0; s < g_.group_size; ++s) {
        out.push_back({.prompt = &prompt, .tokens = {}, .logprobs = {}});
        seeds.push_back(mix(mix(static_cast<uint64_t>(cfg_.training.seed), static_cast<uint64_t>(step_)),
                            static_cast<uint64_t>(position * g_.group_size + s)));
      }
    }
    // Eager generation draws the completions of all prompts of one length as one batch; graph
    // mode's decoder runs one row at a time.
    std::map<size_t, std::vector<size_t>> by_length;
    for (size_t i = 0; i < out.size(); ++i) by_length[out[i].prompt->ids.size()].push_back(i);
    for (const auto& [length, rows] : by_length) {
      std::vector<GenerateResult> drawn;
      if (graph_decoder_) {
        for (size_t i : rows)
          drawn.push_back(
              generate(*graph_decoder_, out[i].prompt->ids, generate_options(g_.temperature, seeds[i])));
      } else {
        std::vector<std::span<const int64_t>> prompts;
        std::vector<uint64_t> row_seeds;
        for (size_t i : rows) {
          prompts.emplace_back(out[i].prompt->ids);
          row_seeds.push_back(seeds[i]);
        }
        drawn = generate_rows(generator(), prompts, row_seeds, generate_options(g_.temperature, 0));
      }
      for (size_t j = 0; j < rows.size(); ++j) {
        Rollout& r = out[rows[j]];
        sums[Sums::rollout_tokens] += static_cast<double>(drawn[j].tokens.size());
        r.tokens = std::move(drawn[j].tokens);
        r.logprobs = std::move(drawn[j].logprobs);
      }
    }
    return out;
  }

  // The completion's text for the reward: its tokens without the eos that ended it.
  std::string completion_text(const std::vector<int64_t>& tokens) const {
    std::vector<int32_t> ids(tokens.begin(), tokens.end());
    if (!ids.empty() && ids.back() == eos_) ids.pop_back();
    return tokenizer_.decode(ids);
  }

  std::vector<double> rewards_of(const std::vector<const Prompt*>& prompts,
                                 const std::vector<std::vector<int64_t>>& tokens) {
    std::vector<RewardInput> inputs;
    inputs.reserve(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      inputs.push_back({.prompt = prompts[i]->text,
                        .completion = completion_text(tokens[i]),
                        .answer = prompts[i]->answer});
    return reward_->score(inputs);
  }

  void score(std::vector<Rollout>& rollouts, Sums& sums) {
    std::vector<const Prompt*> prompts;
    std::vector<std::vector<int64_t>> tokens;
    for (const Rollout& r : rollouts) {
      prompts.push_back(r.prompt);
      tokens.push_back(r.tokens);
    }
    const std::vector<double> rewards = rewards_of(prompts, tokens);
    const std::vector<double> advantages =
        group_advantages(rewards, g_.group_size, advantage_norm(g_.advantage_norm));
    for (size_t i = 0; i < rollouts.size(); ++i) {
      Rollout& r = rollouts[i];
      r.reward = rewards[i];
      r.advantage = advantages[i];
      sums[Sums::samples] += 1;
      sums[Sums::reward] += r.reward;
      sums[Sums::reward_sq] += r.reward * r.reward;
      sums[Sums::solved] += solved(r.reward) ? 1 : 0;
      sums[Sums::response_tokens] += static_cast<double>(r.tokens.size());
    }
    for (size_t g = 0; g < rollouts.size(); g += static_cast<size_t>(g_.group_size)) {
      sums[Sums::groups] += 1;
      const auto first = rewards.begin() + static_cast<std::ptrdiff_t>(g);
      const bool equal = std::all_of(first, first + g_.group_size, [&](double v) { return v == *first; });
      sums[Sums::groups_equal] += equal ? 1 : 0;
    }
  }

  // The rollouts as training rows as long as the longest (at most training.seq_len): inputs (the
  // prompt and the completion but its last token, padded with eos), labels (-100 but under the
  // completion), the generator's log-probabilities there, and each row's advantage.
  struct Rows {
    Tensor inputs, labels, old_logp, mask, advantages;
  };
  Rows rows_of(const std::vector<Rollout>& rollouts) const {
    const int64_t R = static_cast<int64_t>(rollouts.size());
    int64_t L = 1;
    for (const Rollout& r : rollouts)
      L = std::max(L, static_cast<int64_t>(r.prompt->ids.size() + r.tokens.size()) - 1);
    std::vector<int64_t> inputs(static_cast<size_t>(R * L), eos_), labels(static_cast<size_t>(R * L), -100);
    std::vector<float> old(static_cast<size_t>(R * L), 0.f), mask(static_cast<size_t>(R * L), 0.f), adv;
    for (int64_t r = 0; r < R; ++r) {
      const Rollout& ro = rollouts[static_cast<size_t>(r)];
      std::vector<int64_t> seq = ro.prompt->ids;
      seq.insert(seq.end(), ro.tokens.begin(), ro.tokens.end());
      const auto P = static_cast<int64_t>(ro.prompt->ids.size());
      for (int64_t t = 0; t + 1 < static_cast<int64_t>(seq.size()); ++t) {
        const size_t at = static_cast<size_t>(r * L + t);
        inputs[at] = seq[static_cast<size_t>(t)];
        if (t + 1 >= P) {
          labels[at] = seq[static_cast<size_t>(t + 1)];
          old[at] = static_cast<float>(ro.logprobs[static_cast<size_t>(t + 1 - P)]);
          mask[at] = 1.f;
        }
      }
      adv.push_back(static_cast<float>(ro.advantage));
    }
    return {.inputs = Tensor::from_vector(inputs, {R, L}),
            .labels = Tensor::from_vector(labels, {R, L}),
            .old_logp = Tensor::from_vector(old, {R, L}),
            .mask = Tensor::from_vector(mask, {R, L}),
            .advantages = Tensor::from_vector(adv, {R})};
  }

  // The logits of the tokenizer's ids alone, as the generator draws among those: what the
  // log-probabilities and the entropy are taken over.
  Tensor tokenizer_logits(const Tensor& logits) const {
    const int64_t vocab = tokenizer_.vocab_size();
    return logits.size(-1) == vocab ? logits : logits.narrow(-1, 0, vocab).contiguous();
  }

  train::StepStats update(const std::vector<Rollout>& rollouts, Sums& sums) {
    const Rows rows = rows_of(rollouts);
    const int64_t per_mini = rows_ / g_.mini_batches, micro = cfg_.training.local_batch_size;
    const PolicyLossOptions loss_options{.clip_low = g_.clip_low,
                                         .clip_high = g_.clip_high,
                                         .dual_clip = g_.dual_clip,
                                         .kl_coef = g_.kl_coef,
                                         .log_ratio_clamp = g_.log_ratio_clamp};
    train::StepStats stats;
    double loss_total = 0, aux_total = 0;
    bool has_aux = false;
    logp_diff_max_ = 0;
    for (int64_t epoch = 0; epoch < g_.ppo_epochs; ++epoch) {
      for (int64_t m = 0; m < g_.mini_batches; ++m) {
        const int64_t first = m * per_mini;
        // GRPO's loss is a sum over the valid tokens of every rank, divided by their number; the
        // data-parallel reduction averages the ranks' gradients, so each rank divides by that
        // number over the ranks.
        const double valid = ops::sum(rows.mask.narrow(0, first, per_mini)).item();
        const double global_valid = dp_.size() > 1 ? dp_.all_reduce(valid, dist::ReduceOp::sum) : valid;
        const double normaliser = std::max(1.0, global_valid) / static_cast<double>(dp_.size());
        optimizer_.zero_grad();
        double loss_sum = 0;
        for (int64_t start = first; start < first + per_mini; start += micro) {
          const int64_t n = std::min(micro, first + per_mini - start);
          const Tensor inputs = rows.inputs.narrow(0, start, n), labels = rows.labels.narrow(0, start, n);
          const Tensor old = rows.old_logp.narrow(0, start, n), mask = rows.mask.narrow(0, start, n);
          const Tensor logits = tokenizer_logits(model_(inputs));
          const Tensor logp = ops::token_log_probs(logits, labels, g_.temperature);
          Tensor ref;
          if (reference_) {
            autograd::NoGradGuard no_grad;
            ref = ops::token_log_probs(tokenizer_logits((*reference_)(inputs)), labels, g_.temperature);
          }
          PolicyLossStats ps;
          Tensor loss = policy_loss(logp, old, rows.advantages.narrow(0, start, n), mask, ref, loss_options,
                                    normaliser, &ps);
          if (Tensor aux = model_.auxiliary_loss(); aux.defined()) {
            has_aux = true;
            aux_total += aux.item();
            loss = loss + aux;
          }
          loss_sum += loss.item();
          sums[Sums::valid_tokens] += static_cast<double>(ps.tokens);
          sums[Sums::clipped] += ps.clip_fraction * static_cast<double>(ps.tokens);
          sums[Sums::ratio] += ps.ratio_mean * static_cast<double>(ps.tokens);
          sums[Sums::kl] += ps.kl_mean * static_cast<double>(ps.tokens);
          if (epoch == 0) {
            autograd::NoGradGuard no_grad;
            const std::vector<float> h = ops::token_entropy(logits, g_.temperature).to_vector<float>();
            const std::vector<float> w = mask.contiguous().to_vector<float>();
            for (size_t i = 0; i < h.size(); ++i) sums[Sums::entropy] += w[i] * h[i];
            if (m == 0) {
              // Before this step's first update: the generator's log-probabilities against the
              // trainer's of the same tokens.
              const std::vector<float> a = logp.contiguous().to_vector<float>(),
                                       b = old.contiguous().to_vector<float>();
              for (size_t i = 0; i < a.size(); ++i)
                if (w[i] > 0)
                  logp_diff_max_ = std::max(logp_diff_max_, static_cast<double>(std::fabs(a[i] - b[i])));
            }
          }
          if (sync_.before_backward) sync_.before_backward(start + n == first + per_mini);
          loss.backward();
        }
        stats.grad_norm = train::apply_gradients(optimizer_, params_, cfg_.training.max_norm, sync_);
        loss_total += loss_sum;
        for (auto& scalar : model_.end_step()) stats.extra.push_back(std::move(scalar));
      }
    }
    if (dp_.size() > 1) logp_diff_max_ = dp_.all_reduce(logp_diff_max_, dist::ReduceOp::max);
    const double updates = static_cast<double>(g_.ppo_epochs * g_.mini_batches);
    stats.loss = loss_total / updates;
    if (has_aux) stats.extra.insert(stats.extra.begin(), {"aux_loss", aux_total / updates});
    stats.tokens = rows_ * rows.inputs.size(1) * g_.ppo_epochs;
    return stats;
  }

  // Greedy accuracy on the held-out prompts, split over the data-parallel ranks.
  double evaluate() {
    autograd::NoGradGuard no_grad;
    std::vector<const Prompt*> prompts;
    std::vector<std::vector<int64_t>> tokens;
    for (size_t i = static_cast<size_t>(dp_.rank()); i < eval_.size(); i += static_cast<size_t>(dp_.size())) {
      prompts.push_back(&eval_[i]);
      tokens.push_back(generate(decoder(), eval_[i].ids, generate_options(0.0, 0)).tokens);
    }
    double right = 0;
    if (!prompts.empty())
      for (double r : rewards_of(prompts, tokens)) right += solved(r) ? 1 : 0;
    if (dp_.size() > 1) right = dp_.all_reduce(right, dist::ReduceOp::sum);
    return right / static_cast<double>(eval_.size());
  }

  const train::JobConfig& cfg_;
  const train::GrpoConfig& g_;
  models::CausalLM& model_;
  optim::AdamW& optimizer_;
  parallel::FullyShard* fsdp_;
  dist::ProcessGroup dp_;
  const data::Tokenizer& tokenizer_;
  std::ostream& log_;
  int64_t step_;
  std::vector<Tensor> params_;
  train::StepParallelism sync_;
  int64_t rows_ = 0;  // completions per rank per step
  int32_t eos_ = 0;
  std::vector<Prompt> prompts_, eval_;
  std::unique_ptr<Reward> reward_;
  std::shared_ptr<models::CausalLM> generator_copy_, reference_;
  std::unique_ptr<GraphDecoder> graph_decoder_;
  std::unique_ptr<EagerDecoder> eager_decoder_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
  double logp_diff_max_ = 0;
};

}  // namespace

std::unique_ptr<train::StepEngine> make_grpo_engine(const train::StepParts& parts) {
  return std::make_unique<GrpoStep>(parts);
}

train::MakeEngine objective_engine(const train::JobConfig& cfg) {
  if (cfg.training.objective != "grpo") return nullptr;
  return make_grpo_engine;
}

}  // namespace titan::rl
