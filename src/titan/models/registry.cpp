#include "titan/models/registry.h"

#include <map>
#include <mutex>

#include "titan/core/error.h"

namespace titan::models {

namespace {
std::map<std::string, TrainSpec>& specs() {
  static std::map<std::string, TrainSpec> m;
  return m;
}
std::mutex& specs_mutex() {
  static std::mutex mu;
  return mu;
}
}  // namespace

void register_train_spec(TrainSpec spec) {
  std::lock_guard<std::mutex> lock(specs_mutex());
  TITAN_CHECK(!specs().count(spec.name), "model registry: '", spec.name, "' is registered twice");
  std::string name = spec.name;
  specs().emplace(name, std::move(spec));
}

static void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, register_builtin_models);
}

const TrainSpec& get_train_spec(const std::string& name) {
  ensure_builtins();
  std::lock_guard<std::mutex> lock(specs_mutex());
  auto it = specs().find(name);
  if (it == specs().end()) {
    std::string known;
    for (auto& [n, s] : specs()) known += (known.empty() ? "" : ", ") + n;
    TITAN_CHECK(false, "model registry: unknown model.name '", name, "'; registered models: ", known);
  }
  return it->second;
}

std::vector<std::string> registered_models() {
  ensure_builtins();
  std::lock_guard<std::mutex> lock(specs_mutex());
  std::vector<std::string> out;
  for (auto& [n, s] : specs()) out.push_back(n);
  return out;
}

// The families that have a Hugging Face adapter, as "name (model_type)", for error messages.
static std::string hf_families() {
  std::string out;
  for (const std::string& n : registered_models()) {
    const TrainSpec& s = get_train_spec(n);
    if (s.state_dict_adapter)
      out += (out.empty() ? "" : ", ") + n + " (\"" + s.state_dict_adapter->hf_model_type + "\")";
  }
  return out.empty() ? "none" : out;
}

const StateDictAdapter& hf_adapter(const std::string& name) {
  const TrainSpec& spec = get_train_spec(name);
  TITAN_CHECK(spec.state_dict_adapter, "model '", name,
              "' has no Hugging Face state dict adapter, so it cannot be imported or exported in HF format; "
              "families that have one: ",
              hf_families());
  return *spec.state_dict_adapter;
}

const TrainSpec& train_spec_for_hf(const nlohmann::json& config, const std::string& where) {
  TITAN_CHECK(config.is_object() && config.contains("model_type") && config["model_type"].is_string(), where,
              ": no \"model_type\" string; a Hugging Face config.json names its architecture there (e.g. "
              "\"llama\")");
  const std::string type = config["model_type"].get<std::string>();
  const TrainSpec* found = nullptr;
  for (const std::string& n : registered_models()) {
    const TrainSpec& s = get_train_spec(n);
    if (s.state_dict_adapter && s.state_dict_adapter->hf_model_type == type) found = &s;
  }
  TITAN_CHECK(found, where, ": model_type \"", type,
              "\" is not one titan reads; families and the model_type they read: ", hf_families());
  return *found;
}

}  // namespace titan::models
