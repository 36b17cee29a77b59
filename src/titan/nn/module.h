#pragma once
// Module: a tree of named parameters, buffers and child modules. Optimizers, checkpoints and the
// plans of parallel/ address a model's tensors by dotted name ("layers.3.attention.wq.weight").
//
// A derived module keeps each parameter as a plain Tensor member and registers that same handle:
//   weight = register_parameter("weight", Tensor::zeros({out, in}, opts));
// Member and registry then alias one TensorImpl. Whatever changes a parameter must therefore
// change it in place (load_state_dict copies into it, init writes into it) and never rebind
// either handle; parallel/ must keep to the same rule when it swaps a full tensor for a shard.
//
// Forward is an ordinary method of the derived class, taking whatever arguments it needs. The
// module's call operator wraps it in run_forward(), which runs the forward hooks around it. That
// is where parallel/ acts on a module without the model knowing: FSDP all-gathers a block's
// shards in a pre-hook and frees them in a post-hook, which also sees the output and so can hook
// its gradient to gather them again for backward. Call modules, not forward(), so hooks run.
//
// A module whose forward is a function of one tensor passes that tensor and the function (its
// body) to run_forward(x, body). parallel/ can then change how the body runs by setting a forward
// wrapper, between the hooks: activation checkpointing wraps blocks in autograd::checkpoint,
// which runs the body without keeping activations and again in backward.
//
// A call also names what it allocates for memory snapshots: activations of this module's path
// ("layers.3.attention"), which a module learns when it, or an ancestor, is registered as a child.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/memory_owner.h"
#include "titan/core/tensor.h"

namespace titan::nn {

// Dotted name -> tensor. The same map type as a safetensors file's tensors, so a state dict
// goes to and from disk as is.
using StateDict = std::map<std::string, Tensor>;

// What a non-strict load skipped (always empty after a strict load, which throws instead).
struct LoadResult {
  std::vector<std::string> missing_keys;     // the module has them, the state dict does not
  std::vector<std::string> unexpected_keys;  // the state dict has them, the module does not
};

class Module {
 public:
  using ForwardPreHook = std::function<void(Module&)>;
  // May replace `output`.
  using ForwardHook = std::function<void(Module&, Tensor& output)>;

  Module() = default;
  virtual ~Module() = default;
  // The registry holds handles that the derived class's members alias; a copy would share
  // parameters silently, so modules live where they are built (children behind shared_ptr).
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- building the tree --------------------------------------------------------------------
  // Marks `t` as requiring grad and returns it. Names are unique within a module and hold no '.'.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Buffers are state that is not trained (RoPE tables, running statistics). A non-persistent
  // buffer is left out of state_dict: it can be recomputed, so checkpoints need not carry it.
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }

  // ---- walking the tree (registration order, parents before children) -----------------------
  // A tensor registered under several names (tied weights) is listed once, under its first
  // name, so an optimizer never updates it twice.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // `persistent_only`: just the buffers a state dict holds.
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool persistent_only = false) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // This module (named "") and every descendant.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Dotted name from the topmost ancestor ("" for it). A module registered under two parents has
  // the path of the last registration.
  const std::string& path() const { return path_; }
  int64_t num_parameters() const;

  // ---- state ----------------------------------------------------------------------------------
  // Parameters and persistent buffers by dotted name; the tensors alias the module's (detached).
  // Tied weights appear under each of their names, as in PyTorch.
  StateDict state_dict() const;
  // Copies values into the module's tensors in place. Every key is checked before anything is
  // copied, so a failed load leaves the module as it was. Shapes and dtypes must match exactly;
  // with `strict`, missing and unexpected keys are errors too, otherwise they are returned.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- modes ------------------------------------------------------------------------------------
  // Recursive, like PyTorch's. Modules whose forward depends on it (dropout) read is_training().
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Drops every parameter's gradient (PyTorch's set_to_none): the next backward allocates it
  // afresh, which costs nothing extra and frees the memory between steps.
  void zero_grad();

  // ---- initialisation ---------------------------------------------------------------------------
  // Initialises this module's own parameters (not its children's) by its default scheme.
  virtual void reset_parameters(Generator& gen) {}
  // reset_parameters on every module, children before their parent, so that a model's own
  // reset_parameters can override its children's defaults (e.g. TorchTitan's depth-scaled std).
  void init_weights(Generator& gen);

  // ---- hooks -------------------------------------------------------------------------------------
  // Hooks run in registration order; the returned id removes them.
  uint64_t register_forward_pre_hook(ForwardPreHook hook);
  uint64_t register_forward_hook(ForwardHook hook);
  void remove_hook(uint64_t id);

  // ---- execution -------------------------------------------------------------------------------
  using ForwardBody = std::function<Tensor(const Tensor&)>;
  // Must return body(x)'s value; decides only how it is computed.
  using ForwardWrapper = std::function<Tensor(const ForwardBody& body, const Tensor& x)>;
  // Runs this module's body through `wrapper` from now on (an empty one restores plain calls).
  // Only a module that calls run_forward(x, body) can be wrapped; the other form refuses to run.
  void set_forward_wrapper(ForwardWrapper wrapper) { forward_wrapper_ = std::move(wrapper); }
  bool has_forward_wrapper() const { return static_cast<bool>(forward_wrapper_); }

 protected:
  // What a derived module's call operator returns: `forward` (a callable returning the output)
  // run between the pre-hooks and the post-hooks.
  template <typename F>
  Tensor run_forward(F&& forward) {
    TITAN_CHECK(!forward_wrapper_,
                "Module: a forward wrapper (activation checkpointing) is set on a "
                "module whose call operator does not pass its input through run_forward(x, body), "
                "so it cannot be wrapped; call run_forward(x, body) from its operator()");
    return run_hooked(std::forward<F>(forward));
  }
  // The same for a forward that is `body(x)`: the forward wrapper, when set, runs the body. The
  // wrapper may call the body again during backward (checkpointing), so the body must capture by
  // value whatever does not outlive the backward (a mask or table built for this step); the
  // module itself, `this`, is fine.
  template <typename Body>
  Tensor run_forward(const Tensor& x, Body&& body) {
    return run_hooked([&] { return forward_wrapper_ ? forward_wrapper_(body, x) : body(x); });
  }

 private:
  template <typename F>
  Tensor run_hooked(F&& forward) {
    MemoryOwnerScope owner(MemoryCategory::activations, memory_owner_name());
    for (auto& [id, hook] : pre_hooks_) hook(*this);
    Tensor out = std::forward<F>(forward)();
    for (auto& [id, hook] : post_hooks_) hook(*this, out);
    return out;
  }

  struct Slot {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };

  // path_ interned, once per path.
  uint32_t memory_owner_name();
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  // Calls f(dotted_name, module) on `self` and its descendants, parents first. Static so that
  // one walk serves the const accessors and named_modules.
  template <typename Self, typename F>
  static void walk(Self& self, const std::string& prefix, const F& f);
  // Parameters and persistent buffers, every name of every tensor (state_dict's entries).
  std::vector<std::pair<std::string, Tensor>> state_entries() const;

  std::vector<Slot> params_;
  std::vector<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<uint64_t, ForwardHook>> post_hooks_;
  ForwardWrapper forward_wrapper_;
  uint64_t next_hook_id_ = 1;
  bool training_ = true;
  std::string path_;
  std::optional<uint32_t> memory_owner_name_;  // of path_
};

// Children named "0", "1", ... in order, so a stack of blocks has the dotted names of PyTorch's
// nn.ModuleList ("layers.3.attention.wq.weight"). M is the element type that indexing returns.
template <typename M = Module>
class ModuleList : public Module {
 public:
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(m)));
    return items_.back();
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  M& operator[](size_t i) const {
    TITAN_CHECK(i < items_.size(), "ModuleList: index ", i, " out of range for a list of ", items_.size(),
                " modules");
    return *items_[i];
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace titan::nn
