#pragma once
// What an allocation is for, as a memory snapshot reports it. Code that knows the owner opens a
// MemoryOwnerScope around the allocations it makes (the trainer while building the model, the
// optimizer for its state, a module's call for its activations); the allocator reads the
// innermost scope of the allocating thread, and only while it records. Opening a scope costs a
// thread-local save and restore, recording or not.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace titan {

enum class MemoryCategory : uint8_t {
  other,            // no scope: data batches, losses, anything outside the scopes below
  parameters,       // model weights (and FSDP's gathered copies of them)
  gradients,        // accumulated .grad tensors and FSDP's gradient shards
  optimizer_state,  // AdamW's moments
  activations,      // what a module's forward makes, by module path
  workspace,        // backward's temporaries (gradients flowing between nodes)
  untracked,        // allocated before recording started; the owner was never seen
};
inline constexpr int kNumMemoryCategories = 7;
const char* memory_category_name(MemoryCategory c);
const std::array<MemoryCategory, kNumMemoryCategories>& memory_categories();

// A category and an interned name (a module path such as "layers.3.attention"; 0 is "").
struct MemoryOwner {
  MemoryCategory category = MemoryCategory::other;
  uint32_t name = 0;
};

// Names are interned once and never freed, so that an id held by a live allocation stays valid
// whatever happens to the module that named it. Thread-safe.
uint32_t intern_memory_owner_name(std::string_view name);
std::string memory_owner_name(uint32_t id);

// The calling thread's innermost owner.
MemoryOwner current_memory_owner();

class MemoryOwnerScope {
 public:
  explicit MemoryOwnerScope(MemoryCategory category, uint32_t name = 0);
  ~MemoryOwnerScope();
  MemoryOwnerScope(const MemoryOwnerScope&) = delete;
  MemoryOwnerScope& operator=(const MemoryOwnerScope&) = delete;

 private:
  MemoryOwner prev_;
};

}  // namespace titan
