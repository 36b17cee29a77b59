#include "titan/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "titan/core/parallel.h"

namespace titan {

namespace {
const Shape kEmptyShape;

template <typename T>
void fill_contiguous(T* p, int64_t n, T v) {
  parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
}

void fill_contiguous_any(const Tensor& t, double v) {
  int64_t n = t.numel();
  switch (t.dtype()) {
    case kF32: fill_contiguous(static_cast<float*>(t.data_ptr()), n, static_cast<float>(v)); break;
    case kF64: fill_contiguous(static_cast<double*>(t.data_ptr()), n, v); break;
    case kBF16: fill_contiguous(static_cast<bf16*>(t.data_ptr()), n, bf16(static_cast<float>(v))); break;
    case kI32: fill_contiguous(static_cast<int32_t*>(t.data_ptr()), n, static_cast<int32_t>(v)); break;
    case kI64: fill_contiguous(static_cast<int64_t*>(t.data_ptr()), n, static_cast<int64_t>(v)); break;
  }
}
}  // namespace

void check_cpu(const char* op, const Tensor& t) {
  TITAN_CHECK(t.defined(), op, ": got an undefined tensor");
  TITAN_CHECK(!t.is_lazy(), op, ": tensor ", t.desc(), " is on ", t.device(),
              " (graph mode), and `", op,
              "` has no lowering to StableHLO: graph mode cannot capture this step; run it eagerly "
              "(compile.enable = false) or give the op a lowering beside its kernel");
  TITAN_CHECK(t.device().is_cpu(), op, ": tensor ", t.desc(), " is on ", t.device(),
              ", but this build only has CPU kernels for it");
}

Tensor Tensor::empty(const Shape& sizes, TensorOptions opts) {
  for (int64_t d : sizes)
    TITAN_CHECK(d >= 0, "Tensor::empty: negative size in shape ", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(numel_of(sizes)) * dtype_size(opts.dtype);
  impl->storage =
      MetaScope::active() ? Storage::meta(nbytes, opts.device) : Storage::allocate(nbytes, opts.device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = opts.dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::borrow(void* data, const Shape& sizes, DType dtype) {
  for (int64_t d : sizes)
    TITAN_CHECK(d >= 0, "Tensor::borrow: negative size in shape ", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::borrow(data, static_cast<size_t>(numel_of(sizes)) * dtype_size(dtype), Device::cpu());
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& sizes, TensorOptions opts) { return full(sizes, 0.0, opts); }
Tensor Tensor::ones(const Shape& sizes, TensorOptions opts) { return full(sizes, 1.0, opts); }

Tensor Tensor::full(const Shape& sizes, double value, TensorOptions opts) {
  Tensor t = empty(sizes, opts);
  if (!t.is_meta()) fill_contiguous_any(t, value);
  return t;
}

Tensor Tensor::arange(int64_t end, TensorOptions opts) {
  return arange(0.0, static_cast<double>(end), 1.0, opts);
}

Tensor Tensor::arange(double start, double end, double step, TensorOptions opts) {
  TITAN_CHECK(step != 0.0, "Tensor::arange: step must be non-zero");
  const MetaScope real(false);  // the values are computed here: nothing to defer
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  Tensor t = empty({n}, opts);
  for (int64_t i = 0; i < n; ++i) {
    double v = start + step * static_cast<double>(i);
    switch (opts.dtype) {
      case kF32: t.data<float>()[i] = static_cast<float>(v); break;
      case kF64: t.data<double>()[i] = v; break;
      case kBF16: t.data<bf16>()[i] = bf16(static_cast<float>(v)); break;
      case kI32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case kI64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    }
  }
  return t;
}

namespace {
template <typename FillF, typename FillD>
Tensor random_tensor(const char* op, const Shape& sizes, Generator& gen, TensorOptions opts,
                     FillF fill_f, FillD fill_d) {
  TITAN_CHECK(is_floating(opts.dtype), op, ": dtype must be floating, got ", dtype_name(opts.dtype));
  TITAN_CHECK(!MetaScope::active(), op, ": asked for random ", dtype_name(opts.dtype), shape_str(sizes),
              " under a MetaScope, where tensors get no values; make it with zeros/empty and draw its "
              "values in the module's reset_parameters (nn::init), which deferred initialisation "
              "replays shard by shard");
  int64_t n = numel_of(sizes);
  uint64_t first = gen.reserve(static_cast<uint64_t>(n));
  if (opts.dtype == kF64) {
    Tensor t = Tensor::empty(sizes, opts);
    fill_d(t.data<double>(), n, gen.seed(), first);
    return t;
  }
  Tensor f = Tensor::empty(sizes, {.dtype = kF32, .device = opts.device});
  fill_f(f.data<float>(), n, gen.seed(), first);
  if (opts.dtype == kF32) return f;
  Tensor t = Tensor::empty(sizes, opts);
  bf16* dst = t.data<bf16>();
  const float* src = f.data<float>();
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16(src[i]);
  return t;
}
}  // namespace

Tensor Tensor::rand(const Shape& sizes, Generator& gen, TensorOptions opts, double lo, double hi) {
  return random_tensor(
      "Tensor::rand", sizes, gen, opts,
      [&](float* p, int64_t n, uint64_t s, uint64_t f) {
        fill_uniform(p, n, s, f, static_cast<float>(lo), static_cast<float>(hi));
      },
      [&](double* p, int64_t n, uint64_t s, uint64_t f) { fill_uniform(p, n, s, f, lo, hi); });
}

Tensor Tensor::randn(const Shape& sizes, Generator& gen, TensorOptions opts, double mean,
                     double stddev) {
  return random_tensor(
      "Tensor::randn", sizes, gen, opts,
      [&](float* p, int64_t n, uint64_t s, uint64_t f) {
        fill_normal(p, n, s, f, static_cast<float>(mean), static_cast<float>(stddev));
      },
      [&](double* p, int64_t n, uint64_t s, uint64_t f) { fill_normal(p, n, s, f, mean, stddev); });
}

const Shape& Tensor::sizes() const { return impl_ ? impl_->sizes : kEmptyShape; }
const Shape& Tensor::strides() const { return impl_ ? impl_->strides : kEmptyShape; }
int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "Tensor::stride")]; }
int64_t Tensor::numel() const { return impl_ ? numel_of(impl_->sizes) : 0; }
int64_t Tensor::storage_offset() const { return impl_ ? impl_->offset : 0; }
DType Tensor::dtype() const {
  TITAN_CHECK(impl_, "Tensor::dtype: undefined tensor");
  return impl_->dtype;
}
Device Tensor::device() const {
  TITAN_CHECK(impl_, "Tensor::device: undefined tensor");
  return impl_->storage->device();
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  TITAN_CHECK(impl_, "Tensor::storage: undefined tensor");
  return impl_->storage;
}

bool Tensor::is_meta() const {
  return impl_ && impl_->storage && impl_->storage->is_meta() && !impl_->lazy.defined();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes().size(); i-- > 0;) {
    if (impl_->sizes[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->sizes[i];
  }
  return true;
}

std::string Tensor::desc() const {
  if (!impl_) return "undefined";
  std::ostringstream os;
  os << dtype_name(impl_->dtype) << shape_str(impl_->sizes);
  return os.str();
}

void* Tensor::data_ptr() const {
  TITAN_CHECK(impl_, "Tensor::data_ptr: undefined tensor");
  TITAN_CHECK(!impl_->lazy.defined(), "Tensor::data_ptr: ", desc(), " is on ", device(),
              ": a value of the step being captured for graph mode, with no memory on the host; its "
              "values exist once the compiled step runs (read them from the step's results)");
  TITAN_CHECK(!impl_->storage->is_meta(), "Tensor::data_ptr: ", desc(),
              " is a meta tensor (made under a MetaScope): it has a shape but no memory, its values "
              "are not materialised; initialise the model through parallel::deferred_init (or "
              "materialise the storage) before reading or computing with it");
  TITAN_CHECK(impl_->storage->nbytes() > 0 || numel() == 0, "Tensor::data_ptr: ", desc(),
              " holds no memory: it is a parameter sharded by FSDP, whole only during the forward and "
              "backward of its unit; read its shard, or gather the model (FullyShard::unshard_all)");
  return static_cast<char*>(impl_->storage->data()) +
         impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype));
}

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const {
  TITAN_CHECK(impl_, "Tensor::as_strided: undefined tensor");
  TITAN_CHECK(sizes.size() == strides.size(), "Tensor::as_strided: ", sizes.size(), " sizes but ",
              strides.size(), " strides");
  int64_t lo = offset, hi = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TITAN_CHECK(sizes[i] >= 0, "Tensor::as_strided: negative size in ", shape_str(sizes));
    if (sizes[i] == 0) { lo = hi = offset; break; }
    int64_t span = (sizes[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  int64_t capacity = static_cast<int64_t>(impl_->storage->nbytes() / dtype_size(impl_->dtype));
  TITAN_CHECK(lo >= 0 && (numel_of(sizes) == 0 || hi < capacity), "Tensor::as_strided: view ",
              shape_str(sizes), " strides ", shape_str(strides), " offset ", offset,
              " reaches outside a storage of ", capacity, " elements");
  // A captured value has no strides to view through: only the same geometry (detach) is kept.
  TITAN_CHECK(!impl_->lazy.defined() || (sizes == impl_->sizes && strides == impl_->strides &&
                                         offset == impl_->offset),
              "Tensor::as_strided: ", desc(), " is on ", device(),
              " (graph mode) and has no strided views; use view, reshape, narrow or transpose");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->lazy = impl_->lazy;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const {
  TITAN_CHECK(impl_, "Tensor::detach: undefined tensor");
  return as_strided(impl_->sizes, impl_->strides, impl_->offset);
}

AutogradMeta& Tensor::autograd_meta() const {
  TITAN_CHECK(impl_, "autograd: undefined tensor");
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  return *impl_->autograd;
}

}  // namespace titan
