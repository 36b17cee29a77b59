#include "titan/kernels/cpu/sinusoid.h"

#include <cmath>

namespace titan::kernels::cpu {

template <typename T>
void sinusoid(const T* t, int64_t batch, const T* freqs, int64_t half, T* out) {
  for (int64_t b = 0; b < batch; ++b) {
    T* row = out + b * 2 * half;
    for (int64_t i = 0; i < half; ++i) {
      const T arg = t[b] * freqs[i];
      row[i] = std::cos(arg);
      row[half + i] = std::sin(arg);
    }
  }
}

template void sinusoid<float>(const float*, int64_t, const float*, int64_t, float*);
template void sinusoid<double>(const double*, int64_t, const double*, int64_t, double*);

}  // namespace titan::kernels::cpu
