#pragma once
// Nearest-neighbour upsampling of contiguous [planes, h, w] images by an integer factor on both
// spatial dims: y[p, i, j] = x[p, i / factor, j / factor] (torch's interpolate, mode="nearest").
#include <cstdint>

namespace titan::kernels::cpu {

template <typename T>
void upsample_nearest_fwd(const T* x, T* y, int64_t planes, int64_t h, int64_t w, int64_t factor);
// dx[p, i, j] = the sum of dy over the factor x factor block that copied x[p, i, j].
template <typename T>
void upsample_nearest_bwd(const T* dy, T* dx, int64_t planes, int64_t h, int64_t w, int64_t factor);

}  // namespace titan::kernels::cpu
