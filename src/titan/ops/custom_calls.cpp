#include "titan/ops/custom_calls.h"

#include "titan/core/error.h"
#include "titan/graph/ir/hlo.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/norm.h"

namespace titan::ops {
namespace {

namespace ffi = graph::pjrt::ffi;

constexpr char kRmsNormFwd[] = "titan_rms_norm_fwd";
constexpr char kRmsNormBwd[] = "titan_rms_norm_bwd";

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

}  // namespace

void register_custom_calls(const graph::pjrt::Plugin& plugin) {
  ffi::register_handler(plugin, kRmsNormFwd, ffi::handler<rms_norm_fwd_kernel>);
  ffi::register_handler(plugin, kRmsNormBwd, ffi::handler<rms_norm_bwd_kernel>);
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

}  // namespace titan::ops
