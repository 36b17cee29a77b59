#include "support/masked_attention_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace titan::test {

// softmax(s + mask) v per (b, h) with the [S, S] scores materialised, and the gradients of
// sum(out * dout): dV = P^T dO, dS = P (dO V^T - rowsum(dO V^T * P)), times 1 - tanh^2 of the
// capped argument with a softcap, dQ = scale dS K, dK = scale dS^T Q.
AttentionGrads masked_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& dout, const Visible& visible, double scale,
                                          std::optional<double> softcap) {
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), Hkv = k.size(2), D = q.size(3);
  const std::vector<double> Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>(),
                            dO = dout.to_vector<double>();
  std::vector<double> O(Q.size()), dQ(Q.size()), dK(K.size()), dV(V.size());
  std::vector<double> P(static_cast<size_t>(S * S)), dS(static_cast<size_t>(S * S)),
      slope(static_cast<size_t>(S * S), 1.0);
  auto qi = [&](int64_t b, int64_t s, int64_t h) { return ((b * S + s) * Hq + h) * D; };
  auto ki = [&](int64_t b, int64_t s, int64_t h) { return ((b * S + s) * Hkv + h) * D; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);
      for (int64_t i = 0; i < S; ++i) {
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          double s = -INFINITY;
          if (visible(b, i, j)) {
            s = 0;
            for (int64_t d = 0; d < D; ++d) s += Q[qi(b, i, h) + d] * K[ki(b, j, hk) + d];
            s *= scale;
            if (softcap) {
              const double t = std::tanh(s / *softcap);
              s = *softcap * t;
              slope[i * S + j] = 1 - t * t;
            }
          }
          P[i * S + j] = s;
          top = std::max(top, s);
        }
        for (int64_t j = 0; j < S; ++j) sum += P[i * S + j] = std::exp(P[i * S + j] - top);
        double dot = 0;
        for (int64_t j = 0; j < S; ++j) {
          P[i * S + j] /= sum;
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            O[qi(b, i, h) + d] += P[i * S + j] * V[ki(b, j, hk) + d];
            dp += dO[qi(b, i, h) + d] * V[ki(b, j, hk) + d];
          }
          dS[i * S + j] = dp;
          dot += dp * P[i * S + j];
        }
        for (int64_t j = 0; j < S; ++j)
          dS[i * S + j] = P[i * S + j] * (dS[i * S + j] - dot) * slope[i * S + j];
      }
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j)
          for (int64_t d = 0; d < D; ++d) {
            dQ[qi(b, i, h) + d] += scale * dS[i * S + j] * K[ki(b, j, hk) + d];
            dK[ki(b, j, hk) + d] += scale * dS[i * S + j] * Q[qi(b, i, h) + d];
            dV[ki(b, j, hk) + d] += P[i * S + j] * dO[qi(b, i, h) + d];
          }
    }
  return {Tensor::from_vector(O, q.sizes()), Tensor::from_vector(dQ, q.sizes()),
          Tensor::from_vector(dK, k.sizes()), Tensor::from_vector(dV, v.sizes())};
}

}  // namespace titan::test
