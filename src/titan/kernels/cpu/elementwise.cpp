#include "titan/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "titan/kernels/cpu/bf16_convert.h"
#include "titan/kernels/cpu/strided_loop.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::kernels::cpu {

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  TITAN_CHECK(sz.size() <= shape.size(), "broadcast: tensor ", t.desc(), " has more dims than ",
              shape_str(shape));
  Shape out(shape.size(), 0);
  size_t lead = shape.size() - sz.size();
  for (size_t i = 0; i < sz.size(); ++i) {
    TITAN_CHECK(sz[i] == shape[lead + i] || sz[i] == 1, "broadcast: tensor ", t.desc(),
                " cannot broadcast to ", shape_str(shape));
    out[lead + i] = sz[i] == 1 ? 0 : st[i];
  }
  return out;
}

namespace {

template <typename T, typename F>
void binary_loop(const T* a, const T* b, T* o, const StridedLoop<3>& loop, F f) {
  loop.run([&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& s) {
    const T* pa = a + off[0];
    const T* pb = b + off[1];
    T* po = o + off[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const T vb = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    } else if (s[0] == 0 && s[1] == 1 && s[2] == 1) {
      const T va = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) po[i * s[2]] = f(pa[i * s[0]], pb[i * s[1]]);
    }
  });
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, T alpha) {
  StridedLoop<3> loop(out.sizes(),
                      {broadcast_strides(a, out.sizes()), broadcast_strides(b, out.sizes()), out.strides()});
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  switch (op) {
    case BinaryOp::add:
      if (alpha == T(1))
        binary_loop(pa, pb, po, loop, [](T x, T y) { return x + y; });
      else
        binary_loop(pa, pb, po, loop, [alpha](T x, T y) { return alpha * (x + y); });
      break;
    case BinaryOp::sub: binary_loop(pa, pb, po, loop, [alpha](T x, T y) { return alpha * (x - y); }); break;
    case BinaryOp::mul: binary_loop(pa, pb, po, loop, [alpha](T x, T y) { return alpha * x * y; }); break;
    case BinaryOp::div: binary_loop(pa, pb, po, loop, [alpha](T x, T y) { return alpha * x / y; }); break;
  }
}

template <typename T, typename F>
void unary_loop(const Tensor& x, const Tensor& out, F f) {
  StridedLoop<2> loop(out.sizes(), {broadcast_strides(x, out.sizes()), out.strides()});
  const T* px = x.data<T>();
  T* po = out.data<T>();
  loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& s) {
    const T* a = px + off[0];
    T* o = po + off[1];
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[1]] = f(a[i * s[0]]);
    }
  });
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& x, const Tensor& out) {
  switch (op) {
    case UnaryOp::neg: unary_loop<T>(x, out, [](T v) { return -v; }); break;
    case UnaryOp::exp: unary_loop<T>(x, out, [](T v) { return vexp(v); }); break;
    case UnaryOp::log: unary_loop<T>(x, out, [](T v) { return std::log(v); }); break;
    case UnaryOp::sqrt: unary_loop<T>(x, out, [](T v) { return std::sqrt(v); }); break;
    case UnaryOp::rsqrt: unary_loop<T>(x, out, [](T v) { return T(1) / std::sqrt(v); }); break;
    case UnaryOp::abs: unary_loop<T>(x, out, [](T v) { return std::abs(v); }); break;
    case UnaryOp::square: unary_loop<T>(x, out, [](T v) { return v * v; }); break;
  }
}

void check_same_float(const char* op, const Tensor& a, const Tensor& out) {
  TITAN_CHECK(a.dtype() == out.dtype() && (a.dtype() == kF32 || a.dtype() == kF64), op,
              ": expected f32 or f64 operands of one dtype, got ", a.desc(), " -> ", out.desc());
}

template <typename S, typename D>
D convert(S v) {
  if constexpr (std::is_same_v<S, bf16>)
    return static_cast<D>(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, bf16>)
    return bf16(static_cast<float>(v));
  else
    return static_cast<D>(v);
}

template <typename S, typename D>
void copy_typed(const Tensor& src, const Tensor& out) {
  StridedLoop<2> loop(out.sizes(), {broadcast_strides(src, out.sizes()), out.strides()});
  const S* ps = static_cast<const S*>(src.data_ptr());
  D* po = static_cast<D*>(out.data_ptr());
  loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& s) {
    const S* a = ps + off[0];
    D* o = po + off[1];
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16>) {
      if (s[0] == 1 && s[1] == 1) return floats_to_bf16(a, o, n);
    }
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = convert<S, D>(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[1]] = convert<S, D>(a[i * s[0]]);
    }
  });
}

template <typename S>
void copy_from(const Tensor& src, const Tensor& out) {
  switch (out.dtype()) {
    case kF32: copy_typed<S, float>(src, out); break;
    case kF64: copy_typed<S, double>(src, out); break;
    case kBF16: copy_typed<S, bf16>(src, out); break;
    case kI32: copy_typed<S, int32_t>(src, out); break;
    case kI64: copy_typed<S, int64_t>(src, out); break;
  }
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  check_same_float("binary", a, out);
  check_same_float("binary", b, out);
  if (out.dtype() == kF32)
    binary_typed<float>(op, a, b, out, static_cast<float>(alpha));
  else
    binary_typed<double>(op, a, b, out, alpha);
}

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  check_same_float("unary", x, out);
  if (out.dtype() == kF32)
    unary_typed<float>(op, x, out);
  else
    unary_typed<double>(op, x, out);
}

void affine(const Tensor& x, double scale, double shift, const Tensor& out) {
  check_same_float("affine", x, out);
  if (out.dtype() == kF32) {
    float sc = static_cast<float>(scale), sh = static_cast<float>(shift);
    unary_loop<float>(x, out, [=](float v) { return v * sc + sh; });
  } else {
    unary_loop<double>(x, out, [=](double v) { return v * scale + shift; });
  }
}

void clamp(const Tensor& x, double lo, double hi, const Tensor& out) {
  check_same_float("clamp", x, out);
  if (out.dtype() == kF32) {
    const float l = static_cast<float>(lo), h = static_cast<float>(hi);
    unary_loop<float>(x, out, [=](float v) { return std::min(std::max(v, l), h); });
  } else {
    unary_loop<double>(x, out, [=](double v) { return std::min(std::max(v, lo), hi); });
  }
}

void clamp_backward(const Tensor& x, const Tensor& dy, double lo, double hi, const Tensor& out) {
  check_same_float("clamp_backward", x, out);
  check_same_float("clamp_backward", dy, out);
  StridedLoop<3> loop(out.sizes(), {x.strides(), dy.strides(), out.strides()});
  if (out.dtype() == kF32) {
    const float l = static_cast<float>(lo), h = static_cast<float>(hi);
    binary_loop(x.data<float>(), dy.data<float>(), out.data<float>(), loop,
                [=](float v, float g) { return v >= l && v <= h ? g : 0.0f; });
  } else {
    binary_loop(x.data<double>(), dy.data<double>(), out.data<double>(), loop,
                [=](double v, double g) { return v >= lo && v <= hi ? g : 0.0; });
  }
}

void copy(const Tensor& src, const Tensor& out) {
  switch (src.dtype()) {
    case kF32: copy_from<float>(src, out); break;
    case kF64: copy_from<double>(src, out); break;
    case kBF16: copy_from<bf16>(src, out); break;
    case kI32: copy_from<int32_t>(src, out); break;
    case kI64: copy_from<int64_t>(src, out); break;
  }
}

void accumulate(const Tensor& dst, const Tensor& src, double alpha) {
  check_same_float("accumulate", src, dst);
  StridedLoop<3> loop(dst.sizes(), {dst.strides(), broadcast_strides(src, dst.sizes()), dst.strides()});
  if (dst.dtype() == kF32) {
    float a = static_cast<float>(alpha);
    binary_loop(dst.data<float>(), src.data<float>(), dst.data<float>(), loop,
                [a](float x, float y) { return x + a * y; });
  } else {
    binary_loop(dst.data<double>(), src.data<double>(), dst.data<double>(), loop,
                [alpha](double x, double y) { return x + alpha * y; });
  }
}

}  // namespace titan::kernels::cpu
