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

}  // namespace titan::models
