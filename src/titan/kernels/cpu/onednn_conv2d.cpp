#include "titan/kernels/cpu/onednn_conv2d.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/core/trace.h"
#include "titan/kernels/cpu/onednn_engine.h"

namespace titan::kernels::cpu {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

enum class Direction : uint8_t { forward, backward_data, backward_weights };

struct Key {
  Conv2dGeometry g;
  bool stored_bf16, compute_bf16;  // the operands' type in memory and in the products
  Direction direction;
  bool bias;
  auto tie() const {
    return std::tie(g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad_top, g.pad_bottom, g.pad_left,
                    g.pad_right, stored_bf16, compute_bf16, direction, bias);
  }
  bool operator<(const Key& other) const { return tie() < other.tie(); }
};

// One argument of the primitive: the caller's plain buffer and, where oneDNN chose another layout,
// the reorder between the two.
struct Arg {
  int id;
  memory::desc user, inner;
  bool output;
  bool reordered;
  dnnl::reorder reorder;
};

struct Entry {
  dnnl::primitive primitive;
  std::vector<Arg> args;  // in the order of the pointers the caller passes
  size_t scratch_bytes = 0;
};

memory::desc plain(const memory::dims& dims, dt type, tag layout) {
  return memory::desc(dims, type, layout);
}

Arg make_arg(int id, const memory::desc& user, const memory::desc& inner, bool output) {
  Arg a{id, user, inner, output, user != inner, {}};
  if (a.reordered) {
    dnnl::engine& e = onednn_engine();
    a.reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(e, inner, e, user))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(e, user, e, inner));
  }
  return a;
}

// A geometry's tensor dims (x, weight, y, bias), strides and paddings, as oneDNN takes them.
struct Descs {
  memory::dims x, w, y, b, strides, pad_l, pad_r;
};
Descs descs(const Conv2dGeometry& g) {
  return {{g.n, g.c, g.h, g.w}, {g.o, g.c, g.kh, g.kw},  {g.n, g.o, g.oh(), g.ow()}, {g.o},
          {g.stride, g.stride}, {g.pad_top, g.pad_left}, {g.pad_bottom, g.pad_right}};
}

// Layouts left to oneDNN ("any"): it picks the ones its fastest implementation reads.
dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, dt in, dt out, bool bias,
                                                     const dnnl::primitive_attr& attr) {
  const auto prop = dnnl::prop_kind::forward_training;
  const memory::desc x(d.x, in, tag::any), w(d.w, in, tag::any), y(d.y, out, tag::any);
  const auto algo = dnnl::algorithm::convolution_direct;
  if (bias) {
    const memory::desc b(d.b, dt::f32, tag::a);
    return {onednn_engine(), prop, algo, x, w, b, y, d.strides, d.pad_l, d.pad_r, attr};
  }
  return {onednn_engine(), prop, algo, x, w, y, d.strides, d.pad_l, d.pad_r, attr};
}

std::shared_ptr<const Entry> make_entry(const Key& key) {
  const Descs d = descs(key.g);
  const dt in = key.compute_bf16 ? dt::bf16 : dt::f32, stored = key.stored_bf16 ? dt::bf16 : dt::f32;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto entry = std::make_shared<Entry>();
  const auto algo = dnnl::algorithm::convolution_direct;
  const memory::desc bias_user = plain(d.b, dt::f32, tag::a);
  switch (key.direction) {
    case Direction::forward: {
      const auto pd = forward_pd(d, in, dt::f32, key.bias, attr);
      entry->primitive = dnnl::convolution_forward(pd);
      entry->scratch_bytes = pd.scratchpad_desc().get_size();
      entry->args = {make_arg(DNNL_ARG_SRC, plain(d.x, stored, tag::nchw), pd.src_desc(), false),
                     make_arg(DNNL_ARG_WEIGHTS, plain(d.w, stored, tag::oihw), pd.weights_desc(), false),
                     make_arg(DNNL_ARG_DST, plain(d.y, dt::f32, tag::nchw), pd.dst_desc(), true)};
      if (key.bias) entry->args.push_back(make_arg(DNNL_ARG_BIAS, bias_user, pd.bias_desc(), false));
      break;
    }
    case Direction::backward_data: {
      const auto hint = forward_pd(d, in, in, false, {});
      const memory::desc dx(d.x, dt::f32, tag::any), w(d.w, in, tag::any), dy(d.y, in, tag::any);
      const dnnl::convolution_backward_data::primitive_desc pd(onednn_engine(), algo, dx, w, dy, d.strides,
                                                               d.pad_l, d.pad_r, hint, attr);
      entry->primitive = dnnl::convolution_backward_data(pd);
      entry->scratch_bytes = pd.scratchpad_desc().get_size();
      entry->args = {make_arg(DNNL_ARG_DIFF_DST, plain(d.y, stored, tag::nchw), pd.diff_dst_desc(), false),
                     make_arg(DNNL_ARG_WEIGHTS, plain(d.w, stored, tag::oihw), pd.weights_desc(), false),
                     make_arg(DNNL_ARG_DIFF_SRC, plain(d.x, dt::f32, tag::nchw), pd.diff_src_desc(), true)};
      break;
    }
    case Direction::backward_weights: {
      const auto hint = forward_pd(d, in, in, false, {});
      const memory::desc x(d.x, in, tag::any), dw(d.w, dt::f32, tag::any), dy(d.y, in, tag::any);
      const dnnl::convolution_backward_weights::primitive_desc pd(onednn_engine(), algo, x, dw, dy, d.strides,
                                                                  d.pad_l, d.pad_r, hint, attr);
      entry->primitive = dnnl::convolution_backward_weights(pd);
      entry->scratch_bytes = pd.scratchpad_desc().get_size();
      entry->args = {
          make_arg(DNNL_ARG_DIFF_DST, plain(d.y, stored, tag::nchw), pd.diff_dst_desc(), false),
          make_arg(DNNL_ARG_SRC, plain(d.x, stored, tag::nchw), pd.src_desc(), false),
          make_arg(DNNL_ARG_DIFF_WEIGHTS, plain(d.w, dt::f32, tag::oihw), pd.diff_weights_desc(), true)};
      break;
    }
  }
  return entry;
}

// The cached entry, or null when oneDNN has no implementation for the case (remembered as such).
std::shared_ptr<const Entry> cached(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Entry>> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  trace::Span span("onednn primitive", "conv2d");
  std::shared_ptr<const Entry> entry;
  try {
    entry = make_entry(key);
  } catch (const dnnl::error&) {
    entry = nullptr;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(entry)).first->second;
}

// Host memory for oneDNN's layouts and scratchpad, from titan's caching allocator: the same sizes
// recur every step.
Tensor bytes(size_t n) {
  return Tensor::empty({static_cast<int64_t>((n + 3) / 4)}, {.dtype = kF32});
}

// The memory of one call: inputs reordered into oneDNN's layouts, each made once per call and shared
// by the primitives that read it in the same layout (backward's dy), and the outputs to reorder
// back.
class Staging {
 public:
  memory input(const Arg& a, const void* p) {
    memory user(a.user, onednn_engine(), const_cast<void*>(p));
    if (!a.reordered) return user;
    for (const auto& [q, m] : inputs_)
      if (q == p && m.get_desc() == a.inner) return m;
    memory inner = scratch(a.inner);
    a.reorder.execute(onednn_stream(), user, inner);
    inputs_.emplace_back(p, inner);
    return inner;
  }
  memory output(const Arg& a, void* p) {
    memory user(a.user, onednn_engine(), p);
    if (!a.reordered) return user;
    memory inner = scratch(a.inner);
    outputs_.push_back({&a, inner, user});
    return inner;
  }
  memory scratch(const memory::desc& desc) {
    held_.push_back(bytes(desc.get_size()));
    return memory(desc, onednn_engine(), held_.back().data<float>());
  }
  // Runs `entry` on `pointers` (in the order of its args), then reorders its outputs back.
  void execute(const Entry& entry, const std::vector<const void*>& pointers) {
    std::unordered_map<int, memory> exec;
    for (size_t i = 0; i < entry.args.size(); ++i) {
      const Arg& a = entry.args[i];
      exec.emplace(a.id, a.output ? output(a, const_cast<void*>(pointers[i])) : input(a, pointers[i]));
    }
    exec.emplace(DNNL_ARG_SCRATCHPAD, scratch(memory::desc({static_cast<memory::dim>(entry.scratch_bytes)},
                                                           dt::u8, memory::dims{1})));
    entry.primitive.execute(onednn_stream(), exec);
    for (Output& o : outputs_) o.arg->reorder.execute(onednn_stream(), o.inner, o.user);
    outputs_.clear();
  }
  // CPU streams run in order; waiting once at the end covers every primitive of the call.
  void wait() { onednn_stream().wait(); }

 private:
  struct Output {
    const Arg* arg;
    memory inner, user;
  };
  std::vector<Tensor> held_;
  std::vector<std::pair<const void*, memory>> inputs_;
  std::vector<Output> outputs_;
};

}  // namespace

template <typename T>
bool onednn_conv2d_fwd(const Conv2dGeometry& g, ConvCompute compute, const T* x, const T* weight,
                       const float* bias, float* y) {
  trace::Span span("onednn conv2d forward", "conv2d");
  const std::shared_ptr<const Entry> entry =
      cached({g, std::is_same_v<T, bf16>, compute == ConvCompute::bf16, Direction::forward, bias != nullptr});
  if (!entry) return false;
  std::vector<const void*> p{x, weight, y};
  if (bias != nullptr) p.push_back(bias);
  Staging staging;
  staging.execute(*entry, p);
  staging.wait();
  return true;
}

template <typename T>
bool onednn_conv2d_bwd(const Conv2dGeometry& g, ConvCompute compute, const T* dy, const T* x, const T* weight,
                       float* dx, float* dweight) {
  trace::Span span("onednn conv2d backward", "conv2d");
  const bool stored = std::is_same_v<T, bf16>, in = compute == ConvCompute::bf16;
  const std::shared_ptr<const Entry> data =
      dx != nullptr ? cached({g, stored, in, Direction::backward_data, false}) : nullptr;
  const std::shared_ptr<const Entry> weights =
      dweight != nullptr ? cached({g, stored, in, Direction::backward_weights, false}) : nullptr;
  if ((dx != nullptr && !data) || (dweight != nullptr && !weights)) return false;
  Staging staging;
  if (data) staging.execute(*data, {dy, weight, dx});
  if (weights) staging.execute(*weights, {dy, x, dweight});
  staging.wait();
  return true;
}

#define TITAN_ONEDNN_CONV2D(T)                                                                             \
  template bool onednn_conv2d_fwd<T>(const Conv2dGeometry&, ConvCompute, const T*, const T*, const float*, \
                                     float*);                                                              \
  template bool onednn_conv2d_bwd<T>(const Conv2dGeometry&, ConvCompute, const T*, const T*, const T*,     \
                                     float*, float*);
TITAN_ONEDNN_CONV2D(float)
TITAN_ONEDNN_CONV2D(bf16)
#undef TITAN_ONEDNN_CONV2D

}  // namespace titan::kernels::cpu
