#include "titan/attention/splash_custom_call.h"

#include <string>

#include "titan/attention/splash_kernel.h"
#include "titan/core/error.h"
#include "titan/graph/ir/hlo.h"
#include "titan/graph/lazy.h"
#include "titan/graph/pjrt/ffi.h"

namespace titan::attention {

namespace {

namespace ffi = graph::pjrt::ffi;
using graph::Value;

constexpr char kForward[] = "titan_splash_fwd";
constexpr char kBackward[] = "titan_splash_bwd";

// An argument or result as a tensor over the plugin's memory: the kernels read and write it in
// place, no copy.
Tensor borrowed(const ffi::Array& a) {
  return Tensor::borrow(a.data, a.dims, a.dtype);
}

// q, k and v of one call, checked against each other and the kernel's layouts.
struct Qkv {
  Tensor q, k, v;
  int64_t B = {}, S = {}, Hq = {}, Hkv = {};
};
Qkv qkv_of(const char* target, const ffi::Call& call) {
  Qkv x{borrowed(call.arg(0)), borrowed(call.arg(1)), borrowed(call.arg(2))};
  TITAN_CHECK(x.q.dim() == 4 && x.k.dim() == 4 && x.k.sizes() == x.v.sizes() && x.k.size(0) == x.q.size(0) &&
                  x.k.size(1) == x.q.size(1) && x.k.size(3) == x.q.size(3) && x.k.size(2) > 0 &&
                  x.q.size(2) % x.k.size(2) == 0,
              target, ": wants q [B, S, Hq, D], k and v [B, S, Hkv, D] with Hkv dividing Hq, got q ",
              x.q.desc(), ", k ", x.k.desc(), ", v ", x.v.desc(),
              ": the program's custom_call was written wrong");
  TITAN_CHECK((x.q.dtype() == kF32 || x.q.dtype() == kF64) && x.k.dtype() == x.q.dtype() &&
                  x.v.dtype() == x.q.dtype(),
              target, ": q, k and v are ", x.q.desc(), ", ", x.k.desc(), ", ", x.v.desc(),
              "; the kernel takes one of f32 or f64 (convert before the call)");
  x.B = x.q.size(0), x.S = x.q.size(1), x.Hq = x.q.size(2), x.Hkv = x.k.size(2);
  return x;
}

void check_like(const char* target, const char* what, const Tensor& t, const Shape& want, DType dtype) {
  TITAN_CHECK(t.sizes() == want && t.dtype() == dtype, target, ": ", what, " is ", t.desc(), ", expected ",
              dtype_name(dtype), shape_str(want), ": the program's custom_call was written wrong");
}

int64_t int_attr(const ffi::Call& call, const char* name) {
  return static_cast<int64_t>(call.scalar_attr(name));
}

// The BlockMask the call's attributes describe, for B rows of S tokens; `ids` the document ids
// argument when the call has one.
BlockMask block_mask_of(const ffi::Call& call, int64_t B, int64_t S, const Tensor& ids) {
  MaskTerms t;
  t.causal = call.scalar_attr("causal") != 0;
  t.window_left = int_attr(call, "window_left");
  t.window_right = int_attr(call, "window_right");
  t.chunk = int_attr(call, "chunk");
  t.document_ids = ids;
  return BlockMask::build(t.rule(), B, S, int_attr(call, "block_q"), int_attr(call, "block_kv"));
}

// The scores' rule: `scale`, and `softcap` where the call has one.
Scores scores_of(const ffi::Call& call) {
  return {call.scalar_attr("scale"), call.optional_scalar_attr("softcap")};
}

void forward_kernel(const ffi::Call& call) {
  TITAN_CHECK((call.num_args() == 3 || call.num_args() == 4) && call.num_results() == 2, kForward,
              " takes q, k, v (and document ids) and gives out and lse, got ", call.num_args(),
              " arguments and ", call.num_results(), " results");
  const Qkv x = qkv_of(kForward, call);
  const Tensor out = borrowed(call.result(0)), lse = borrowed(call.result(1));
  check_like(kForward, "out", out, x.q.sizes(), x.q.dtype());
  check_like(kForward, "lse", lse, {x.B, x.Hq, x.S}, x.q.dtype());
  const Tensor ids = call.num_args() == 4 ? borrowed(call.arg(3)) : Tensor();
  splash_forward(x.q, x.k, x.v, block_mask_of(call, x.B, x.S, ids), scores_of(call),
                 call.scalar_attr("bf16_products") != 0, out, lse);
}

void backward_kernel(const ffi::Call& call) {
  TITAN_CHECK((call.num_args() == 6 || call.num_args() == 7) && call.num_results() == 3, kBackward,
              " takes q, k, v, out, lse, dout (and document ids) and gives dq, dk, dv, got ", call.num_args(),
              " arguments and ", call.num_results(), " results");
  const Qkv x = qkv_of(kBackward, call);
  const Tensor out = borrowed(call.arg(3)), lse = borrowed(call.arg(4)), dout = borrowed(call.arg(5));
  const Tensor dq = borrowed(call.result(0)), dk = borrowed(call.result(1)), dv = borrowed(call.result(2));
  for (const auto& [what, t] : {std::pair{"out", out}, {"dout", dout}, {"dq", dq}})
    check_like(kBackward, what, t, x.q.sizes(), x.q.dtype());
  check_like(kBackward, "lse", lse, {x.B, x.Hq, x.S}, x.q.dtype());
  check_like(kBackward, "dk", dk, x.k.sizes(), x.q.dtype());
  check_like(kBackward, "dv", dv, x.k.sizes(), x.q.dtype());
  const Tensor ids = call.num_args() == 7 ? borrowed(call.arg(6)) : Tensor();
  const Tensor delta = Tensor::empty(lse.sizes(), lse.options());  // the kernel's scratch
  splash_backward(x.q, x.k, x.v, block_mask_of(call, x.B, x.S, ids), scores_of(call),
                  call.scalar_attr("bf16_products") != 0, out, lse, delta, dout, dq, dk, dv,
                  /*accumulate=*/false);
}

std::vector<std::pair<std::string, double>> attrs_of(const SplashCallSpec& s) {
  auto d = [](int64_t x) { return static_cast<double>(x); };
  std::vector<std::pair<std::string, double>> attrs{{"causal", s.terms.causal ? 1.0 : 0.0},
                                                    {"window_left", d(s.terms.window_left)},
                                                    {"window_right", d(s.terms.window_right)},
                                                    {"chunk", d(s.terms.chunk)},
                                                    {"block_q", d(s.block_q)},
                                                    {"block_kv", d(s.block_kv)},
                                                    {"scale", s.scores.scale},
                                                    {"bf16_products", s.bf16_products ? 1.0 : 0.0}};
  if (s.scores.softcap) attrs.emplace_back("softcap", *s.scores.softcap);
  return attrs;
}

// The operands after the arrays: the document ids, when the rule has them.
void add_ids(const SplashCallSpec& s, std::vector<Value>& operands) {
  if (s.terms.document_ids.defined()) operands.push_back(graph::value_of(s.terms.document_ids, kForward));
}

}  // namespace

void register_splash_calls(const graph::pjrt::Plugin& plugin) {
  ffi::register_handler(plugin, kForward, ffi::handler<forward_kernel>);
  ffi::register_handler(plugin, kBackward, ffi::handler<backward_kernel>);
}

std::optional<SplashCallSpec> splash_call_spec(const BlockMask& mask, DType dtype, const Scores& scores,
                                               bool bf16_products) {
  if (dtype != kF32 && dtype != kF64) return std::nullopt;
  std::optional<MaskTerms> terms = mask.mask().terms();
  if (!terms) return std::nullopt;
  return SplashCallSpec{.terms = std::move(*terms),
                        .block_q = mask.block_q(),
                        .block_kv = mask.block_kv(),
                        .scores = scores,
                        .bf16_products = bf16_products};
}

std::vector<Value> splash_forward_call(const SplashCallSpec& spec, const Value& q, const Value& k,
                                       const Value& v) {
  const int64_t B = q.shape.at(0), S = q.shape.at(1), Hq = q.shape.at(2);
  std::vector<Value> operands{q, k, v};
  add_ids(spec, operands);
  return graph::hlo::custom_call(kForward, operands,
                                 {{q.shape, q.dtype, false}, {{B, Hq, S}, q.dtype, false}}, attrs_of(spec));
}

std::vector<Value> splash_backward_call(const SplashCallSpec& spec, const Value& q, const Value& k,
                                        const Value& v, const Value& out, const Value& lse,
                                        const Value& dout) {
  std::vector<Value> operands{q, k, v, out, lse, dout};
  add_ids(spec, operands);
  return graph::hlo::custom_call(
      kBackward, operands, {{q.shape, q.dtype, false}, {k.shape, k.dtype, false}, {v.shape, v.dtype, false}},
      attrs_of(spec));
}

}  // namespace titan::attention
