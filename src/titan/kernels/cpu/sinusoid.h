#pragma once
// The sinusoidal embedding of scalars (diffusion timesteps): row b of out [batch, 2 half] is
// [cos(t[b] f[0..half)); sin(t[b] f[0..half))], each product and each cos/sin rounded once in T, the
// order of torch's get_timestep_embedding.
#include <cstdint>

namespace titan::kernels::cpu {

template <typename T>
void sinusoid(const T* t, int64_t batch, const T* freqs, int64_t half, T* out);

}  // namespace titan::kernels::cpu
