#include "titan/kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

namespace {

// Below this many elements per task, waking threads costs more than it saves.
constexpr int64_t kGrainElems = 16384;
// Bounds on the blocks of the parameter-gradient reduction: at most kMaxBlocks partial rows to
// add up at the end, and at least kMinBlockRows rows per block, so the partials' memory traffic
// stays within 1/16 of the input's.
constexpr int64_t kMaxBlocks = 64;
constexpr int64_t kMinBlockRows = 16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t grain_rows(int64_t d) {
  return std::max<int64_t>(1, kGrainElems / d);
}

// Calls f with one std::bool_constant per runtime flag, so that an absent operand costs nothing
// inside the inner loops.
template <typename F>
void with_flags(const F& f) {
  f();
}
template <typename F, typename... Rest>
void with_flags(const F& f, bool first, Rest... rest) {
  auto bind = [&](auto c) { with_flags([&](auto... cs) { f(c, cs...); }, rest...); };
  if (first)
    bind(std::true_type{});
  else
    bind(std::false_type{});
}

// The row kernels take every operand as a plain pointer argument: inside the parallel_for lambdas,
// pointers captured by reference would be reloaded on every iteration, and GCC then vectorises
// those reloads as gathers.
struct RowStats {
  double mean, rstd;
};

template <typename T, bool Centered, bool HasWeight, bool HasBias>
RowStats norm_fwd_row(const T* x, const T* weight, const T* bias, T* y, int64_t d, double eps) {
  T mu = 0;
  if constexpr (Centered) {
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < d; ++j) s += x[j];
    mu = s / static_cast<T>(d);
  }
  // Second pass over the centred row. Its sum (zero in exact arithmetic) measures the first pass's
  // rounding error, which would otherwise be of the order of |mean| * eps_f32 and shift every
  // output; adding it back corrects mean and variance both (Chan, Golub & LeVeque).
  T sc = 0, ss = 0;
#pragma omp simd reduction(+ : sc, ss)
  for (int64_t j = 0; j < d; ++j) {
    const T c = Centered ? x[j] - mu : x[j];
    if constexpr (Centered) sc += c;
    ss += c * c;
  }
  const double dd = static_cast<double>(d), shift = static_cast<double>(sc) / dd;
  // Clamped: on a constant row both terms are the same tiny number, and may round either way.
  const double var = std::max(static_cast<double>(ss) / dd - shift * shift, 0.0);
  mu += static_cast<T>(shift);
  const T rs = static_cast<T>(1.0 / std::sqrt(var + eps));
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    T v = (Centered ? x[j] - mu : x[j]) * rs;
    if constexpr (HasWeight) v *= weight[j];
    if constexpr (HasBias) v += bias[j];
    y[j] = v;
  }
  return {static_cast<double>(mu), static_cast<double>(rs)};
}

template <typename T, bool Centered, bool HasWeight, bool HasBias>
void norm_fwd(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows, int64_t d,
              double eps) {
  parallel_for(0, rows, grain_rows(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RowStats st = norm_fwd_row<T, Centered, HasWeight, HasBias>(x + r * d, weight, bias, y + r * d, d, eps);
      if constexpr (Centered) mean[r] = static_cast<T>(st.mean);
      rstd[r] = static_cast<T>(st.rstd);
    }
  });
}

// With xhat = (x - mean) * rstd and gw = dy * weight:
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))   (RMSNorm: no mean(gw) term)
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy.
// One row: writes dx and adds into the block's partial dweight (pw) and dbias (pb).
template <typename T, bool Centered, bool HasWeight, bool WantDx, bool WantDw, bool WantDb>
void norm_bwd_row(const T* g, const T* x, const T* weight, T mu, T rs, T* dx, T* pw, T* pb, int64_t d) {
  T mean_gw = 0, mean_gwx = 0;
  if constexpr (WantDx) {
    T sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t j = 0; j < d; ++j) {
      const T gw = HasWeight ? g[j] * weight[j] : g[j];
      if constexpr (Centered) sg += gw;
      sgx += gw * ((Centered ? x[j] - mu : x[j]) * rs);
    }
    mean_gw = sg / static_cast<T>(d);
    mean_gwx = sgx / static_cast<T>(d);
  }
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    const T xh = (Centered ? x[j] - mu : x[j]) * rs;
    if constexpr (WantDx) {
      const T gw = HasWeight ? g[j] * weight[j] : g[j];
      dx[j] = rs * (gw - mean_gw - xh * mean_gwx);
    }
    if constexpr (WantDw) pw[j] += g[j] * xh;
    if constexpr (WantDb) pb[j] += g[j];
  }
}

template <typename T, bool Centered, bool HasWeight, bool WantDx, bool WantDw, bool WantDb>
void norm_bwd(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dw, T* db,
              int64_t rows, int64_t d) {
  constexpr bool kParams = WantDw || WantDb;
  const int64_t block_rows =
      kParams ? std::max({ceil_div(rows, kMaxBlocks), grain_rows(d), kMinBlockRows}) : grain_rows(d);
  // At least one block, so that zero rows still yield zeroed parameter gradients.
  const int64_t blocks = std::max<int64_t>(1, ceil_div(rows, block_rows));
  // A single block sums straight into the outputs; several keep partials, added in order below.
  const bool partial = blocks > 1;
  std::unique_ptr<T[]> dw_part, db_part;
  if (WantDw && partial) dw_part = std::make_unique_for_overwrite<T[]>(blocks * d);
  if (WantDb && partial) db_part = std::make_unique_for_overwrite<T[]>(blocks * d);

  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      T* pw = WantDw ? (partial ? dw_part.get() + blk * d : dw) : nullptr;
      T* pb = WantDb ? (partial ? db_part.get() + blk * d : db) : nullptr;
      if constexpr (WantDw) std::fill(pw, pw + d, T(0));
      if constexpr (WantDb) std::fill(pb, pb + d, T(0));
      const int64_t r_end = std::min(rows, (blk + 1) * block_rows);
      for (int64_t r = blk * block_rows; r < r_end; ++r) {
        norm_bwd_row<T, Centered, HasWeight, WantDx, WantDw, WantDb>(
            dy + r * d, x + r * d, weight, Centered ? mean[r] : T(0), rstd[r], WantDx ? dx + r * d : nullptr,
            pw, pb, d);
      }
    }
  });

  if (!partial) return;
  auto sum_blocks = [&](const T* part, T* out) {
    parallel_for(0, d, std::max<int64_t>(1, kGrainElems / blocks), [&](int64_t j0, int64_t j1) {
      std::copy(part + j0, part + j1, out + j0);
      for (int64_t b = 1; b < blocks; ++b) {
        const T* p = part + b * d;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) out[j] += p[j];
      }
    });
  };
  if constexpr (WantDw) sum_blocks(dw_part.get(), dw);
  if constexpr (WantDb) sum_blocks(db_part.get(), db);
}

}  // namespace

template <typename T>
void rms_norm_fwd(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t d, double eps) {
  with_flags(
      [&](auto w) {
        norm_fwd<T, false, decltype(w)::value, false>(x, weight, nullptr, y, nullptr, rstd, rows, d, eps);
      },
      weight != nullptr);
}

template <typename T>
void rms_norm_bwd(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight, int64_t rows,
                  int64_t d) {
  with_flags(
      [&](auto w, auto want_dx, auto want_dw) {
        norm_bwd<T, false, decltype(w)::value, decltype(want_dx)::value, decltype(want_dw)::value, false>(
            dy, x, weight, nullptr, rstd, dx, dweight, nullptr, rows, d);
      },
      weight != nullptr, dx != nullptr, dweight != nullptr);
}

template <typename T>
void layer_norm_fwd(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                    int64_t d, double eps) {
  with_flags(
      [&](auto w, auto b) {
        norm_fwd<T, true, decltype(w)::value, decltype(b)::value>(x, weight, bias, y, mean, rstd, rows, d,
                                                                  eps);
      },
      weight != nullptr, bias != nullptr);
}

template <typename T>
void layer_norm_bwd(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dweight,
                    T* dbias, int64_t rows, int64_t d) {
  with_flags(
      [&](auto w, auto want_dx, auto want_dw, auto want_db) {
        norm_bwd<T, true, decltype(w)::value, decltype(want_dx)::value, decltype(want_dw)::value,
                 decltype(want_db)::value>(dy, x, weight, mean, rstd, dx, dweight, dbias, rows, d);
      },
      weight != nullptr, dx != nullptr, dweight != nullptr, dbias != nullptr);
}

#define TITAN_INSTANTIATE(T)                                                                             \
  template void rms_norm_fwd<T>(const T*, const T*, T*, T*, int64_t, int64_t, double);                   \
  template void rms_norm_bwd<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t);       \
  template void layer_norm_fwd<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, double);   \
  template void layer_norm_bwd<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, \
                                  int64_t);
TITAN_INSTANTIATE(float)
TITAN_INSTANTIATE(double)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
