#include "titan/models/registry.h"

#include <algorithm>
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
    if (!s.state_dict_adapter) continue;
    std::string types;
    for (const std::string& t : s.state_dict_adapter->hf_model_types) types += (types.empty() ? "\"" : ", \"") + t + "\"";
    out += (out.empty() ? "" : "; ") + n + " (" + types + ")";
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

const TrainSpec& train_spec_for_hf(const nlohmann::json& config, const std::string& where,
                                   const std::string& preferred) {
  TITAN_CHECK(config.is_object() && config.contains("model_type") && config["model_type"].is_string(), where,
              ": no \"model_type\" string; a Hugging Face config.json names its architecture there (e.g. "
              "\"llama\")");
  const std::string type = config["model_type"].get<std::string>();
  std::vector<const TrainSpec*> readers;
  for (const std::string& n : registered_models()) {
    const TrainSpec& s = get_train_spec(n);
    if (!s.state_dict_adapter) continue;
    const auto& types = s.state_dict_adapter->hf_model_types;
    if (std::find(types.begin(), types.end(), type) != types.end()) readers.push_back(&s);
  }
  TITAN_CHECK(!readers.empty(), where, ": model_type \"", type,
              "\" is not one titan reads; families and the model_types they read: ", hf_families());
  for (const TrainSpec* s : readers)
    if (s->name == preferred) return *s;
  if (readers.size() == 1) return *readers.front();
  // A family with flavors takes a file of one of them (its names and presets stay TorchTitan's);
  // any other size goes to the hf family.
  const TrainSpec* generic = nullptr;
  for (const TrainSpec* s : readers) {
    if (s->flavors.empty()) {
      generic = s;
      continue;
    }
    try {
      s->state_dict_adapter->from_hf_config(config);
      return *s;
    } catch (const Error&) {
    }
  }
  TITAN_CHECK(generic != nullptr, where, ": model_type \"", type, "\" is read by several families, none of "
              "which takes this file");
  return *generic;
}

}  // namespace titan::models
