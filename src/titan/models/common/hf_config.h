#pragma once
// Reading a Hugging Face config.json as transformers does, and finding the flavor it describes:
// what every family's state dict adapter needs, whatever its keys.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace titan::models::common::hf {

// Values of config.json by key, with transformers' defaults for absent (or null) keys when the
// caller gives one; errors name the key, and `architecture` (e.g. "LlamaForCausalLM") as what
// needs a missing one.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& config, std::string architecture);

  // Null when absent or null.
  const nlohmann::json* find(const char* key) const;
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const char* key, std::optional<double> fallback = std::nullopt) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  // A list of integers; empty when absent.
  std::vector<int64_t> integers(const char* key) const;

 private:
  const nlohmann::json& j_;
  std::string architecture_;
};

// The name among `flavors` whose config.json (`flavor_config(name)`, written as `file` was) has
// the values of `file` for every key but those in `free` (which the [model] section overrides,
// e.g. vocab_size, or which only size tables). Throws, naming `family`'s flavors, the closest and
// the keys that differ from it, when none matches.
std::string matching_flavor(const std::string& family, const nlohmann::json& file,
                            const std::vector<std::string>& flavors,
                            const std::function<nlohmann::json(const std::string&)>& flavor_config,
                            const std::set<std::string>& free);

}  // namespace titan::models::common::hf
