#include "titan/models/common/dense_attention.h"

#include <limits>
#include <vector>

#include "titan/attention/dense_forward.h"
#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/core/error.h"
#include "titan/graph/lazy.h"
#include "titan/ops/arith.h"
#include "titan/ops/checks.h"
#include "titan/ops/linalg.h"
#include "titan/ops/op_span.h"
#include "titan/ops/softmax.h"

namespace titan::models::common {

namespace {

template <typename T>
Tensor bias_table(const std::vector<int64_t>& keep, int64_t rows, int64_t seq, bool causal) {
  const int64_t queries = causal ? seq : 1;
  std::vector<T> values(static_cast<size_t>(rows * queries * seq), T(0));
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t q = 0; q < queries; ++q)
      for (int64_t k = 0; k < seq; ++k) {
        const bool hidden = (causal && k > q) || (!keep.empty() && keep[b * seq + k] == 0);
        if (hidden) values[(b * queries + q) * seq + k] = std::numeric_limits<T>::lowest();
      }
  return Tensor::from_vector<T>(values, {rows, 1, queries, seq});
}

}  // namespace

Tensor dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& bias) {
  TITAN_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "dense_attention: expected q, k and v of one shape [batch, seq, heads, head_dim], got q ",
              q.desc(), ", k ", k.desc(), " and v ", v.desc());
  const int64_t batch = q.size(0), seq = q.size(1), heads = q.size(2), head_dim = q.size(3);
  // Inference (the frozen encoders) takes the fused kernel; training, f64, graph mode and dry runs
  // take the ops, whose backward autograd derives.
  const bool host_f32 = q.dtype() == kF32 && !q.is_meta() && (!bias.defined() || bias.dtype() == kF32) &&
                        !graph::any_lazy({&q, &k, &v, &bias});
  if (host_f32 && !autograd::needs_grad({&q, &k, &v, &bias})) {
    const ops::OpSpan span("dense_attention", q, k, v, bias);
    Tensor out = Tensor::empty({batch, seq, heads * head_dim}, q.options());
    attention::dense_attention_forward(ops::dense(q), ops::dense(k), ops::dense(v), scale,
                                       bias.defined() ? bias.detach() : Tensor(),
                                       matmul_operand_dtype(q.dtype()) == kBF16, out);
    return out;
  }
  Tensor scores = ops::matmul(q.permute({0, 2, 1, 3}), k.permute({0, 2, 3, 1}));
  if (scale != 1.0) scores = scores * scale;
  if (bias.defined()) scores = scores + bias;
  const Tensor out = ops::matmul(ops::softmax(scores, -1), v.permute({0, 2, 1, 3}));
  return out.permute({0, 2, 1, 3}).reshape({batch, seq, heads * head_dim});
}

Tensor attention_bias(const Tensor& attention_mask, int64_t seq, bool causal, DType dtype) {
  TITAN_CHECK(dtype == kF32 || dtype == kF64, "attention_bias: the scores are f32 or f64, got ",
              dtype_name(dtype));
  std::vector<int64_t> keep;
  int64_t rows = 1;
  if (attention_mask.defined()) {
    TITAN_CHECK(attention_mask.dim() == 2 && attention_mask.size(1) == seq &&
                    (attention_mask.dtype() == kI32 || attention_mask.dtype() == kI64),
                "attention mask: expected i32 or i64 [batch, ", seq, "] (1 a token, 0 padding) for ", seq,
                " token ids, got ", attention_mask.desc());
    keep = attention_mask.to(kI64).to_vector<int64_t>();
    rows = attention_mask.size(0);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t i = 0; i < seq; ++i)
        TITAN_CHECK(keep[b * seq + i] == 0 || keep[b * seq + i] == 1, "attention mask: row ", b, " position ",
                    i, " is ", keep[b * seq + i], "; expected 1 (a token) or 0 (padding)");
  }
  bool all_kept = true;
  for (int64_t x : keep) all_kept = all_kept && x == 1;
  if (!causal && all_kept) return Tensor();
  if (all_kept) {
    keep.clear();
    rows = 1;
  }
  return dtype == kF64 ? bias_table<double>(keep, rows, seq, causal)
                       : bias_table<float>(keep, rows, seq, causal);
}

DenseSelfAttention::DenseSelfAttention(int64_t dim, int64_t n_heads, int64_t head_dim, bool bias,
                                       double scale, TensorOptions opts)
    : n_heads_(n_heads), head_dim_(head_dim), scale_(scale) {
  const int64_t inner = n_heads * head_dim;
  wq = register_module("wq", std::make_shared<nn::Linear>(dim, inner, bias, opts));
  wk = register_module("wk", std::make_shared<nn::Linear>(dim, inner, bias, opts));
  wv = register_module("wv", std::make_shared<nn::Linear>(dim, inner, bias, opts));
  wo = register_module("wo", std::make_shared<nn::Linear>(inner, dim, bias, opts));
}

Tensor DenseSelfAttention::forward(const Tensor& x, const Tensor& bias) {
  TITAN_CHECK(x.dim() == 3, "DenseSelfAttention: expected x [batch, seq, dim], got ", x.desc());
  const Shape heads{x.size(0), x.size(1), n_heads_, head_dim_};
  return (*wo)(
      dense_attention((*wq)(x).view(heads), (*wk)(x).view(heads), (*wv)(x).view(heads), scale_, bias));
}

}  // namespace titan::models::common
