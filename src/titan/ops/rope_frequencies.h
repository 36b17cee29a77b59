#pragma once
// What a rotary embedding turns by: the angle per position of each rotated pair of a head's dims
// and the factor its cos and sin are scaled by, for every scaling rule of Hugging Face's
// ROPE_INIT_FUNCTIONS (transformers 5.24), computed in f64. The rules are written as the papers
// and transformers state them; models/common/hf_rope.h reads them from a config.json.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace titan::ops {

// Llama 3.1 ("llama3"): frequencies whose wavelength fits many times in the original context keep
// their value, those longer than it are slowed by `factor`, and the band between blends the two.
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

// "linear" (position interpolation): every frequency divided by `factor`.
struct RopeLinear {
  double factor = 1.0;
};

// "dynamic" (NTK-aware): theta grows with the sequence once it is longer than
// max_position_embeddings. transformers recomputes the frequencies in each forward from that
// forward's last position; a table of max_seq positions holds them as a forward of max_seq tokens
// sees them, so it matches transformers exactly for such forwards (training on full-length
// sequences) and for every forward when max_seq <= max_position_embeddings. A shorter forward past
// max_position_embeddings is given less scaling by transformers than by the table.
struct RopeDynamic {
  double factor = 1.0;
  int64_t max_position_embeddings = 0;
};

// "yarn": frequencies that turn fewer than beta_slow times over the original context are
// interpolated (divided by factor), those that turn more than beta_fast times kept, with a linear
// ramp between; cos and sin are scaled by the attention factor.
struct RopeYarn {
  double factor = 1.0;
  int64_t original_max_position = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;  // round the ramp's ends outwards to whole dims
  // Absent: 0.1 ln(factor) + 1, or with mscale and mscale_all_dim both nonzero (DeepSeek) the ratio
  // 0.1 mscale ln(factor) + 1 over 0.1 mscale_all_dim ln(factor) + 1.
  std::optional<double> attention_factor = std::nullopt;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
};

// "longrope" (Phi-3): each frequency divided by its own factor, from long_factor when the sequence
// is longer than original_max_position, else from short_factor; cos and sin are scaled by the
// attention factor, absent: sqrt(1 + ln(factor) / ln(original_max_position)) for factor > 1. As
// with "dynamic", a table of max_seq positions uses the list a forward of max_seq tokens uses.
struct RopeLongrope {
  std::vector<double> short_factor = {};  // one per rotated pair
  std::vector<double> long_factor = {};
  int64_t original_max_position = 0;
  double factor = 1.0;
  std::optional<double> attention_factor = std::nullopt;
};

// std::monostate: no scaling ("default").
using RopeScalingRule =
    std::variant<std::monostate, RopeLinear, RopeDynamic, RopeYarn, RopeLongrope, RopeScaling>;

// Hugging Face's name of the rule: "default", "linear", "dynamic", "yarn", "longrope", "llama3".
std::string rope_type_name(const RopeScalingRule& rule);

struct RopeSpec {
  int64_t head_dim = 0;
  // The leading dims of each head that rotate (partial rotary: Phi's partial_rotary_factor,
  // GPT-NeoX's rotary_pct); even, at most head_dim; 0 means head_dim. The rest pass through. The
  // frequencies are theta^(-2i / rotary_dim), as transformers computes them.
  int64_t rotary_dim = 0;
  double theta = 10000.0;
  RopeScalingRule scaling = {};

  int64_t rotated() const { return rotary_dim == 0 ? head_dim : rotary_dim; }
};

struct RopeFrequencies {
  std::vector<double> inv_freq;  // radians per position, one per rotated pair (rotary_dim / 2)
  double attention_factor = 1.0;
};

// The frequencies of the table for positions [0, max_seq). Throws naming the rule and the value
// when the spec is not one transformers would accept.
RopeFrequencies rope_frequencies(const RopeSpec& spec, int64_t max_seq);

}  // namespace titan::ops
