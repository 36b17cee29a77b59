#pragma once
// Group normalisation of a contiguous [n, c, spatial] input: the c channels fall into `groups`
// groups of c / groups consecutive channels, and each (image, group) is normalised over its
// channels and positions together; then each channel gets its own weight and bias
// (torch.nn.functional.group_norm).
//
// Statistics are per (image, group), read from memory once: blocks of a few thousand values (in
// L1) each get a mean and centred sums, in T across the SIMD lanes, and the blocks are merged in
// double (Chan, Golub & LeVeque), so the variance never takes E[x^2] - mean^2. Parameter gradients are summed
// over the images in a fixed order, so the result does not depend on the thread count.
//
// weight, bias and every gradient output may be null (absent, or not asked for).
#include <cstdint>

namespace titan::kernels::cpu {

struct GroupNormShape {
  int64_t n, c, spatial, groups;
};

// y = (x - mean) * rstd * weight[ch] + bias[ch]; mean and rstd [n, groups].
template <typename T>
void group_norm_fwd(const GroupNormShape& s, const T* x, const T* weight, const T* bias, T* y, T* mean,
                    T* rstd, double eps);
// With xhat = (x - mean) * rstd and gw = dy * weight[ch], over each (image, group):
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),
//   dweight[ch] = sum of dy * xhat, dbias[ch] = sum of dy.
template <typename T>
void group_norm_bwd(const GroupNormShape& s, const T* dy, const T* x, const T* weight, const T* mean,
                    const T* rstd, T* dx, T* dweight, T* dbias);

}  // namespace titan::kernels::cpu
