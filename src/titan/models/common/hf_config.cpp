#include "titan/models/common/hf_config.h"

#include "titan/core/error.h"

namespace titan::models::common::hf {

using json = nlohmann::json;

ConfigFields::ConfigFields(const json& config, std::string architecture)
    : j_(config), architecture_(std::move(architecture)) {
  TITAN_CHECK(config.is_object(), "config.json: expected a JSON object, got ", config.type_name());
}

const json* ConfigFields::find(const char* key) const {
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

int64_t ConfigFields::integer(const char* key, std::optional<int64_t> fallback) const {
  const json* v = find(key);
  TITAN_CHECK(v || fallback, "config.json: \"", key, "\" is missing; ", architecture_, " needs it");
  if (!v) return *fallback;
  TITAN_CHECK(v->is_number_integer(), "config.json: \"", key, "\" must be an integer, got ", v->dump());
  return v->get<int64_t>();
}

double ConfigFields::number(const char* key, std::optional<double> fallback) const {
  const json* v = find(key);
  TITAN_CHECK(v || fallback, "config.json: \"", key, "\" is missing; ", architecture_, " needs it");
  if (!v) return *fallback;
  TITAN_CHECK(v->is_number(), "config.json: \"", key, "\" must be a number, got ", v->dump());
  return v->get<double>();
}

bool ConfigFields::boolean(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  TITAN_CHECK(v->is_boolean(), "config.json: \"", key, "\" must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string ConfigFields::string(const char* key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  TITAN_CHECK(v->is_string(), "config.json: \"", key, "\" must be a string, got ", v->dump());
  return v->get<std::string>();
}

std::vector<int64_t> ConfigFields::integers(const char* key) const {
  const json* v = find(key);
  if (!v) return {};
  bool ok = v->is_array();
  for (size_t i = 0; ok && i < v->size(); ++i) ok = (*v)[i].is_number_integer();
  TITAN_CHECK(ok, "config.json: \"", key, "\" must be a list of integers, got ", v->dump());
  return v->get<std::vector<int64_t>>();
}

namespace {

// "key (config.json X, <flavor> Y)" for each key of a flavor's config.json that `file` has
// otherwise, leaving out the free keys.
std::vector<std::string> differences(const json& file, const json& flavor, const std::string& flavor_name,
                                     const std::set<std::string>& free) {
  std::vector<std::string> out;
  for (const auto& [key, value] : flavor.items()) {
    if (free.count(key)) continue;
    const json theirs = file.value(key, json());
    if (theirs != value)
      out.push_back(key + " (config.json " + theirs.dump() + ", " + flavor_name + " " + value.dump() + ")");
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string matching_flavor(const std::string& family, const json& file,
                            const std::vector<std::string>& flavors,
                            const std::function<json(const std::string&)>& flavor_config,
                            const std::set<std::string>& free) {
  std::string closest;
  std::vector<std::string> closest_diff;
  for (const std::string& name : flavors) {
    std::vector<std::string> diff = differences(file, flavor_config(name), name, free);
    if (diff.empty()) return name;
    if (closest.empty() || diff.size() < closest_diff.size()) {
      closest = name;
      closest_diff = std::move(diff);
    }
  }
  TITAN_CHECK(false, "config.json describes no ", family, " flavor (", joined(flavors), "); the closest, ",
              closest, ", differs in ", joined(closest_diff));
  return {};
}

}  // namespace titan::models::common::hf
