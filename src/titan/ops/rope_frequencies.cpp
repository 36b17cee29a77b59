#include "titan/ops/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "titan/core/error.h"

namespace titan::ops {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Clang before 17 has no aggregate deduction (P1816), so the guide is spelled out.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// theta^(-2i / dim) for each pair i < dim / 2: the unscaled frequencies.
std::vector<double> base_frequencies(double theta, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  return f;
}

double llama3_scaled(double freq, const RopeScaling& s) {
  const double orig = static_cast<double>(s.original_max_position);
  const double wavelen = 2 * std::numbers::pi / freq;
  if (wavelen < orig / s.high_freq_factor) return freq;
  if (wavelen > orig / s.low_freq_factor) return freq / s.factor;
  const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * freq / s.factor + smooth * freq;
}

RopeFrequencies llama3(const RopeSpec& spec, const RopeScaling& s) {
  TITAN_CHECK(s.factor > 0 && s.original_max_position > 0 && s.low_freq_factor > 0 &&
                  s.high_freq_factor > s.low_freq_factor,
              "RoPE \"llama3\" scaling needs factor > 0, original_max_position > 0 and "
              "0 < low_freq_factor < high_freq_factor; got factor ",
              s.factor, ", original_max_position ", s.original_max_position, ", low_freq_factor ",
              s.low_freq_factor, ", high_freq_factor ", s.high_freq_factor);
  RopeFrequencies out{base_frequencies(spec.theta, spec.rotated())};
  for (double& f : out.inv_freq) f = llama3_scaled(f, s);
  return out;
}

RopeFrequencies linear(const RopeSpec& spec, const RopeLinear& s) {
  TITAN_CHECK(s.factor > 0, "RoPE \"linear\" scaling needs factor > 0, got ", s.factor);
  RopeFrequencies out{base_frequencies(spec.theta, spec.rotated())};
  for (double& f : out.inv_freq) f /= s.factor;
  return out;
}

// theta * (factor * len / max_position_embeddings - (factor - 1))^(dim / (dim - 2)), with len
// the table's length but at least max_position_embeddings (where the rule is the identity).
RopeFrequencies dynamic(const RopeSpec& spec, const RopeDynamic& s, int64_t max_seq) {
  const int64_t dim = spec.rotated();
  TITAN_CHECK(s.factor > 0 && s.max_position_embeddings > 0 && dim > 2,
              "RoPE \"dynamic\" scaling needs factor > 0, max_position_embeddings > 0 and more than 2 "
              "rotated dims (its exponent is dim / (dim - 2)); got factor ",
              s.factor, ", max_position_embeddings ", s.max_position_embeddings, ", rotated dims ", dim);
  const double len = static_cast<double>(std::max(max_seq, s.max_position_embeddings));
  const double mpe = static_cast<double>(s.max_position_embeddings);
  const double d = static_cast<double>(dim);
  const double theta = spec.theta * std::pow(s.factor * len / mpe - (s.factor - 1), d / (d - 2));
  return {base_frequencies(theta, dim)};
}

// YaRN's attention scale: 0.1 m ln(s) + 1, and 1 for s <= 1.
double yarn_mscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

RopeFrequencies yarn(const RopeSpec& spec, const RopeYarn& s) {
  TITAN_CHECK(s.factor > 0 && s.original_max_position > 0 && s.beta_fast > 0 && s.beta_slow > 0,
              "RoPE \"yarn\" scaling needs factor, original_max_position, beta_fast and beta_slow > 0; got "
              "factor ",
              s.factor, ", original_max_position ", s.original_max_position, ", beta_fast ", s.beta_fast,
              ", beta_slow ", s.beta_slow);
  const int64_t dim = spec.rotated();
  const double d = static_cast<double>(dim);
  const double orig = static_cast<double>(s.original_max_position);
  // The dim whose frequency turns `turns` times over the original context.
  auto dim_turning = [&](double turns) {
    return d * std::log(orig / (turns * 2 * std::numbers::pi)) / (2 * std::log(spec.theta));
  };
  double low = dim_turning(s.beta_fast), high = dim_turning(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  RopeFrequencies out{base_frequencies(spec.theta, dim)};
  for (size_t i = 0; i < out.inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double kept = out.inv_freq[i];
    out.inv_freq[i] = kept / s.factor * ramp + kept * (1 - ramp);
  }
  if (s.attention_factor)
    out.attention_factor = *s.attention_factor;
  else if (s.mscale != 0 && s.mscale_all_dim != 0)
    out.attention_factor = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  else
    out.attention_factor = yarn_mscale(s.factor, 1.0);
  return out;
}

RopeFrequencies longrope(const RopeSpec& spec, const RopeLongrope& s, int64_t max_seq) {
  const size_t pairs = static_cast<size_t>(spec.rotated() / 2);
  TITAN_CHECK(
      s.short_factor.size() == pairs && s.long_factor.size() == pairs,
      "RoPE \"longrope\" scaling needs short_factor and long_factor with one factor per rotated pair (",
      pairs, "), got ", s.short_factor.size(), " and ", s.long_factor.size());
  TITAN_CHECK(s.original_max_position > 0 && s.factor > 0,
              "RoPE \"longrope\" scaling needs original_max_position > 0 and factor > 0, got ",
              s.original_max_position, " and ", s.factor);
  const bool long_context = max_seq > s.original_max_position;
  const std::vector<double>& ext = long_context ? s.long_factor : s.short_factor;
  RopeFrequencies out{base_frequencies(spec.theta, spec.rotated())};
  for (size_t i = 0; i < pairs; ++i) {
    TITAN_CHECK(ext[i] > 0, "RoPE \"longrope\" scaling: ", long_context ? "long_factor" : "short_factor", "[",
                i, "] must be positive, got ", ext[i]);
    out.inv_freq[i] /= ext[i];
  }
  if (s.attention_factor)
    out.attention_factor = *s.attention_factor;
  else if (s.factor > 1)
    out.attention_factor =
        std::sqrt(1 + std::log(s.factor) / std::log(static_cast<double>(s.original_max_position)));
  return out;
}

}  // namespace

std::string rope_type_name(const RopeScalingRule& rule) {
  return std::visit(
      Overloaded{[](std::monostate) { return "default"; }, [](const RopeLinear&) { return "linear"; },
                 [](const RopeDynamic&) { return "dynamic"; }, [](const RopeYarn&) { return "yarn"; },
                 [](const RopeLongrope&) { return "longrope"; }, [](const RopeScaling&) { return "llama3"; }},
      rule);
}

RopeFrequencies rope_frequencies(const RopeSpec& spec, int64_t max_seq) {
  const int64_t dim = spec.rotated();
  TITAN_CHECK(spec.head_dim > 0 && dim > 0 && dim % 2 == 0 && dim <= spec.head_dim,
              "RoPE: head_dim must be positive and the rotated dims even (they turn in pairs) and at most "
              "head_dim; got head_dim ",
              spec.head_dim, ", rotary_dim ", spec.rotary_dim);
  TITAN_CHECK(spec.theta > 0, "RoPE: theta must be positive, got ", spec.theta);
  TITAN_CHECK(max_seq > 0, "RoPE: max_seq must be positive, got ", max_seq);
  RopeFrequencies out = std::visit(
      Overloaded{[&](std::monostate) { return RopeFrequencies{base_frequencies(spec.theta, dim)}; },
                 [&](const RopeLinear& s) { return linear(spec, s); },
                 [&](const RopeDynamic& s) { return dynamic(spec, s, max_seq); },
                 [&](const RopeYarn& s) { return yarn(spec, s); },
                 [&](const RopeLongrope& s) { return longrope(spec, s, max_seq); },
                 [&](const RopeScaling& s) { return llama3(spec, s); }},
      spec.scaling);
  TITAN_CHECK(std::isfinite(out.attention_factor) && out.attention_factor > 0, "RoPE \"",
              rope_type_name(spec.scaling), "\": the attention factor must be positive and finite, got ",
              out.attention_factor);
  return out;
}

}  // namespace titan::ops
