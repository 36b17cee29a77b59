#include "titan/nn/module.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "titan/autograd/grad_mode.h"
#include "titan/core/allocator.h"

namespace titan::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

uint32_t buffers_name() {
  static const uint32_t id = intern_memory_owner_name("buffers");
  return id;
}
}  // namespace

template <typename Self, typename F>
void Module::walk(Self& self, const std::string& prefix, const F& f) {
  f(prefix, self);
  for (const auto& [name, child] : self.children_) walk(*child, join(prefix, name), f);
}

void Module::check_new_name(const std::string& name, const char* what) const {
  TITAN_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module::register_", what, ": name '",
              name,
              "' must be non-empty and hold no '.' (dots join the names of nested "
              "modules); register a child module for each level instead");
  auto taken = [&](const std::vector<Slot>& slots) {
    return std::any_of(slots.begin(), slots.end(), [&](const Slot& s) { return s.name == name; });
  };
  bool child_taken =
      std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  TITAN_CHECK(!taken(params_) && !taken(buffers_) && !child_taken, "Module::register_", what, ": name '",
              name, "' is already taken by a parameter, buffer or child of this module; pick another name");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name, "parameter");
  TITAN_CHECK(t.defined(), "Module::register_parameter: '", name, "' is an undefined tensor");
  TITAN_CHECK(is_floating(t.dtype()) && t.is_leaf(), "Module::register_parameter: '", name, "' is ", t.desc(),
              is_floating(t.dtype()) ? " computed by an op; register a leaf (detach() it)"
                                     : "; parameters are floating (integer state is a buffer)");
  t.requires_grad_();
  params_.push_back({name, t});
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "buffer");
  TITAN_CHECK(t.defined(), "Module::register_buffer: '", name, "' is an undefined tensor");
  TITAN_CHECK(!t.requires_grad(), "Module::register_buffer: '", name, "' ", t.desc(),
              " requires grad; a trained tensor is a parameter (register_parameter)");
  // Buffers are made while the model is built, inside the trainer's parameters scope; they are
  // not parameters. A meta buffer (core/meta.h) has no block yet.
  if (!t.is_meta())
    CpuAllocator::instance().set_owner(t.storage()->data(), {MemoryCategory::other, buffers_name()});
  buffers_.push_back({name, t, persistent});
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name, "module");
  TITAN_CHECK(child != nullptr, "Module::register_module: '", name, "' is a null module");
  // Trees are built bottom up, so the child's subtree learns its new prefix now.
  walk(*child, join(path_, name), [](const std::string& path, Module& m) {
    m.path_ = path;
    m.memory_owner_name_.reset();
  });
  children_.emplace_back(name, std::move(child));
}

uint32_t Module::memory_owner_name() {
  if (!memory_owner_name_) memory_owner_name_ = intern_memory_owner_name(path_);
  return *memory_owner_name_;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  walk(*this, "", [&](const std::string& prefix, const Module& m) {
    for (const Slot& s : m.params_)
      if (seen.insert(s.tensor.impl()).second) out.emplace_back(join(prefix, s.name), s.tensor);
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool persistent_only) const {
  std::vector<std::pair<std::string, Tensor>> out;
  walk(*this, "", [&](const std::string& prefix, const Module& m) {
    for (const Slot& s : m.buffers_)
      if (s.persistent || !persistent_only) out.emplace_back(join(prefix, s.name), s.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  walk(*this, "", [&](const std::string& name, Module& m) { out.emplace_back(name, &m); });
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor>> Module::state_entries() const {
  std::vector<std::pair<std::string, Tensor>> out;
  walk(*this, "", [&](const std::string& prefix, const Module& m) {
    for (const Slot& s : m.params_) out.emplace_back(join(prefix, s.name), s.tensor);
    for (const Slot& s : m.buffers_)
      if (s.persistent) out.emplace_back(join(prefix, s.name), s.tensor);
  });
  return out;
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : state_entries()) out.emplace(name, t.detach());
  return out;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> entries = state_entries();
  LoadResult result;
  std::vector<std::string> problems;
  std::unordered_set<std::string> known;
  for (const auto& [name, t] : entries) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      result.missing_keys.push_back(name);
      if (strict) problems.push_back("missing key '" + name + "' (expected " + t.desc() + ", absent)");
    } else if (it->second.sizes() != t.sizes() || it->second.dtype() != t.dtype()) {
      problems.push_back("key '" + name + "': expected " + t.desc() + ", found " + it->second.desc());
    }
  }
  for (const auto& [name, t] : state) {
    if (known.count(name)) continue;
    result.unexpected_keys.push_back(name);
    if (strict)
      problems.push_back("unexpected key '" + name + "' (found " + t.desc() +
                         ", the module has no such parameter or buffer)");
  }
  std::ostringstream report;
  for (size_t i = 0; i < problems.size(); ++i) report << (i ? "; " : "") << problems[i];
  TITAN_CHECK(problems.empty(), "load_state_dict: ", report.str(),
              ". Nothing was loaded: the state dict does not fit this model (another config, or "
              "names that need a state_dict adapter); strict=false skips only missing and "
              "unexpected keys");
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : entries) {
    auto it = state.find(name);
    if (it != state.end()) t.copy_(it->second);
  }
  return result;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) p.set_grad(Tensor());
}

void Module::init_weights(Generator& gen) {
  for (auto& [name, child] : children_) child->init_weights(gen);
  reset_parameters(gen);
}

uint64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

uint64_t Module::register_forward_hook(ForwardHook hook) {
  post_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Module::remove_hook(uint64_t id) {
  auto drop = [id](auto& hooks) {
    return std::erase_if(hooks, [id](const auto& h) { return h.first == id; }) > 0;
  };
  bool removed = drop(pre_hooks_) || drop(post_hooks_);
  TITAN_CHECK(removed, "Module::remove_hook: no hook with id ", id,
              " on this module (already removed, or registered on another module)");
}

}  // namespace titan::nn
