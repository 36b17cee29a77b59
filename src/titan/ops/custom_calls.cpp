#include "titan/ops/custom_calls.h"

#include "titan/core/error.h"
#include "titan/graph/ir/hlo.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/kernels/cpu/cross_entropy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/norm.h"

namespace titan::ops {
namespace {

namespace ffi = graph::pjrt::ffi;

constexpr char kRmsNormFwd[] = "titan_rms_norm_fwd";
constexpr char kRmsNormBwd[] = "titan_rms_norm_bwd";
constexpr char kCrossEntropyFwd[] = "titan_cross_entropy_fwd";
constexpr char kCrossEntropyBwd[] = "titan_cross_entropy_bwd";

void rms_norm_fwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 2 && call.num_results() == 2, kRmsNormFwd, " takes x and weight and gives y and ",
              "rstd, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array x = call.arg(0), weight = call.arg(1), y = call.result(0), rstd = call.result(1);
  TITAN_CHECK(!x.dims.empty() && x.dims.back() > 0, kRmsNormFwd, ": x ", shape_str(x.dims),
              " needs a non-empty last dim");
  const int64_t d = x.dims.back(), rows = x.numel() / d;
  TITAN_CHECK(weight.dims == Shape{d} && y.dims == x.dims && rstd.dims == Shape{rows}, kRmsNormFwd, ": x ",
              shape_str(x.dims), " wants weight [", d, "], y ", shape_str(x.dims), " and rstd [", rows, "], got ",
              shape_str(weight.dims), ", ", shape_str(y.dims), " and ", shape_str(rstd.dims));
  TITAN_CHECK(x.dtype == kF32 || x.dtype == kF64, kRmsNormFwd, ": x is ", dtype_name(x.dtype),
              "; the kernel takes f32 or f64");
  const double eps = call.scalar_attr("eps");
  kernels::cpu::dispatch_float(x.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::rms_norm_fwd<T>(x.as<T>("x"), weight.as<T>("weight"), y.as<T>("y"), rstd.as<T>("rstd"), rows,
                                  d, eps);
  });
}

void rms_norm_bwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 4 && call.num_results() == 2, kRmsNormBwd, " takes dy, x, weight and rstd and ",
              "gives dx and dweight, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array dy = call.arg(0), x = call.arg(1), weight = call.arg(2), rstd = call.arg(3), dx = call.result(0),
                   dw = call.result(1);
  TITAN_CHECK(!x.dims.empty() && x.dims.back() > 0, kRmsNormBwd, ": x ", shape_str(x.dims),
              " needs a non-empty last dim");
  const int64_t d = x.dims.back(), rows = x.numel() / d;
  TITAN_CHECK(dy.dims == x.dims && dx.dims == x.dims && weight.dims == Shape{d} && dw.dims == Shape{d} &&
                  rstd.dims == Shape{rows},
              kRmsNormBwd, ": x ", shape_str(x.dims), " wants dy and dx of its shape, weight and dweight [", d,
              "] and rstd [", rows, "], got ", shape_str(dy.dims), ", ", shape_str(dx.dims), ", ",
              shape_str(weight.dims), ", ", shape_str(dw.dims), " and ", shape_str(rstd.dims));
  TITAN_CHECK(x.dtype == kF32 || x.dtype == kF64, kRmsNormBwd, ": x is ", dtype_name(x.dtype),
              "; the kernel takes f32 or f64");
  kernels::cpu::dispatch_float(x.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::rms_norm_bwd<T>(dy.as<T>("dy"), x.as<T>("x"), weight.as<T>("weight"), rstd.as<T>("rstd"),
                                  dx.as<T>("dx"), dw.as<T>("dweight"), rows, d);
  });
}

// logits [rows, V] and targets [rows], checked.
struct Logits {
  ffi::Array logits, targets;
  int64_t rows = {}, vocab = {};
};
Logits logits_of(const char* target, const ffi::Call& call) {
  Logits l{call.arg(0), call.arg(1)};
  TITAN_CHECK(l.logits.dims.size() == 2 && l.targets.dims == Shape{l.logits.dims[0]} && l.logits.dims[1] > 0,
              target, ": wants logits [rows, V] and targets [rows], got ", shape_str(l.logits.dims), " and ",
              shape_str(l.targets.dims));
  TITAN_CHECK((l.logits.dtype == kF32 || l.logits.dtype == kF64) &&
                  (l.targets.dtype == kI32 || l.targets.dtype == kI64),
              target, ": logits are ", dtype_name(l.logits.dtype), " and targets ", dtype_name(l.targets.dtype),
              "; the kernel takes f32 or f64 logits and i32 or i64 targets");
  l.rows = l.logits.dims[0], l.vocab = l.logits.dims[1];
  return l;
}

void cross_entropy_fwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 2 && call.num_results() == 3, kCrossEntropyFwd, " takes logits and targets and ",
              "gives the loss's sum, the counted rows and lse, got ", call.num_args(), " arguments and ",
              call.num_results(), " results");
  const Logits l = logits_of(kCrossEntropyFwd, call);
  const ffi::Array sum = call.result(0), count = call.result(1), lse = call.result(2);
  TITAN_CHECK(sum.dims.empty() && count.dims.empty() && lse.dims == Shape{l.rows}, kCrossEntropyFwd,
              ": wants results [], [] and [", l.rows, "], got ", shape_str(sum.dims), ", ", shape_str(count.dims),
              " and ", shape_str(lse.dims));
  const auto ignore_index = static_cast<int64_t>(call.scalar_attr("ignore_index"));
  kernels::cpu::dispatch_float_index(l.logits.dtype, l.targets.dtype, [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    const kernels::cpu::CrossEntropySums sums = kernels::cpu::cross_entropy_forward<T, I>(
        l.logits.as<T>("logits"), l.targets.as<I>("targets"), l.rows, l.vocab, ignore_index, lse.as<T>("lse"));
    *sum.as<T>("the loss's sum") = static_cast<T>(sums.loss);
    *count.as<T>("the counted rows") = static_cast<T>(sums.count);
  });
}

void cross_entropy_bwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 4 && call.num_results() == 1, kCrossEntropyBwd, " takes logits, targets, lse ",
              "and the scale and gives dlogits, got ", call.num_args(), " arguments and ", call.num_results(),
              " results");
  const Logits l = logits_of(kCrossEntropyBwd, call);
  const ffi::Array lse = call.arg(2), scale = call.arg(3), dl = call.result(0);
  TITAN_CHECK(lse.dims == Shape{l.rows} && scale.dims.empty() && dl.dims == l.logits.dims, kCrossEntropyBwd,
              ": wants lse [", l.rows, "], a scale [] and dlogits ", shape_str(l.logits.dims), ", got ",
              shape_str(lse.dims), ", ", shape_str(scale.dims), " and ", shape_str(dl.dims));
  const auto ignore_index = static_cast<int64_t>(call.scalar_attr("ignore_index"));
  kernels::cpu::dispatch_float_index(l.logits.dtype, l.targets.dtype, [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    kernels::cpu::cross_entropy_backward<T, I>(l.logits.as<T>("logits"), l.targets.as<I>("targets"),
                                               lse.as<T>("lse"), l.rows, l.vocab, ignore_index,
                                               *scale.as<T>("scale"), dl.as<T>("dlogits"));
  });
}

}  // namespace

void register_custom_calls(const graph::pjrt::Plugin& plugin) {
  ffi::register_handler(plugin, kRmsNormFwd, ffi::handler<rms_norm_fwd_kernel>);
  ffi::register_handler(plugin, kRmsNormBwd, ffi::handler<rms_norm_bwd_kernel>);
  ffi::register_handler(plugin, kCrossEntropyFwd, ffi::handler<cross_entropy_fwd_kernel>);
  ffi::register_handler(plugin, kCrossEntropyBwd, ffi::handler<cross_entropy_bwd_kernel>);
}

std::vector<graph::Value> rms_norm_fwd_call(const graph::Value& x, const graph::Value& weight, double eps) {
  TITAN_CHECK(!x.shape.empty() && weight.shape == Shape{x.shape.back()} && weight.dtype == x.dtype,
              "graph lowering: rms_norm wants x [..., d] and weight [d] of one dtype, got ", graph::mlir_type(x),
              " and ", graph::mlir_type(weight));
  const int64_t rows = numel_of(x.shape) / x.shape.back();
  return graph::hlo::custom_call(kRmsNormFwd, {x, weight}, {{x.shape, x.dtype, false}, {{rows}, x.dtype, false}},
                                 {{"eps", eps}});
}


std::vector<graph::Value> rms_norm_bwd_call(const graph::Value& dy, const graph::Value& x, const graph::Value& weight,
                                            const graph::Value& rstd) {
  return graph::hlo::custom_call(kRmsNormBwd, {dy, x, weight, rstd},
                                 {{x.shape, x.dtype, false}, {weight.shape, weight.dtype, false}});
}

std::vector<graph::Value> cross_entropy_fwd_call(const graph::Value& logits, const graph::Value& targets,
                                                 int64_t ignore_index) {
  const DType t = logits.dtype;
  return graph::hlo::custom_call(kCrossEntropyFwd, {logits, targets},
                                 {{{}, t, false}, {{}, t, false}, {{logits.shape.at(0)}, t, false}},
                                 {{"ignore_index", static_cast<double>(ignore_index)}});
}

graph::Value cross_entropy_bwd_call(const graph::Value& logits, const graph::Value& targets, const graph::Value& lse,
                                    const graph::Value& scale, int64_t ignore_index) {
  return graph::hlo::custom_call(kCrossEntropyBwd, {logits, targets, lse, scale},
                                 {{logits.shape, logits.dtype, false}},
                                 {{"ignore_index", static_cast<double>(ignore_index)}})[0];
}

}  // namespace titan::ops
