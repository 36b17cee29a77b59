#pragma once
// GRPO's numerical core: group-relative advantages and the clipped per-token policy-gradient loss
// (DAPO's asymmetric clip, VeRL's dual clip, an optional k3 KL to a frozen reference).
#include <cstdint>
#include <span>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::rl {

// What a group's centred rewards are divided by: nothing (TorchTitan's default), the population
// std (TorchTitan's option), or the unbiased std (VeRL's GRPO).
enum class AdvantageNorm { none, std, unbiased_std };

// rewards: consecutive groups of group_size (the G samples of one prompt). Per reward,
// A = r - mean(its group), divided by (std + eps) per `norm` (eps >= 0). A group whose rewards are
// all equal gets zeros. rewards.size() must be a multiple of group_size; unbiased_std needs
// group_size >= 2.
std::vector<double> group_advantages(std::span<const double> rewards, int64_t group_size, AdvantageNorm norm,
                                     double eps = 1e-6);

struct PolicyLossOptions {
  double clip_low = 0.2, clip_high = 0.2;  // the ratio is clipped to [1 - clip_low, 1 + clip_high]
  double dual_clip = 0;                    // VeRL's c (> 1) bounding the loss of A < 0 at -c * A; 0: off
  double kl_coef = 0;                      // weight of the k3 KL to the reference; needs ref_logp when > 0
  double log_ratio_clamp = 20;             // |logp - old_logp| is clamped to this before exp
};

// Over this call's valid tokens (mask 1; the means are 0 when there are none); a caller with
// several ranks or micro-batches combines them weighted by `tokens`.
struct PolicyLossStats {
  double clip_fraction = 0;  // share of tokens where a clip (either, or the dual clip) was taken
  double ratio_mean = 0;     // mean of exp(clamped logp - old_logp)
  double kl_mean = 0;        // mean k3 to the reference; 0 without ref_logp
  int64_t tokens = 0;
};

// The clipped-ratio loss summed over valid tokens and divided by `normaliser` (the caller passes
// the global count of valid tokens, so that ranks and micro-batches add up). Per token:
//   log_ratio = clamp(logp - old_logp, +-log_ratio_clamp), r = exp(log_ratio)
//   pg = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A); with dual clip c and A < 0,
//   pg = min(pg, -c * A)
//   k3 = min(exp(d) - d - 1, 10) with d = clamp(ref - logp, +-20) (VeRL's low_var_kl)
//   loss += mask * (pg + kl_coef * k3) / normaliser
// logp [B, T] (f32 or f64; the only input that receives a gradient), old_logp and mask [B, T]
// (mask entries 0 or 1), advantages [B] (one per sequence), ref_logp [B, T] or undefined (needed
// when kl_coef > 0). Returns a scalar of logp's dtype; fills `stats` when given. Masked-out tokens
// are skipped, whatever their values.
Tensor policy_loss(const Tensor& logp, const Tensor& old_logp, const Tensor& advantages, const Tensor& mask,
                   const Tensor& ref_logp, const PolicyLossOptions& opts, double normaliser,
                   PolicyLossStats* stats = nullptr);

}  // namespace titan::rl
