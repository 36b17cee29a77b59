#include "titan/attention/dense_forward.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "titan/core/error.h"
#include "titan/kernels/cpu/bf16_convert.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::attention {

namespace {

// Scores a task holds at once: its block of query rows against every key. 64k floats (256 KiB)
// stay in a core's L2 (1-2 MiB on the CPUs titan runs on) between the product, the bias, the
// softmax and the second product, and give T5 at 256 tokens whole heads per task (few, large
// products: each oneDNN call costs microseconds on its own).
constexpr int64_t kScoresPerTask = 64 * 1024;

// The bias as [B, H, S, S] by strides, 0 along the dimensions it broadcasts over.
struct BiasView {
  const float* data = nullptr;
  int64_t b = 0, h = 0, q = 0, k = 0;

  const float* row(int64_t batch, int64_t head, int64_t query) const {
    return data + batch * b + head * h + query * q;
  }
};

BiasView bias_view(const Tensor& bias, int64_t B, int64_t H, int64_t S) {
  if (!bias.defined()) return {};
  const Tensor e = bias.expand({B, H, S, S});
  return {e.data<float>(), e.stride(0), e.stride(1), e.stride(2), e.stride(3)};
}

// x as the products' operand U: x itself, or its bf16 copy (Tensor::to's rounding).
template <typename U>
struct Operand {
  Tensor t;
  const U* data;
  explicit Operand(const Tensor& x) : t(std::is_same_v<U, float> ? x : x.to(kBF16)), data(t.data<U>()) {}
};

// One row of scores [0, n) in place: the bias added (`add` read every `step` elements, or nothing
// when null), then softmax as ops::softmax computes it (the max subtracted, exp, times 1 / sum),
// in one pass over the row per step while it sits in L1; under bf16 the probabilities are
// rounded into `p` as the cast of ops::softmax's output would round them.
template <typename U>
void probabilities(float* row, const float* add, int64_t step, int64_t n, U* p) {
  if (add && step == 1) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) row[j] += add[j];
  } else if (add) {
    for (int64_t j = 0; j < n; ++j) row[j] += add[j * step];
  }
  const float top = kernels::cpu::row_max(row, n);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = kernels::cpu::vexp(row[j] - top);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  if constexpr (!std::is_same_v<U, float>) kernels::cpu::floats_to_bf16(row, p, n);
}

template <typename U>
void run(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const BiasView& bias, float* out) {
  const int64_t B = q.size(0), S = q.size(1), H = q.size(2), D = q.size(3), ld = H * D;
  const int64_t rows = std::clamp<int64_t>(kScoresPerTask / S, 1, S), blocks = (S + rows - 1) / rows;
  const int64_t tasks = B * H * blocks;
  const Operand<U> qo(q), ko(k), vo(v);
  // Each task owns its output rows, and its products run on its own thread (gemm inside a
  // parallel region does), so results do not depend on the thread count.
#pragma omp parallel if (tasks > 1 && !omp_in_parallel() && omp_get_max_threads() > 1)
  {
    std::vector<float> s(static_cast<size_t>(rows * S));
    std::vector<U> p(std::is_same_v<U, float> ? 0 : static_cast<size_t>(rows * S));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t blk = t % blocks, h = t / blocks % H, b = t / blocks / H;
      const int64_t r0 = blk * rows, n = std::min(rows, S - r0);
      const int64_t head = b * S * ld + h * D, first = head + r0 * ld;
      kernels::cpu::gemm<U>(false, true, n, S, D, scale, qo.data + first, ld, ko.data + head, ld, 0.0f, s.data(),
                            S);
      for (int64_t r = 0; r < n; ++r)
        probabilities(s.data() + r * S, bias.data ? bias.row(b, h, r0 + r) : nullptr, bias.k, S,
                      p.empty() ? nullptr : p.data() + r * S);
      const U* probs;
      if constexpr (std::is_same_v<U, float>)
        probs = s.data();
      else
        probs = p.data();
      kernels::cpu::gemm<U>(false, false, n, D, S, 1.0f, probs, S, vo.data + head, ld, 0.0f, out + first, ld);
    }
  }
}

}  // namespace

void dense_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& bias,
                             bool bf16_products, const Tensor& out) {
  TITAN_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes() && q.dtype() == kF32 &&
                  k.dtype() == kF32 && v.dtype() == kF32 && q.is_contiguous() && k.is_contiguous() &&
                  v.is_contiguous(),
              "dense_attention_forward: expected contiguous f32 q, k, v of one shape [B, S, H, D], got q ", q.desc(),
              ", k ", k.desc(), ", v ", v.desc());
  const int64_t B = q.size(0), S = q.size(1), H = q.size(2), D = q.size(3);
  TITAN_CHECK(!bias.defined() || (bias.dtype() == kF32 && bias.dim() <= 4),
              "dense_attention_forward: expected an f32 bias broadcastable to [", B, ", ", H, ", ", S, ", ", S,
              "], got ", bias.desc());
  TITAN_CHECK(out.dtype() == kF32 && out.is_contiguous() && out.sizes() == Shape({B, S, H * D}),
              "dense_attention_forward: expected a contiguous f32 out [", B, ", ", S, ", ", H * D, "], got ",
              out.desc());
  const BiasView view = bias_view(bias, B, H, S);
  const auto s = static_cast<float>(scale);
  if (bf16_products)
    run<bf16>(q, k, v, s, view, out.data<float>());
  else
    run<float>(q, k, v, s, view, out.data<float>());
}

}  // namespace titan::attention
