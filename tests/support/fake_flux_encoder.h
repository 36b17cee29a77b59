#pragma once
// A stand-in for FLUX's encoders in tests of the encoding cache (unit and distributed).
#include <map>
#include <span>
#include <string>

#include "titan/core/tensor.h"

namespace titan::test {

// A stand-in for T5, CLIP and the autoencoder whose output depends on every pixel and character:
// per image its channel means and the sum of squares ([b, 4]); per caption its length and byte sum
// ([b, 2], f64, so that the cache keeps dtypes).
inline std::map<std::string, Tensor> fake_encode(std::span<const Tensor> images, std::span<const std::string> captions) {
  const int64_t b = static_cast<int64_t>(images.size());
  Tensor latents = Tensor::zeros({b, 4}), text = Tensor::zeros({b, 2}, {.dtype = kF64});
  for (int64_t i = 0; i < b; ++i) {
    const Tensor& im = images[static_cast<size_t>(i)];
    const int64_t plane = im.size(1) * im.size(2);
    const float* px = im.data<float>();
    float* out = latents.data<float>() + 4 * i;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t j = 0; j < plane; ++j) {
        out[c] += px[c * plane + j] / static_cast<float>(plane);
        out[3] += px[c * plane + j] * px[c * plane + j];
      }
    const std::string& caption = captions[static_cast<size_t>(i)];
    text.data<double>()[2 * i] = static_cast<double>(caption.size());
    for (unsigned char ch : caption) text.data<double>()[2 * i + 1] += ch;
  }
  return {{"latents", latents}, {"text", text}};
}

inline std::map<std::string, Tensor> empty_prompt() {
  return {{"text", Tensor::zeros({1, 2}, {.dtype = kF64})}};
}

}  // namespace titan::test
