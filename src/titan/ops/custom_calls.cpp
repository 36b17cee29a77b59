#include "titan/ops/custom_calls.h"

#include <optional>
#include <string>

#include "titan/core/error.h"
#include "titan/graph/ir/hlo.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/kernels/cpu/activation.h"
#include "titan/kernels/cpu/adamw.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/grouped_gemm.h"
#include "titan/kernels/cpu/grouped_swiglu.h"
#include "titan/kernels/cpu/moe.h"
#include "titan/kernels/cpu/norm.h"

namespace titan::ops {
namespace {

namespace ffi = graph::pjrt::ffi;

constexpr char kRmsNormFwd[] = "titan_rms_norm_fwd";
constexpr char kRmsNormBwd[] = "titan_rms_norm_bwd";
constexpr char kLayerNormFwd[] = "titan_layer_norm_fwd";
constexpr char kLayerNormBwd[] = "titan_layer_norm_bwd";
constexpr char kGemm[] = "titan_gemm";
constexpr char kGroupedGemm[] = "titan_grouped_gemm";
constexpr char kGroupedGemmTn[] = "titan_grouped_gemm_tn";
constexpr char kSwigluFwd[] = "titan_swiglu_fwd";
constexpr char kSwigluBwd[] = "titan_swiglu_bwd";
constexpr char kGatherRows[] = "titan_gather_rows";
constexpr char kCombineRows[] = "titan_combine_rows";
constexpr char kCombineRowsBwd[] = "titan_combine_rows_bwd";
constexpr char kGroupedSwigluFwd[] = "titan_grouped_swiglu_fwd";
constexpr char kGroupedSwigluBwd[] = "titan_grouped_swiglu_bwd";
constexpr char kAdamW[] = "titan_adamw";

// x [..., d] of a norm's kernel as rows of d: a non-empty last dim and a float dtype the kernels take.
struct NormRows {
  int64_t rows, d;
};
NormRows normalised_rows(const char* target, const ffi::Array& x) {
  TITAN_CHECK(!x.dims.empty() && x.dims.back() > 0, target, ": x ", shape_str(x.dims), " needs a non-empty last dim");
  TITAN_CHECK(x.dtype == kF32 || x.dtype == kF64, target, ": x is ", dtype_name(x.dtype),
              "; the kernel takes f32 or f64");
  return {x.numel() / x.dims.back(), x.dims.back()};
}

void rms_norm_fwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 2 && call.num_results() == 2, kRmsNormFwd, " takes x and weight and gives y and ",
              "rstd, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array x = call.arg(0), weight = call.arg(1), y = call.result(0), rstd = call.result(1);
  const NormRows shape = normalised_rows(kRmsNormFwd, x);
  const int64_t rows = shape.rows, d = shape.d;
  TITAN_CHECK(weight.dims == Shape{d} && y.dims == x.dims && rstd.dims == Shape{rows}, kRmsNormFwd, ": x ",
              shape_str(x.dims), " wants weight [", d, "], y ", shape_str(x.dims), " and rstd [", rows, "], got ",
              shape_str(weight.dims), ", ", shape_str(y.dims), " and ", shape_str(rstd.dims));
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
  const NormRows shape = normalised_rows(kRmsNormBwd, x);
  const int64_t rows = shape.rows, d = shape.d;
  TITAN_CHECK(dy.dims == x.dims && dx.dims == x.dims && weight.dims == Shape{d} && dw.dims == Shape{d} &&
                  rstd.dims == Shape{rows},
              kRmsNormBwd, ": x ", shape_str(x.dims), " wants dy and dx of its shape, weight and dweight [", d,
              "] and rstd [", rows, "], got ", shape_str(dy.dims), ", ", shape_str(dx.dims), ", ",
              shape_str(weight.dims), ", ", shape_str(dw.dims), " and ", shape_str(rstd.dims));
  kernels::cpu::dispatch_float(x.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::rms_norm_bwd<T>(dy.as<T>("dy"), x.as<T>("x"), weight.as<T>("weight"), rstd.as<T>("rstd"),
                                  dx.as<T>("dx"), dw.as<T>("dweight"), rows, d);
  });
}

// LayerNorm's optional per-feature weight and bias travel as operands only where present; the
// attributes has_weight and has_bias say which.
struct LayerNormParams {
  bool weight, bias;
};
LayerNormParams layer_norm_params(const ffi::Call& call) {
  return {call.scalar_attr("has_weight") != 0, call.scalar_attr("has_bias") != 0};
}

void layer_norm_fwd_kernel(const ffi::Call& call) {
  const auto [has_w, has_b] = layer_norm_params(call);
  const int64_t args = 1 + int64_t{has_w} + int64_t{has_b};
  TITAN_CHECK(call.num_args() == args && call.num_results() == 3, kLayerNormFwd, " takes x",
              has_w ? ", weight" : "", has_b ? ", bias" : "", " and gives y, mean and rstd, got ",
              call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array x = call.arg(0), y = call.result(0), mean = call.result(1), rstd = call.result(2);
  const NormRows shape = normalised_rows(kLayerNormFwd, x);
  const int64_t rows = shape.rows, d = shape.d;
  std::optional<ffi::Array> weight, bias;
  if (has_w) weight = call.arg(1);
  if (has_b) bias = call.arg(args - 1);
  for (const std::optional<ffi::Array>& p : {weight, bias})
    TITAN_CHECK(!p || (p->dims == Shape{d} && p->dtype == x.dtype), kLayerNormFwd, ": x ", shape_str(x.dims),
                " wants its weight and bias [", d, "] of its dtype, got ", shape_str(p->dims));
  TITAN_CHECK(y.dims == x.dims && mean.dims == Shape{rows} && rstd.dims == Shape{rows}, kLayerNormFwd, ": x ",
              shape_str(x.dims), " wants y of its shape and mean and rstd [", rows, "], got ",
              shape_str(y.dims), ", ", shape_str(mean.dims), " and ", shape_str(rstd.dims));
  const double eps = call.scalar_attr("eps");
  kernels::cpu::dispatch_float(x.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::layer_norm_fwd<T>(x.as<T>("x"), weight ? weight->as<T>("weight") : nullptr,
                                    bias ? bias->as<T>("bias") : nullptr, y.as<T>("y"), mean.as<T>("mean"),
                                    rstd.as<T>("rstd"), rows, d, eps);
  });
}

void layer_norm_bwd_kernel(const ffi::Call& call) {
  const auto [has_w, has_b] = layer_norm_params(call);
  const int64_t args = 4 + int64_t{has_w}, results = 1 + int64_t{has_w} + int64_t{has_b};
  TITAN_CHECK(call.num_args() == args && call.num_results() == results, kLayerNormBwd, " takes dy, x",
              has_w ? ", weight" : "", ", mean and rstd and gives dx", has_w ? ", dweight" : "",
              has_b ? ", dbias" : "", ", got ", call.num_args(), " arguments and ", call.num_results(),
              " results");
  const ffi::Array dy = call.arg(0), x = call.arg(1), mean = call.arg(args - 2), rstd = call.arg(args - 1),
                   dx = call.result(0);
  const NormRows shape = normalised_rows(kLayerNormBwd, x);
  const int64_t rows = shape.rows, d = shape.d;
  std::optional<ffi::Array> weight, dw, db;
  if (has_w) {
    weight = call.arg(2);
    dw = call.result(1);
  }
  if (has_b) db = call.result(results - 1);
  for (const std::optional<ffi::Array>& p : {weight, dw, db})
    TITAN_CHECK(!p || (p->dims == Shape{d} && p->dtype == x.dtype), kLayerNormBwd, ": x ", shape_str(x.dims),
                " wants weight, dweight and dbias [", d, "] of its dtype, got ", shape_str(p->dims));
  TITAN_CHECK(dy.dims == x.dims && dx.dims == x.dims && mean.dims == Shape{rows} && rstd.dims == Shape{rows},
              kLayerNormBwd, ": x ", shape_str(x.dims), " wants dy and dx of its shape and mean and rstd [",
              rows, "], got ", shape_str(dy.dims), ", ", shape_str(dx.dims), ", ", shape_str(mean.dims),
              " and ", shape_str(rstd.dims));
  kernels::cpu::dispatch_float(x.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::layer_norm_bwd<T>(dy.as<T>("dy"), x.as<T>("x"), weight ? weight->as<T>("weight") : nullptr,
                                    mean.as<T>("mean"), rstd.as<T>("rstd"), dx.as<T>("dx"),
                                    dw ? dw->as<T>("dweight") : nullptr, db ? db->as<T>("dbias") : nullptr,
                                    rows, d);
  });
}

// The group sizes of a grouped GEMM call, checked: they are data of the step, and a wrong one
// would send a GEMM past its rows.
const int64_t* group_sizes(const char* target, const ffi::Array& sizes, int64_t groups, int64_t rows) {
  TITAN_CHECK(sizes.dims == Shape{groups}, target, ": wants group sizes [", groups, "], got ",
              shape_str(sizes.dims));
  const int64_t* n = sizes.as<int64_t>("group sizes");
  int64_t total = 0;
  for (int64_t g = 0; g < groups; ++g) {
    TITAN_CHECK(n[g] >= 0, target, ": group ", g, " has ", n[g], " rows; a group size must be >= 0");
    total += n[g];
  }
  TITAN_CHECK(total == rows, target, ": the group sizes sum to ", total, " but the operands have ", rows, " rows");
  return n;
}

DType accumulation_dtype(DType operand) {
  return operand == kBF16 ? kF32 : operand;
}

void check_operand_dtypes(const char* target, const ffi::Array& a, const ffi::Array& b, const ffi::Array& result) {
  TITAN_CHECK((a.dtype == kF32 || a.dtype == kF64 || a.dtype == kBF16) && b.dtype == a.dtype &&
                  result.dtype == accumulation_dtype(a.dtype),
              target, ": wants two operands of one dtype of f32, f64 or bf16 and a result in its accumulation "
              "dtype, got ", dtype_name(a.dtype), ", ", dtype_name(b.dtype), " and ", dtype_name(result.dtype));
}

// The attribute naming product i's transpose of `which` ("a" or "b").
std::string trans_attr(const char* which, size_t i) {
  return std::string("trans_") + which + std::to_string(i);
}

void gemm_kernel(const ffi::Call& call) {
  const int64_t n_products = call.num_results();
  TITAN_CHECK(n_products >= 1 && call.num_args() == 2 * n_products, kGemm, " takes an a and a b for each product ",
              "it gives, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const DType dtype = call.arg(0).dtype;
  kernels::cpu::dispatch_matmul(dtype, [&](auto z) {
    using T = decltype(z);
    using Acc = kernels::cpu::gemm_acc_t<T>;
    std::vector<kernels::cpu::GemmCall<T>> calls;
    for (int64_t i = 0; i < n_products; ++i) {
      const ffi::Array a = call.arg(2 * i), b = call.arg(2 * i + 1), c = call.result(i);
      const auto p = static_cast<size_t>(i);
      const bool trans_a = call.scalar_attr(trans_attr("a", p)) != 0, trans_b = call.scalar_attr(trans_attr("b", p)) != 0;
      TITAN_CHECK(a.dims.size() == 2 && b.dims.size() == 2 && c.dims.size() == 2, kGemm, ": product ", i,
                  " wants matrices, got ", shape_str(a.dims), ", ", shape_str(b.dims), " and ", shape_str(c.dims));
      const int64_t m = a.dims[trans_a ? 1 : 0], k = a.dims[trans_a ? 0 : 1], n = b.dims[trans_b ? 0 : 1];
      TITAN_CHECK(b.dims[trans_b ? 1 : 0] == k && c.dims == (Shape{m, n}), kGemm, ": product ", i, ": a ",
                  shape_str(a.dims), (trans_a ? " (transposed)" : ""), " and b ", shape_str(b.dims),
                  (trans_b ? " (transposed)" : ""), " do not multiply into c ", shape_str(c.dims));
      check_operand_dtypes(kGemm, a, b, c);
      TITAN_CHECK(a.dtype == dtype, kGemm, ": product ", i, " is ", dtype_name(a.dtype), ", product 0 ",
                  dtype_name(dtype), "; one call multiplies one dtype");
      calls.push_back({trans_a, trans_b, m, n, k, Acc(1), a.as<T>("a"), a.dims[1], b.as<T>("b"), b.dims[1], Acc(0),
                       c.as<Acc>("c"), n});
    }
    kernels::cpu::gemm_concurrent<T>(calls);
  });
}

void grouped_gemm_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 3 && call.num_results() == 1, kGroupedGemm, " takes x, w and the group sizes and ",
              "gives y, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array x = call.arg(0), w = call.arg(1), y = call.result(0);
  const bool trans_w = call.scalar_attr("trans_w") != 0;
  TITAN_CHECK(x.dims.size() == 2 && w.dims.size() == 3 && y.dims.size() == 2, kGroupedGemm, ": wants x [rows, k], ",
              "w [groups, n, k] or [groups, k, n] and y [rows, n], got ", shape_str(x.dims), ", ", shape_str(w.dims),
              " and ", shape_str(y.dims));
  const int64_t rows = x.dims[0], k = x.dims[1], n = trans_w ? w.dims[1] : w.dims[2];
  TITAN_CHECK((trans_w ? w.dims[2] : w.dims[1]) == k && y.dims == (Shape{rows, n}), kGroupedGemm, ": x ",
              shape_str(x.dims), " and w ", shape_str(w.dims), (trans_w ? " (read transposed)" : ""),
              " do not multiply into y ", shape_str(y.dims));
  check_operand_dtypes(kGroupedGemm, x, w, y);
  const int64_t* sizes = group_sizes(kGroupedGemm, call.arg(2), w.dims[0], rows);
  kernels::cpu::dispatch_matmul(x.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::grouped_gemm<T>(sizes, w.dims[0], n, k, x.as<T>("x"), w.as<T>("w"), trans_w,
                                  y.as<kernels::cpu::gemm_acc_t<T>>("y"));
  });
}

void grouped_gemm_tn_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 3 && call.num_results() == 1, kGroupedGemmTn, " takes a, b and the group sizes ",
              "and gives dw, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array a = call.arg(0), b = call.arg(1), dw = call.result(0);
  TITAN_CHECK(a.dims.size() == 2 && b.dims.size() == 2 && dw.dims.size() == 3 && a.dims[0] == b.dims[0] &&
                  dw.dims[1] == a.dims[1] && dw.dims[2] == b.dims[1],
              kGroupedGemmTn, ": wants a [rows, m], b [rows, n] and dw [groups, m, n], got ", shape_str(a.dims), ", ",
              shape_str(b.dims), " and ", shape_str(dw.dims));
  check_operand_dtypes(kGroupedGemmTn, a, b, dw);
  const int64_t* sizes = group_sizes(kGroupedGemmTn, call.arg(2), dw.dims[0], a.dims[0]);
  kernels::cpu::dispatch_matmul(a.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::grouped_gemm_tn<T>(sizes, dw.dims[0], a.dims[1], b.dims[1], a.as<T>("a"), b.as<T>("b"),
                                     dw.as<kernels::cpu::gemm_acc_t<T>>("dw"));
  });
}

// An index operand, each entry checked to lie in [0, bound): the indices are data of the step, and
// a wrong one would read or write past a buffer.
const int64_t* checked_index(const char* target, const char* what, const ffi::Array& index, int64_t bound) {
  const int64_t* ix = index.as<int64_t>(what);
  for (int64_t i = 0; i < index.numel(); ++i)
    TITAN_CHECK(ix[i] >= 0 && ix[i] < bound, target, ": ", what, "[", i, "] = ", ix[i], " is outside [0, ", bound, ")");
  return ix;
}

void check_float_dtype(const char* target, DType dtype) {
  TITAN_CHECK(dtype == kF32 || dtype == kF64, target, ": rows are ", dtype_name(dtype), "; the kernel takes f32 or f64");
}

// The arguments and results of a SwiGLU call, all of one shape and float dtype.
void check_elementwise(const char* target, const ffi::Call& call, int64_t args, int64_t results) {
  TITAN_CHECK(call.num_args() == args && call.num_results() == results, target, " takes ", args, " arrays and gives ",
              results, ", got ", call.num_args(), " and ", call.num_results());
  const ffi::Array first = call.arg(0);
  check_float_dtype(target, first.dtype);
  auto same = [&](const ffi::Array& a) {
    TITAN_CHECK(a.dims == first.dims && a.dtype == first.dtype, target, ": every array must be ",
                dtype_name(first.dtype), shape_str(first.dims), ", got ", dtype_name(a.dtype), shape_str(a.dims));
  };
  for (int64_t i = 1; i < args; ++i) same(call.arg(i));
  for (int64_t i = 0; i < results; ++i) same(call.result(i));
}

void swiglu_fwd_kernel(const ffi::Call& call) {
  check_elementwise(kSwigluFwd, call, 2, 1);
  kernels::cpu::dispatch_float(call.arg(0).dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::swiglu_fwd<T>(call.arg(0).as<T>("gate"), call.arg(1).as<T>("up"), call.result(0).as<T>("out"),
                                call.arg(0).numel());
  });
}

void swiglu_bwd_kernel(const ffi::Call& call) {
  check_elementwise(kSwigluBwd, call, 3, 2);
  kernels::cpu::dispatch_float(call.arg(0).dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::swiglu_bwd<T>(call.arg(0).as<T>("gate"), call.arg(1).as<T>("up"), call.arg(2).as<T>("d_out"),
                                call.result(0).as<T>("d_gate"), call.result(1).as<T>("d_up"), call.arg(0).numel());
  });
}

void gather_rows_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 2 && call.num_results() == 1, kGatherRows, " takes src and index and gives dst, got ",
              call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array src = call.arg(0), index = call.arg(1), dst = call.result(0);
  TITAN_CHECK(src.dims.size() == 2 && index.dims.size() == 1 && dst.dims == (Shape{index.dims[0], src.dims[1]}) &&
                  dst.dtype == src.dtype,
              kGatherRows, ": wants src [n, d], index [rows] and dst [rows, d] of src's dtype, got ", shape_str(src.dims),
              ", ", shape_str(index.dims), " and ", shape_str(dst.dims));
  check_float_dtype(kGatherRows, src.dtype);
  const int64_t* ix = checked_index(kGatherRows, "index", index, src.dims[0]);
  kernels::cpu::dispatch_float(src.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::gather_rows<T>(src.as<T>("src"), ix, index.dims[0], src.dims[1], dst.as<T>("dst"));
  });
}

// tokens, k and d of a combine: src [tokens * k, d], row_of [tokens * k], weights [tokens, k].
struct CombineDims {
  int64_t tokens = 0, k = 0, d = 0;
};
CombineDims combine_dims(const char* target, const ffi::Array& src, const ffi::Array& row_of, int64_t tokens,
                         const ffi::Array* weights) {
  TITAN_CHECK(src.dims.size() == 2 && tokens > 0 && src.dims[0] % tokens == 0 && row_of.dims == Shape{src.dims[0]},
              target, ": wants src [tokens * k, d] and row_of [tokens * k] for ", tokens, " tokens, got ",
              shape_str(src.dims), " and ", shape_str(row_of.dims));
  const CombineDims c{tokens, src.dims[0] / tokens, src.dims[1]};
  TITAN_CHECK(!weights || (weights->dims == (Shape{c.tokens, c.k}) && weights->dtype == src.dtype), target,
              ": wants weights [", c.tokens, ", ", c.k, "] of the rows' dtype, got ", shape_str(weights->dims));
  check_float_dtype(target, src.dtype);
  return c;
}

void combine_rows_kernel(const ffi::Call& call) {
  TITAN_CHECK((call.num_args() == 2 || call.num_args() == 3) && call.num_results() == 1, kCombineRows,
              " takes src, row_of (and weights) and gives dst, got ", call.num_args(), " arguments and ",
              call.num_results(), " results");
  const ffi::Array src = call.arg(0), row_of = call.arg(1), dst = call.result(0);
  const std::optional<ffi::Array> weights = call.num_args() == 3 ? std::optional(call.arg(2)) : std::nullopt;
  TITAN_CHECK(dst.dims.size() == 2 && dst.dtype == src.dtype, kCombineRows, ": dst is ", shape_str(dst.dims));
  const CombineDims c = combine_dims(kCombineRows, src, row_of, dst.dims[0], weights ? &*weights : nullptr);
  TITAN_CHECK(dst.dims[1] == c.d, kCombineRows, ": dst ", shape_str(dst.dims), " for rows of ", c.d);
  const int64_t* rows = checked_index(kCombineRows, "row_of", row_of, src.dims[0]);
  kernels::cpu::dispatch_float(src.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::combine_rows<T>(src.as<T>("src"), rows, weights ? weights->as<T>("weights") : nullptr, c.tokens, c.k,
                                  c.d, dst.as<T>("dst"));
  });
}

void combine_rows_bwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 4 && call.num_results() == 2, kCombineRowsBwd, " takes d_dst, src, row_of and ",
              "weights and gives d_src and d_weights, got ", call.num_args(), " arguments and ", call.num_results(),
              " results");
  const ffi::Array d_dst = call.arg(0), src = call.arg(1), row_of = call.arg(2), weights = call.arg(3);
  const ffi::Array d_src = call.result(0), d_w = call.result(1);
  TITAN_CHECK(d_dst.dims.size() == 2 && d_dst.dtype == src.dtype, kCombineRowsBwd, ": d_dst is ",
              shape_str(d_dst.dims));
  const CombineDims c = combine_dims(kCombineRowsBwd, src, row_of, d_dst.dims[0], &weights);
  TITAN_CHECK(d_dst.dims[1] == c.d && d_src.dims == src.dims && d_w.dims == weights.dims, kCombineRowsBwd,
              ": d_dst ", shape_str(d_dst.dims), ", d_src ", shape_str(d_src.dims), " and d_weights ",
              shape_str(d_w.dims), " do not match src ", shape_str(src.dims), " and weights ", shape_str(weights.dims));
  const int64_t* rows = checked_index(kCombineRowsBwd, "row_of", row_of, src.dims[0]);
  kernels::cpu::dispatch_float(src.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::combine_rows_bwd<T>(d_dst.as<T>("d_dst"), src.as<T>("src"), rows, weights.as<T>("weights"),
                                      c.tokens, c.k, c.d, d_src.as<T>("d_src"), d_w.as<T>("d_weights"));
  });
}

// The sizes of one grouped SwiGLU call: x [rows, in] and w1, w3 [groups, hidden, in] of one
// operand dtype, and arrays [rows, hidden] in its accumulation dtype.
struct SwigluDims {
  int64_t rows = 0, in = 0, groups = 0, hidden = 0;
};
SwigluDims swiglu_dims(const char* target, const ffi::Array& x, const ffi::Array& w1, const ffi::Array& w3,
                       const std::vector<ffi::Array>& acc_rows) {
  TITAN_CHECK(x.dims.size() == 2 && w1.dims.size() == 3 && w3.dims == w1.dims && w1.dims[2] == x.dims[1], target,
              ": wants x [rows, in] and w1, w3 [groups, hidden, in], got ", shape_str(x.dims), ", ", shape_str(w1.dims),
              " and ", shape_str(w3.dims));
  const SwigluDims d{x.dims[0], x.dims[1], w1.dims[0], w1.dims[1]};
  TITAN_CHECK((x.dtype == kF32 || x.dtype == kF64 || x.dtype == kBF16) && w1.dtype == x.dtype && w3.dtype == x.dtype,
              target, ": x, w1 and w3 must be of one dtype of f32, f64 or bf16, got ", dtype_name(x.dtype), ", ",
              dtype_name(w1.dtype), " and ", dtype_name(w3.dtype));
  for (const ffi::Array& a : acc_rows)
    TITAN_CHECK(a.dims == (Shape{d.rows, d.hidden}) && a.dtype == accumulation_dtype(x.dtype), target,
                ": wants [rows, hidden] arrays of ", dtype_name(accumulation_dtype(x.dtype)), " ",
                shape_str({d.rows, d.hidden}), ", got ", dtype_name(a.dtype), " ", shape_str(a.dims));
  return d;
}

void grouped_swiglu_fwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 4 && call.num_results() == 3, kGroupedSwigluFwd, " takes x, w1, w3 and the group ",
              "sizes and gives h, gate and up, got ", call.num_args(), " arguments and ", call.num_results(), " results");
  const ffi::Array x = call.arg(0), w1 = call.arg(1), w3 = call.arg(2);
  const ffi::Array h = call.result(0), gate = call.result(1), up = call.result(2);
  const SwigluDims d = swiglu_dims(kGroupedSwigluFwd, x, w1, w3, {h, gate, up});
  const int64_t* sizes = group_sizes(kGroupedSwigluFwd, call.arg(3), d.groups, d.rows);
  kernels::cpu::dispatch_matmul(x.dtype, [&](auto z) {
    using T = decltype(z);
    using Acc = kernels::cpu::gemm_acc_t<T>;
    kernels::cpu::grouped_swiglu_fwd<T>(sizes, d.groups, d.hidden, d.in, x.as<T>("x"), w1.as<T>("w1"),
                                        w3.as<T>("w3"), gate.as<Acc>("gate"), up.as<Acc>("up"), h.as<Acc>("h"));
  });
}

void grouped_swiglu_bwd_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 7 && call.num_results() == 3, kGroupedSwigluBwd, " takes dh, gate, up, x, w1, w3 ",
              "and the group sizes and gives dx, dw1 and dw3, got ", call.num_args(), " arguments and ",
              call.num_results(), " results");
  const ffi::Array dh = call.arg(0), gate = call.arg(1), up = call.arg(2), x = call.arg(3), w1 = call.arg(4),
                   w3 = call.arg(5);
  const ffi::Array dx = call.result(0), dw1 = call.result(1), dw3 = call.result(2);
  const SwigluDims d = swiglu_dims(kGroupedSwigluBwd, x, w1, w3, {dh, gate, up});
  const DType acc = accumulation_dtype(x.dtype);
  TITAN_CHECK(dx.dims == x.dims && dw1.dims == w1.dims && dw3.dims == w1.dims && dx.dtype == acc &&
                  dw1.dtype == acc && dw3.dtype == acc,
              kGroupedSwigluBwd, ": wants dx ", shape_str(x.dims), ", dw1 and dw3 ", shape_str(w1.dims), " of ",
              dtype_name(acc), ", got ", shape_str(dx.dims), ", ", shape_str(dw1.dims), " and ", shape_str(dw3.dims));
  const int64_t* sizes = group_sizes(kGroupedSwigluBwd, call.arg(6), d.groups, d.rows);
  kernels::cpu::dispatch_matmul(x.dtype, [&](auto z) {
    using T = decltype(z);
    using Acc = kernels::cpu::gemm_acc_t<T>;
    kernels::cpu::grouped_swiglu_bwd<T>(sizes, d.groups, d.hidden, d.in, dh.as<Acc>("dh"), gate.as<Acc>("gate"),
                                        up.as<Acc>("up"), x.as<T>("x"), w1.as<T>("w1"), w3.as<T>("w3"),
                                        dx.as<Acc>("dx"), dw1.as<Acc>("dw1"), dw3.as<Acc>("dw3"));
  });
}

// The step's scalars arrive as arrays (program values, not attributes), so that one compiled
// step serves every step.
double scalar_arg(const ffi::Call& call, int64_t i, const char* what) {
  const ffi::Array a = call.arg(i);
  TITAN_CHECK(a.dims.empty() && (a.dtype == kF32 || a.dtype == kF64), kAdamW, ": ", what, " should be an f32 or f64 ",
              "scalar, got ", dtype_name(a.dtype), " ", shape_str(a.dims));
  return a.dtype == kF32 ? *a.as<float>(what) : *a.as<double>(what);
}

// param, grad, exp_avg, exp_avg_sq and the step's scalars (decay, neg_step_size, bc2_sqrt,
// grad_scale) give the three updated arrays, each written in place of its operand.
void adamw_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 8 && call.num_results() == 3, kAdamW, " takes param, grad, exp_avg, exp_avg_sq ",
              "and four scalars and gives param, exp_avg and exp_avg_sq, got ", call.num_args(), " arguments and ",
              call.num_results(), " results");
  const ffi::Array grad = call.arg(1), p = call.result(0), m = call.result(1), v = call.result(2);
  // The state is updated where it lies: a plugin that gave the results buffers of their own would
  // leave them unwritten but for this call's output, and the operands' values unread.
  TITAN_CHECK(call.arg(0).data == p.data && call.arg(2).data == m.data && call.arg(3).data == v.data, kAdamW,
              ": the plugin did not write the results in place of param, exp_avg and exp_avg_sq "
              "(output_operand_aliases); use a plugin that honours them, or compile.custom_kernels = false");
  for (const ffi::Array& a : {grad, m, v})
    TITAN_CHECK(a.dtype == p.dtype && a.dims == p.dims, kAdamW, ": every array should be ", dtype_name(p.dtype), " ",
                shape_str(p.dims), ", got ", dtype_name(a.dtype), " ", shape_str(a.dims));
  const kernels::cpu::AdamWHyper h{.beta1 = call.scalar_attr("beta1"),
                                   .beta2 = call.scalar_attr("beta2"),
                                   .eps = call.scalar_attr("eps"),
                                   .grad_scale = scalar_arg(call, 7, "grad_scale")};
  const kernels::cpu::AdamWScalars s{.decay = scalar_arg(call, 4, "decay"),
                                     .neg_step_size = scalar_arg(call, 5, "neg_step_size"),
                                     .bc2_sqrt = scalar_arg(call, 6, "bc2_sqrt")};
  kernels::cpu::dispatch_float(p.dtype, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::adamw_apply<T>(p.as<T>("param"), grad.as<T>("grad"), m.as<T>("exp_avg"), v.as<T>("exp_avg_sq"),
                                 p.numel(), h, s);
  });
}

// graph::hlo::unfilled: the buffer XLA gives the result is the array, whatever it holds.
void unfilled_kernel(const ffi::Call&) {}

}  // namespace

void register_custom_calls(const graph::pjrt::Plugin& plugin) {
  ffi::register_handler(plugin, graph::hlo::kUnfilledTarget, ffi::handler<unfilled_kernel>);
  ffi::register_handler(plugin, kRmsNormFwd, ffi::handler<rms_norm_fwd_kernel>);
  ffi::register_handler(plugin, kRmsNormBwd, ffi::handler<rms_norm_bwd_kernel>);
  ffi::register_handler(plugin, kLayerNormFwd, ffi::handler<layer_norm_fwd_kernel>);
  ffi::register_handler(plugin, kLayerNormBwd, ffi::handler<layer_norm_bwd_kernel>);
  ffi::register_handler(plugin, kGemm, ffi::handler<gemm_kernel>);
  ffi::register_handler(plugin, kGroupedGemm, ffi::handler<grouped_gemm_kernel>);
  ffi::register_handler(plugin, kGroupedGemmTn, ffi::handler<grouped_gemm_tn_kernel>);
  ffi::register_handler(plugin, kSwigluFwd, ffi::handler<swiglu_fwd_kernel>);
  ffi::register_handler(plugin, kSwigluBwd, ffi::handler<swiglu_bwd_kernel>);
  ffi::register_handler(plugin, kGatherRows, ffi::handler<gather_rows_kernel>);
  ffi::register_handler(plugin, kCombineRows, ffi::handler<combine_rows_kernel>);
  ffi::register_handler(plugin, kCombineRowsBwd, ffi::handler<combine_rows_bwd_kernel>);
  ffi::register_handler(plugin, kGroupedSwigluFwd, ffi::handler<grouped_swiglu_fwd_kernel>);
  ffi::register_handler(plugin, kGroupedSwigluBwd, ffi::handler<grouped_swiglu_bwd_kernel>);
  ffi::register_handler(plugin, kAdamW, ffi::handler<adamw_kernel>);
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

std::vector<graph::Value> layer_norm_fwd_call(const graph::Value& x, const graph::Value* weight,
                                              const graph::Value* bias, double eps) {
  std::vector<graph::Value> operands{x};
  for (const graph::Value* p : {weight, bias}) {
    if (!p) continue;
    TITAN_CHECK(!x.shape.empty() && p->shape == Shape{x.shape.back()} && p->dtype == x.dtype,
                "graph lowering: layer_norm wants x [..., d] and its weight and bias [d] of one dtype, got ",
                graph::mlir_type(x), " and ", graph::mlir_type(*p));
    operands.push_back(*p);
  }
  const int64_t rows = numel_of(x.shape) / x.shape.back();
  return graph::hlo::custom_call(
      kLayerNormFwd, operands,
      {{x.shape, x.dtype, false}, {{rows}, x.dtype, false}, {{rows}, x.dtype, false}},
      {{"eps", eps}, {"has_weight", weight ? 1.0 : 0.0}, {"has_bias", bias ? 1.0 : 0.0}});
}

std::vector<graph::Value> layer_norm_bwd_call(const graph::Value& dy, const graph::Value& x,
                                              const graph::Value* weight, bool has_bias,
                                              const graph::Value& mean, const graph::Value& rstd) {
  std::vector<graph::Value> operands{dy, x};
  std::vector<graph::ResultType> results{{x.shape, x.dtype, false}};
  const Shape d{x.shape.back()};
  if (weight) {
    operands.push_back(*weight);
    results.push_back({d, x.dtype, false});
  }
  if (has_bias) results.push_back({d, x.dtype, false});
  operands.push_back(mean);
  operands.push_back(rstd);
  return graph::hlo::custom_call(kLayerNormBwd, operands, results,
                                 {{"has_weight", weight ? 1.0 : 0.0}, {"has_bias", has_bias ? 1.0 : 0.0}});
}

std::vector<graph::Value> gemm_call(const std::vector<GemmOperands>& products) {
  std::vector<graph::Value> operands;
  std::vector<graph::ResultType> results;
  std::vector<std::pair<std::string, double>> attrs;
  for (size_t i = 0; i < products.size(); ++i) {
    const auto& [a, b, trans_a, trans_b] = products[i];
    TITAN_CHECK(a.shape.size() == 2 && b.shape.size() == 2 && a.dtype == b.dtype &&
                    a.dtype == products[0].a.dtype && a.shape[trans_a ? 0 : 1] == b.shape[trans_b ? 1 : 0],
                "graph lowering: gemm wants matrices of one dtype whose inner sizes agree, got ", graph::mlir_type(a),
                (trans_a ? " (transposed)" : ""), " and ", graph::mlir_type(b), (trans_b ? " (transposed)" : ""));
    operands.push_back(a);
    operands.push_back(b);
    results.push_back({{a.shape[trans_a ? 1 : 0], b.shape[trans_b ? 0 : 1]}, accumulation_dtype(a.dtype), false});
    attrs.emplace_back(trans_attr("a", i), trans_a ? 1.0 : 0.0);
    attrs.emplace_back(trans_attr("b", i), trans_b ? 1.0 : 0.0);
  }
  return graph::hlo::custom_call(kGemm, operands, results, attrs);
}

graph::Value grouped_gemm_call(const graph::Value& x, const graph::Value& w, const graph::Value& sizes,
                               bool trans_w) {
  TITAN_CHECK(x.shape.size() == 2 && w.shape.size() == 3 && w.dtype == x.dtype &&
                  x.shape[1] == w.shape[trans_w ? 2 : 1] && sizes.shape == Shape{w.shape[0]} && sizes.dtype == kI64,
              "graph lowering: grouped_gemm wants x [rows, k], w [groups, ", trans_w ? "n, k" : "k, n",
              "] of one dtype and sizes [groups] i64, got ", graph::mlir_type(x), ", ", graph::mlir_type(w), " and ",
              graph::mlir_type(sizes));
  const Shape y{x.shape[0], w.shape[trans_w ? 1 : 2]};
  return graph::hlo::custom_call(kGroupedGemm, {x, w, sizes}, {{y, accumulation_dtype(x.dtype), false}},
                                 {{"trans_w", trans_w ? 1.0 : 0.0}})[0];
}

graph::Value grouped_gemm_tn_call(const graph::Value& a, const graph::Value& b, const graph::Value& sizes) {
  TITAN_CHECK(a.shape.size() == 2 && b.shape.size() == 2 && a.shape[0] == b.shape[0] && a.dtype == b.dtype &&
                  sizes.shape.size() == 1 && sizes.dtype == kI64,
              "graph lowering: grouped_gemm_tn wants a [rows, m], b [rows, n] of one dtype and sizes [groups] i64, "
              "got ", graph::mlir_type(a), ", ", graph::mlir_type(b), " and ", graph::mlir_type(sizes));
  const Shape dw{sizes.shape[0], a.shape[1], b.shape[1]};
  return graph::hlo::custom_call(kGroupedGemmTn, {a, b, sizes}, {{dw, accumulation_dtype(a.dtype), false}})[0];
}

graph::Value swiglu_fwd_call(const graph::Value& gate, const graph::Value& up) {
  TITAN_CHECK(gate.shape == up.shape && gate.dtype == up.dtype, "graph lowering: swiglu wants gate and up of one shape "
              "and dtype, got ", graph::mlir_type(gate), " and ", graph::mlir_type(up));
  return graph::hlo::custom_call(kSwigluFwd, {gate, up}, {{gate.shape, gate.dtype, false}})[0];
}

std::vector<graph::Value> swiglu_bwd_call(const graph::Value& gate, const graph::Value& up, const graph::Value& d_out) {
  return graph::hlo::custom_call(kSwigluBwd, {gate, up, d_out},
                                 {{gate.shape, gate.dtype, false}, {gate.shape, gate.dtype, false}});
}

graph::Value gather_rows_call(const graph::Value& src, const graph::Value& index) {
  TITAN_CHECK(src.shape.size() == 2 && index.shape.size() == 1 && index.dtype == kI64,
              "graph lowering: gather_rows wants src [n, d] and index [rows] i64, got ", graph::mlir_type(src), " and ",
              graph::mlir_type(index));
  return graph::hlo::custom_call(kGatherRows, {src, index}, {{{index.shape[0], src.shape[1]}, src.dtype, false}})[0];
}

graph::Value combine_rows_call(const graph::Value& src, const graph::Value& row_of, const graph::Value* weights,
                               int64_t tokens) {
  TITAN_CHECK(src.shape.size() == 2 && row_of.shape == Shape{src.shape[0]} && row_of.dtype == kI64 && tokens > 0 &&
                  src.shape[0] % tokens == 0,
              "graph lowering: combine_rows wants src [tokens * k, d] and row_of [tokens * k] i64 for ", tokens,
              " tokens, got ", graph::mlir_type(src), " and ", graph::mlir_type(row_of));
  std::vector<graph::Value> operands{src, row_of};
  if (weights) operands.push_back(*weights);
  return graph::hlo::custom_call(kCombineRows, operands, {{{tokens, src.shape[1]}, src.dtype, false}})[0];
}

std::vector<graph::Value> combine_rows_bwd_call(const graph::Value& d_dst, const graph::Value& src,
                                                const graph::Value& row_of, const graph::Value& weights) {
  return graph::hlo::custom_call(kCombineRowsBwd, {d_dst, src, row_of, weights},
                                 {{src.shape, src.dtype, false}, {weights.shape, weights.dtype, false}});
}

std::vector<graph::Value> grouped_swiglu_fwd_call(const graph::Value& x, const graph::Value& w1,
                                                  const graph::Value& w3, const graph::Value& sizes) {
  TITAN_CHECK(x.shape.size() == 2 && w1.shape.size() == 3 && w3.shape == w1.shape && w1.shape[2] == x.shape[1] &&
                  w1.dtype == x.dtype && w3.dtype == x.dtype && sizes.shape == Shape{w1.shape[0]} && sizes.dtype == kI64,
              "graph lowering: grouped_swiglu wants x [rows, in], w1 and w3 [groups, hidden, in] of one dtype and "
              "sizes [groups] i64, got ", graph::mlir_type(x), ", ", graph::mlir_type(w1), ", ", graph::mlir_type(w3),
              " and ", graph::mlir_type(sizes));
  const graph::ResultType rows{{x.shape[0], w1.shape[1]}, accumulation_dtype(x.dtype), false};
  return graph::hlo::custom_call(kGroupedSwigluFwd, {x, w1, w3, sizes}, {rows, rows, rows});
}

std::vector<graph::Value> grouped_swiglu_bwd_call(const graph::Value& dh, const graph::Value& gate,
                                                  const graph::Value& up, const graph::Value& x, const graph::Value& w1,
                                                  const graph::Value& w3, const graph::Value& sizes) {
  const DType acc = accumulation_dtype(x.dtype);
  return graph::hlo::custom_call(kGroupedSwigluBwd, {dh, gate, up, x, w1, w3, sizes},
                                 {{x.shape, acc, false}, {w1.shape, acc, false}, {w3.shape, acc, false}});
}

std::vector<graph::Value> adamw_call(const graph::Value& param, const graph::Value& grad, const graph::Value& exp_avg,
                                     const graph::Value& exp_avg_sq, const std::vector<graph::Value>& scalars,
                                     double beta1, double beta2, double eps) {
  TITAN_CHECK(scalars.size() == 4, "graph lowering: titan_adamw takes four scalars, got ", scalars.size());
  const graph::ResultType type{param.shape, param.dtype, false};
  std::vector<graph::Value> operands{param, grad, exp_avg, exp_avg_sq};
  operands.insert(operands.end(), scalars.begin(), scalars.end());
  return graph::hlo::custom_call(kAdamW, operands, {type, type, type},
                                 {{"beta1", beta1}, {"beta2", beta2}, {"eps", eps}}, {{0, 0}, {1, 2}, {2, 3}});
}

}  // namespace titan::ops
