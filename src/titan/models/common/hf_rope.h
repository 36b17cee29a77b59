#pragma once
// A Hugging Face config.json's RoPE (hf::Rope, either layout) as titan's ops::RopeSpec, with the
// defaults and precedences of transformers 5.24's standardize_rope_params and ROPE_INIT_FUNCTIONS.
#include <cstdint>
#include <optional>
#include <string>

#include "titan/models/common/hf_config.h"
#include "titan/ops/rope_frequencies.h"

namespace titan::models::common::hf {

// What config.json says about RoPE outside its RoPE object.
struct RopeModelFields {
  std::string architecture;  // e.g. "Phi3ForCausalLM", named by errors about a missing key
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  // The top-level partial_rotary_factor (Phi, Phi-3) or GPT-NeoX's rotary_pct, as the family
  // defaults it; the RoPE object's own partial_rotary_factor wins over it, as in transformers.
  std::optional<double> partial_rotary_factor;
  // The top-level original_max_position_embeddings (Phi-3 keeps it there, defaulting it to 4096);
  // it wins over the RoPE object's for llama3, yarn and longrope, as in transformers.
  std::optional<int64_t> original_max_position_embeddings;
};

// The spec of `rope`: rope_type "default", "linear", "dynamic", "yarn", "longrope" or "llama3"
// (given as "rope_type" or, before transformers 4.45, "type"). rotary_dim is
// int(head_dim * partial_rotary_factor). Errors name the key (e.g. "rope_parameters.factor") and
// its value; an unknown rope_type, a key the type does not read and an odd rotated width are
// refused.
ops::RopeSpec rope_spec(const Rope& rope, const RopeModelFields& model);

}  // namespace titan::models::common::hf
