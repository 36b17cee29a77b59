#include "titan/core/memory_owner.h"

#include <deque>
#include <mutex>
#include <unordered_map>

namespace titan {

namespace {

constinit thread_local MemoryOwner t_owner{};

struct NameTable {
  std::mutex mu;
  std::deque<std::string> names{""};  // a deque: views into it stay valid as it grows
  std::unordered_map<std::string_view, uint32_t> ids{{names.front(), 0}};
};

NameTable& names() {
  static NameTable* t = new NameTable();  // never destroyed: allocations may outlive statics
  return *t;
}

}  // namespace

const char* memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::other: return "other";
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::workspace: return "workspace";
    case MemoryCategory::untracked: return "untracked";
  }
  return "?";
}

const std::array<MemoryCategory, kNumMemoryCategories>& memory_categories() {
  static constexpr std::array<MemoryCategory, kNumMemoryCategories> all = {
      MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_state,
      MemoryCategory::activations, MemoryCategory::workspace, MemoryCategory::other,
      MemoryCategory::untracked};
  return all;
}

uint32_t intern_memory_owner_name(std::string_view name) {
  NameTable& t = names();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(name);
  if (it != t.ids.end()) return it->second;
  const auto id = static_cast<uint32_t>(t.names.size());
  t.ids.emplace(t.names.emplace_back(name), id);
  return id;
}

std::string memory_owner_name(uint32_t id) {
  NameTable& t = names();
  std::lock_guard<std::mutex> lock(t.mu);
  return id < t.names.size() ? t.names[id] : std::string();
}

MemoryOwner current_memory_owner() { return t_owner; }

MemoryOwnerScope::MemoryOwnerScope(MemoryCategory category, uint32_t name) : prev_(t_owner) {
  t_owner = {category, name};
}

MemoryOwnerScope::~MemoryOwnerScope() { t_owner = prev_; }

}  // namespace titan
