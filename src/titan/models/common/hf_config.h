#pragma once
// Reading a Hugging Face config.json as transformers does, in the layout of transformers 4 or 5,
// and finding the flavor it describes: what every family's state dict adapter needs, whatever
// its keys.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace titan::models::common::hf {

// The two layouts of config.json. transformers 5 keeps RoPE in one object, "rope_parameters"
// {rope_theta, rope_type, and the scaling's fields}, the weights' dtype in "dtype" and an MoE's
// expert count in "num_local_experts". transformers 4 has top-level "rope_theta" and
// "rope_scaling" (null without scaling; its kind in "rope_type", or "type" before 4.45),
// "torch_dtype" and "num_experts". Neither reads the other's RoPE keys by itself (4.x given a 5.x
// file silently uses rope_theta 10000 and no scaling), so a file written for one has its keys only.
enum class ConfigLayout { transformers4, transformers5 };

// "transformers4" / "transformers5": how the options (titan convert --hf-config-format,
// checkpoint.hf_config_format) spell the layouts.
const char* layout_name(ConfigLayout layout);
// Throws naming `option` and the choices when `name` is neither.
ConfigLayout parse_layout(const std::string& name, const std::string& option);
// The layout a file is in: transformers5 when it has "rope_parameters", else transformers4 when
// it has any of 4.x's keys, else transformers5 (what transformers writes now).
ConfigLayout layout_of(const nlohmann::json& config);

// A key that transformers 5 renamed.
struct RenamedKey {
  const char* v4;
  const char* v5;
  const char* in(ConfigLayout layout) const { return layout == ConfigLayout::transformers4 ? v4 : v5; }
};
inline constexpr RenamedKey kDtypeKey{"torch_dtype", "dtype"};
inline constexpr RenamedKey kNumExpertsKey{"num_experts", "num_local_experts"};

// RoPE as config.json describes it, in either layout.
struct Rope {
  double theta = 0;
  std::string type;           // rope_type: "default" (no scaling), "llama3", ...
  nlohmann::json parameters;  // the scaling's fields (factor, ...): an object without theta and type
  std::string where;          // the object config.json holds them in: "rope_parameters" or "rope_scaling"
  std::string type_key;       // where config.json says `type`, e.g. "rope_parameters.rope_type"
};

// `config` in `layout`, holding RoPE as `theta`, `type` and the scaling's `parameters` (an
// object; empty for "default").
void put_rope(nlohmann::json& config, ConfigLayout layout, double theta, const std::string& type,
              const nlohmann::json& parameters);

// The file's own keys (bos_token_id, dtype, ...) with `ours` (a family's config.json in `layout`)
// written over them, in `layout` only: the other layout's RoPE keys removed, its renamed keys
// (torch_dtype / dtype, ...) renamed.
nlohmann::json merged_config(const nlohmann::json& file, const nlohmann::json& ours, ConfigLayout layout);

// Values of config.json by key, with transformers' defaults for absent (or null) keys when the
// caller gives one; errors name the key (after `prefix`, e.g. "rope_parameters."), and
// `architecture` (e.g. "LlamaForCausalLM") as what needs a missing one.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& config, std::string architecture, std::string prefix = "");

  // Null when absent or null.
  const nlohmann::json* find(const std::string& key) const;
  // Whether the file has the key at all, null included (where null and absent differ: a default
  // that null switches off).
  bool has_key(const std::string& key) const { return j_.contains(key); }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const std::string& key, std::optional<double> fallback = std::nullopt) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  // A list of integers; empty when absent.
  std::vector<int64_t> integers(const std::string& key) const;

  // The key to read a renamed value from: the one the file has; either when it has both with
  // the same value. Throws naming both when their values differ, or when `required` and neither
  // is there. Empty when neither is there and not `required`.
  std::string renamed(RenamedKey key, bool required) const;
  // RoPE from either layout, rope_theta `default_theta` where the file has none. A file with
  // both layouts is read when they agree; otherwise the error names each pair of keys that
  // differ, with both values.
  Rope rope(double default_theta) const;

 private:
  std::string name(const std::string& key) const { return prefix_ + key; }

  const nlohmann::json& j_;
  std::string architecture_;
  std::string prefix_;
};

// The name among `flavors` whose config.json (`flavor_config(name)`, written as `file` was) has
// the values of `file` for every key but those in `free` (which the [model] section overrides,
// e.g. vocab_size, or which only size tables). Throws, naming `family`'s flavors, the closest and
// the keys that differ from it (an object's fields by their dotted names), when none matches.
std::string matching_flavor(const std::string& family, const nlohmann::json& file,
                            const std::vector<std::string>& flavors,
                            const std::function<nlohmann::json(const std::string&)>& flavor_config,
                            const std::set<std::string>& free);

}  // namespace titan::models::common::hf
