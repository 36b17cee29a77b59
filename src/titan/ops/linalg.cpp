#include "titan/ops/linalg.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/core/autocast.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/elementwise.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/ops/custom_calls.h"
#include "titan/ops/op_span.h"
#include "titan/ops/reduce.h"

namespace titan::ops {

namespace {

// A batch of matrices as BLAS sees them: base pointer, per-matrix stride, leading dim, transpose.
struct MatBatch {
  Tensor t;  // keeps the data alive; possibly a contiguous copy
  int64_t ld = 0, batch_stride = 0;
  bool trans = false;
};

// Describes `x` (already expanded to batch shape + [r, c]) for BLAS, copying only when the
// matrices are neither row- nor column-major or the batch dims do not collapse to one stride.
MatBatch as_blas(const Tensor& x) {
  int64_t nd = x.dim();
  int64_t r = x.sizes()[nd - 2], c = x.sizes()[nd - 1];
  int64_t sr = x.strides()[nd - 2], sc = x.strides()[nd - 1];
  auto batch_stride = [&](const Tensor& t, int64_t& out) {
    int64_t expected = -1;
    for (int64_t d = nd - 3; d >= 0; --d) {
      if (t.sizes()[d] == 1) continue;
      int64_t st = t.strides()[d];
      if (expected == -1) {
        out = st;
        expected = st * t.sizes()[d];
      } else if (st == expected || (st == 0 && out == 0)) {
        expected = st * t.sizes()[d];
      } else {
        return false;
      }
    }
    if (expected == -1) out = 0;
    return true;
  };
  MatBatch m;
  int64_t bs = 0;
  bool rowmajor = (sc == 1 || c == 1) && sr >= std::max<int64_t>(c, 1);
  bool colmajor = (sr == 1 || r == 1) && sc >= std::max<int64_t>(r, 1);
  if ((rowmajor || colmajor) && batch_stride(x, bs)) {
    m.t = x;
    m.trans = !rowmajor;
    m.ld = rowmajor ? sr : sc;
    m.batch_stride = bs;
    return m;
  }
  m.t = x.contiguous();
  m.ld = c;
  m.batch_stride = r * c;
  return m;
}

// bf16 operands give a float32 product (accumulated in float32).
DType product_dtype(DType operand) {
  return operand == kBF16 ? kF32 : operand;
}

// x, detached, in the dtype a product multiplies it in: a bf16 copy of an f32 tensor under
// autocast (a parameter's made once per AutocastCastCache), x itself otherwise.
Tensor as_operand(const Tensor& x, DType dtype) {
  return autocast_cast(x, dtype);
}

// The lowering: both operands broadcast to the batch, one dot_general over it.
Tensor matmul_lowered(const Tensor& a, const Tensor& b, const Shape& batch, const Shape& ea, const Shape& eb) {
  const graph::Value av = graph::hlo::broadcast_to(graph::value_of(a, "matmul"), ea);
  const graph::Value bv = graph::hlo::broadcast_to(graph::value_of(b, "matmul"), eb);
  Shape batch_dims;
  for (size_t i = 0; i < batch.size(); ++i) batch_dims.push_back(static_cast<int64_t>(i));
  const auto nb = static_cast<int64_t>(batch.size());
  return graph::tensor_of(
      graph::hlo::dot_general(av, bv, batch_dims, batch_dims, {nb + 1}, {nb}, product_dtype(a.dtype())));
}

// a @ b contracting dim `ca` of the matrix a with dim `cb` of the matrix b, as one dot and no
// transpose before it: a linear layer's x w^T (1, 1) and weight gradient g^T x (0, 0). So
// written, XLA's partitioner over several devices sees what is contracted: where the contracted
// dim is split (the tokens under data parallelism, the features under a row-wise split) it sums
// partial products, where a transpose first led it to gather every device's tokens (FSDP 4 of the
// debug model sent 96 MiB a step that way, 69 MiB so).
Tensor contract_lowered(const Tensor& a, const Tensor& b, int64_t ca, int64_t cb) {
  return graph::tensor_of(graph::hlo::dot_general(graph::value_of(a, "linear"), graph::value_of(b, "linear"), {}, {},
                                                  {ca}, {cb}, product_dtype(a.dtype())));
}

// In a program that runs titan's kernels (custom calls), a linear layer's products go to titan's
// GEMM rather than to XLA's dots, forward and backward. Measured on the M step of bench_train_step
// (Intel Xeon with AMX, 2 cores): bf16 1.0 s a step against 1.67 s with XLA's bf16 dots (oneDNN's
// AMX kernels against XLA's); float32 1.90 s against 1.92 s (OpenBLAS against YNNPACK and XLA's JIT
// dots: a wash).
bool gemm_by_call(const Tensor& a) {
  return a.is_lazy() && graph::current_program().custom_kernels();
}

// op(a) @ op(b) as that call: the transposes travel as flags, so no operand is copied to transpose it.
GemmOperands gemm_operands(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return {graph::value_of(a, "linear"), graph::value_of(b, "linear"), trans_a, trans_b};
}

Tensor matmul_raw(const Tensor& a, const Tensor& b) {
  if (!graph::any_lazy({&a, &b})) {
    check_cpu("matmul", a);
    check_cpu("matmul", b);
  }
  TITAN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: expected tensors with >= 2 dims, got ", a.desc(),
              " and ", b.desc());
  TITAN_CHECK(a.dtype() == b.dtype() && (a.dtype() == kF32 || a.dtype() == kF64 || a.dtype() == kBF16),
              "matmul: expected two f32, two f64 or two bf16 tensors, got ", a.desc(), " and ", b.desc());
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  TITAN_CHECK(b.size(-2) == k, "matmul: inner dims differ: ", a.desc(), " @ ", b.desc());
  Shape ba(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape ea = batch, eb = batch, eo = batch;
  ea.insert(ea.end(), {m, k});
  eb.insert(eb.end(), {k, n});
  eo.insert(eo.end(), {m, n});
  if (graph::any_lazy({&a, &b})) return matmul_lowered(a, b, batch, ea, eb);
  Tensor out = Tensor::empty(eo, {.dtype = product_dtype(a.dtype())});
  if (out.numel() == 0) return out;
  MatBatch A = as_blas(a.detach().expand(ea)), B = as_blas(b.detach().expand(eb));
  int64_t nb = numel_of(batch);
  kernels::cpu::dispatch_matmul(a.dtype(), [&](auto z) {
    using T = decltype(z);
    using Acc = kernels::cpu::gemm_acc_t<T>;
    kernels::cpu::gemm_strided_batched<T>(A.trans, B.trans, m, n, k, Acc(1), A.t.template data<T>(), A.ld,
                                          A.batch_stride, B.t.template data<T>(), B.ld, B.batch_stride,
                                          Acc(0), out.data<Acc>(), n, m * n, nb);
  });
  return out;
}

// The data of a gradient's buffer, or null for one not asked for.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The gradients of y = x2 w^T given y's gradient g2 [rows, out]: dx = g2 w and dw = g2^T x2,
// each only when asked for. Independent GEMMs of equal work, which may run side by side; one asked
// for alone runs as it would beside the other, so a split backward's input gradients (asked for
// first) and weight gradients (later) have the bits of one backward's.
std::pair<Tensor, Tensor> linear_grads(const Tensor& g2, const Tensor& w, const Tensor& x2, bool want_dx,
                                       bool want_dw) {
  if (gemm_by_call(g2)) {
    // Both gradients in one call, side by side as below.
    std::vector<GemmOperands> products;
    if (want_dx) products.push_back(gemm_operands(g2, w, false, false));
    if (want_dw) products.push_back(gemm_operands(g2, x2, true, false));
    std::vector<graph::Value> r = products.empty() ? std::vector<graph::Value>{} : gemm_call(products);
    const Tensor dx = want_dx ? graph::tensor_of(r[0]) : Tensor();
    const Tensor dw = want_dw ? graph::tensor_of(r.back()) : Tensor();
    return {dx, dw};
  }
  if (graph::any_lazy({&g2, &w, &x2}))
    return {want_dx ? matmul_raw(g2, w) : Tensor(), want_dw ? contract_lowered(g2, x2, 0, 0) : Tensor()};
  const int64_t rows = g2.size(0), out = w.size(0), in = w.size(1);
  const MatBatch G = as_blas(g2), W = want_dx ? as_blas(w) : MatBatch{},
                 X = want_dw ? as_blas(x2) : MatBatch{};
  const TensorOptions result{.dtype = product_dtype(w.dtype())};
  Tensor dx = want_dx ? Tensor::empty({rows, in}, result) : Tensor();
  Tensor dw = want_dw ? Tensor::empty({out, in}, result) : Tensor();
  kernels::cpu::dispatch_matmul(w.dtype(), [&](auto z) {
    using T = decltype(z);
    using Acc = kernels::cpu::gemm_acc_t<T>;
    const T* g = G.t.template data<T>();
    const std::vector<kernels::cpu::GemmCall<T>> calls{
        {G.trans, W.trans, rows, in, out, Acc(1), g, G.ld, data_or_null<T>(W.t), W.ld, Acc(0),
         data_or_null<Acc>(dx), in},
        {!G.trans, X.trans, out, in, rows, Acc(1), g, G.ld, data_or_null<T>(X.t), X.ld, Acc(0),
         data_or_null<Acc>(dw), in}};
    kernels::cpu::gemm_concurrent<T>(calls, {want_dx, want_dw});
  });
  return {dx, dw};
}

}  // namespace

// Under autocast (core/autocast.h) the products run on bf16 copies of a and b, which backward
// keeps and multiplies the bf16-rounded output gradient with; gradients come out float32.
Tensor matmul(const Tensor& a, const Tensor& b) {
  const OpSpan span("matmul", a, b);
  const DType operand = a.dtype() == b.dtype() ? matmul_operand_dtype(a.dtype()) : a.dtype();
  Tensor ad = as_operand(a, operand), bd = as_operand(b, operand);
  Tensor out = matmul_raw(ad, bd);
  autograd::record("matmul", {a, b}, {out}, [ad, bd](const autograd::GradContext& g) {
    Tensor ga, gb;
    const Tensor go = as_operand(g[0], ad.dtype());
    if (g.needs(0)) ga = sum_to(matmul_raw(go, bd.transpose(-1, -2)), ad.sizes());
    if (g.needs(1)) gb = sum_to(matmul_raw(ad.transpose(-1, -2), go), bd.sizes());
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const OpSpan span("linear", x, weight, bias);
  TITAN_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.desc(),
              " does not match weight ", weight.desc(), " (expected [..., ",
              weight.dim() == 2 ? weight.size(1) : -1, "])");
  TITAN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "linear: bias ",
              bias.desc(), " does not match weight ", weight.desc());
  Shape out_shape = x.sizes();
  out_shape.back() = weight.size(0);
  const DType operand = x.dtype() == weight.dtype() ? matmul_operand_dtype(x.dtype()) : x.dtype();
  Tensor xd = as_operand(x, operand), wd = as_operand(weight, operand);
  const Tensor x2 = xd.reshape({-1, x.size(-1)});
  Tensor y = gemm_by_call(x2) && wd.is_lazy() ? graph::tensor_of(gemm_call({gemm_operands(x2, wd, false, true)})[0])
             : graph::any_lazy({&x2, &wd})     ? contract_lowered(x2, wd, 1, 1)
                                              : matmul_raw(x2, wd.transpose(0, 1));
  if (bias.defined() && y.is_lazy()) {
    TITAN_CHECK(bias.dtype() == y.dtype(), "linear: bias ", bias.desc(), " dtype differs from weight ",
                weight.desc());
    y = graph::tensor_of(graph::hlo::add(graph::value_of(y, "linear"),
                                         graph::hlo::broadcast_to(graph::value_of(bias, "linear"), y.sizes())));
  } else if (bias.defined()) {
    check_cpu("linear", bias);
    TITAN_CHECK(bias.dtype() == y.dtype(), "linear: bias ", bias.desc(), " dtype differs from weight ",
                weight.desc());
    kernels::cpu::binary(kernels::cpu::BinaryOp::add, y, bias.detach(), y);
  }
  y = y.view(out_shape);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  autograd::record("linear", inputs, {y}, [xd, wd](const autograd::GradContext& g) {
    Tensor g2 = as_operand(g[0], wd.dtype()).reshape({-1, wd.size(0)});
    std::vector<Tensor> r(g.needs_input_grad.size());
    auto [dx, dw] = linear_grads(g2, wd, xd.reshape({-1, wd.size(1)}), g.needs(0), g.needs(1));
    if (dx.defined()) r[0] = dx.view(xd.sizes());
    r[1] = dw;
    if (r.size() > 2 && g.needs(2)) r[2] = sum(g[0].reshape({-1, wd.size(0)}), 0);
    return r;
  });
  return y;
}

}  // namespace titan::ops
