#pragma once
// Tensor: a cheap, refcounted handle to (storage, sizes, strides, offset, dtype) plus autograd
// metadata. Copies of a Tensor alias the same data; views share storage.
//
// Layering: core defines the data structure and the non-differentiable primitives (factories,
// as_strided, in-place fills). The differentiable member methods (view, reshape, transpose,
// permute, narrow, expand, contiguous, to, clone, backward) are defined in ops/ and autograd/,
// which is where their backward formulas and kernels live; core itself never calls them.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/device.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/meta.h"
#include "titan/core/rng.h"
#include "titan/core/shape.h"
#include "titan/core/storage.h"

namespace titan {

namespace autograd {
class Node;
}

struct TensorImpl;
struct AutogradMeta;

struct TensorOptions {
  DType dtype = kF32;
  Device device = Device::cpu();
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories -----------------------------------------------------------------------------
  // empty, zeros, ones and full make meta tensors under a MetaScope (core/meta.h); the others
  // make tensors with values, and so are real (arange, from_vector, scalar) or refused (rand,
  // randn) there.
  static Tensor empty(const Shape& sizes, TensorOptions opts = {});
  static Tensor zeros(const Shape& sizes, TensorOptions opts = {});
  static Tensor ones(const Shape& sizes, TensorOptions opts = {});
  static Tensor full(const Shape& sizes, double value, TensorOptions opts = {});
  static Tensor arange(int64_t end, TensorOptions opts = {.dtype = kI64});
  static Tensor arange(double start, double end, double step, TensorOptions opts = {});
  // Uniform in [lo, hi) and normal(mean, std) from `gen`'s stream (floating dtypes).
  static Tensor rand(const Shape& sizes, Generator& gen, TensorOptions opts = {}, double lo = 0.0,
                     double hi = 1.0);
  static Tensor randn(const Shape& sizes, Generator& gen, TensorOptions opts = {}, double mean = 0.0,
                      double stddev = 1.0);
  // Copies `values` (row-major) into a new tensor of `sizes`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& sizes);
  template <typename T>
  static Tensor scalar(T value) { return from_vector<T>({value}, {}); }
  // A contiguous CPU tensor over memory titan does not own (a custom call's buffer): no copy, never
  // freed by titan; it and its views must not outlive the memory.
  static Tensor borrow(void* data, const Shape& sizes, DType dtype);

  // ---- metadata ------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  // Made under a MetaScope and not materialised since: a shape without memory (core/meta.h).
  bool is_meta() const;
  // A value of the program being captured (graph/lazy.h): on a PJRT device, without memory.
  bool is_lazy() const;
  TensorOptions options() const { return {dtype(), device()}; }
  // "f32[2, 3]": used in error messages.
  std::string desc() const;

  // ---- data ----------------------------------------------------------------------------------
  void* data_ptr() const;
  // Typed pointer to element [0, 0, ...]; checks the dtype.
  template <typename T>
  T* data() const {
    TITAN_CHECK(dtype() == dtype_of<T>::value, "Tensor::data<", dtype_name(dtype_of<T>::value),
                ">: tensor is ", desc());
    return static_cast<T*>(data_ptr());
  }
  // The single element of a one-element tensor, converted to double.
  double item() const;
  // Copies out in row-major order, whatever the strides.
  template <typename T>
  std::vector<T> to_vector() const;
  const std::shared_ptr<Storage>& storage() const;

  // ---- primitives (no autograd) ----------------------------------------------------------------
  // A view with explicit geometry; checks that it stays inside the storage.
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;
  // Same data, no autograd history.
  Tensor detach() const;
  // In place; refused on a tensor that requires grad while grad mode is on.
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // broadcasts src to this tensor's shape; casts dtype

  // ---- differentiable methods (defined in ops/view.cpp, ops/cast.cpp) --------------------------
  Tensor view(const Shape& sizes) const;      // needs compatible strides; never copies
  Tensor reshape(const Shape& sizes) const;   // a view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& sizes) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;

  // ---- autograd (defined in autograd/) -----------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as a parameter to differentiate; refused on a non-floating tensor or a non-leaf.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // Runs reverse mode from this tensor; `grad` defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad = Tensor()) const;
  // Called with the gradient flowing into this tensor, before it is used or accumulated; may
  // return a replacement (an undefined Tensor keeps the original).
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Called on a leaf after its .grad has been accumulated (FSDP reduce-scatters from here).
  void register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const;

  // ---- identity ------------------------------------------------------------------------------
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  AutogradMeta& autograd_meta() const;  // created on first use

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: one accumulator node, shared by all uses
  std::vector<std::function<Tensor(const Tensor&)>> grad_hooks;
  std::vector<std::function<void(Tensor&)>> post_accumulate_hooks;
};

// A tensor on a PJRT device names a value of the program being captured (graph/lazy.h) instead
// of holding memory: `program` is that program's serial number (0: none), `value` its SSA id.
struct LazyValue {
  uint64_t program = 0;
  int64_t value = -1;
  bool defined() const { return program != 0; }
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  LazyValue lazy;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = kF32;
  std::unique_ptr<AutogradMeta> autograd;
};

inline bool Tensor::is_lazy() const { return impl_ && impl_->lazy.defined(); }

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& sizes) {
  TITAN_CHECK(static_cast<int64_t>(values.size()) == numel_of(sizes), "Tensor::from_vector: ",
              values.size(), " values given for shape ", shape_str(sizes));
  const MetaScope real(false);  // the values are here now: nothing to defer
  Tensor t = empty(sizes, {.dtype = dtype_of<T>::value});
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

// Checks that every tensor is on a device the op supports; the one place a new backend plugs in.
void check_cpu(const char* op, const Tensor& t);

}  // namespace titan
