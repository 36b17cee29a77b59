#pragma once
// A tiny FLUX encoding cache for training tests: the shapes images of scripts/make_shapes.py
// encoded by a stand-in for FLUX's encoders whose encodings carry what the image and caption show
// (a learnable cache) at any width: latent means are the image's channels averaged over blocks,
// T5 and CLIP vectors are Philox draws keyed by the caption's words.
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "titan/core/rng.h"
#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"
#include "titan/train/flux/encoding_cache.h"

namespace titan::test {

struct SyntheticFluxSizes {
  int64_t latent_channels = 4, latent_side = 8, t5_length = 8, t5_width = 64, clip_width = 32;
};

// The encodings of `caption` at these sizes: word w's draws fill T5 token w; CLIP is their sum.
inline std::map<std::string, Tensor> synthetic_text(const std::string& caption, const SyntheticFluxSizes& s) {
  Tensor t5 = Tensor::zeros({s.t5_length, s.t5_width}), clip = Tensor::zeros({s.clip_width});
  size_t start = 0;
  for (int64_t w = 0; w < s.t5_length && start < caption.size(); ++w) {
    const size_t end = std::min(caption.find(' ', start), caption.size());
    const uint64_t key = std::hash<std::string>{}(caption.substr(start, end - start));
    fill_normal(t5.data<float>() + w * s.t5_width, s.t5_width, key, 0, 0.0f, 1.0f);
    std::vector<float> c(static_cast<size_t>(s.clip_width));
    fill_normal(c.data(), s.clip_width, key, 1000, 0.0f, 0.3f);
    for (int64_t i = 0; i < s.clip_width; ++i) clip.data<float>()[i] += c[static_cast<size_t>(i)];
    start = end + 1;
  }
  return {{"t5", t5}, {"clip_pooled", clip}};
}

// Writes the cache of the data set at `shapes` (images resized to 4 x latent_side) to `out`.
inline void write_synthetic_cache(const std::filesystem::path& shapes, const std::filesystem::path& out,
                                  const SyntheticFluxSizes& s) {
  const int64_t size = 4 * s.latent_side, block = 4;
  auto encode = [s, block](std::span<const Tensor> images, std::span<const std::string> captions) {
    const auto b = static_cast<int64_t>(images.size());
    const int64_t c = s.latent_channels, side = s.latent_side;
    Tensor mean = Tensor::zeros({b, c, side, side}), logvar = Tensor::full({b, c, side, side}, -6.0f);
    Tensor t5 = Tensor::zeros({b, s.t5_length, s.t5_width}), clip = Tensor::zeros({b, s.clip_width});
    for (int64_t k = 0; k < b; ++k) {
      const Tensor& im = images[static_cast<size_t>(k)];
      const float* px = im.data<float>();
      const int64_t width = im.size(2);
      float* m = mean.data<float>() + k * c * side * side;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < side; ++y)
          for (int64_t x = 0; x < side; ++x) {
            float sum = 0;
            for (int64_t dy = 0; dy < block; ++dy)
              for (int64_t dx = 0; dx < block; ++dx)
                sum += px[(ch % 3) * width * width + (y * block + dy) * width + x * block + dx];
            m[(ch * side + y) * side + x] = sum / static_cast<float>(block * block) * 2.0f;
          }
      const std::map<std::string, Tensor> text = synthetic_text(captions[static_cast<size_t>(k)], s);
      std::copy_n(text.at("t5").data<float>(), s.t5_length * s.t5_width, t5.data<float>() + k * s.t5_length * s.t5_width);
      std::copy_n(text.at("clip_pooled").data<float>(), s.clip_width, clip.data<float>() + k * s.clip_width);
    }
    return std::map<std::string, Tensor>{
        {"latent_mean", mean}, {"latent_logvar", logvar}, {"t5", t5}, {"clip_pooled", clip}};
  };
  std::map<std::string, Tensor> empty = synthetic_text("", s);
  empty["t5"] = empty["t5"].reshape({1, s.t5_length, s.t5_width});
  empty["clip_pooled"] = empty["clip_pooled"].reshape({1, s.clip_width});
  data::ImageCaptionDataset dataset({.path = shapes.string()});
  dist::ProcessGroup one = dist::ProcessGroup::single();
  train::flux::write_encoding_cache(dataset, encode, empty,
                                    {.out = out.string(),
                                     .transform = {.size = size, .crop = data::ImageCrop::center, .seed = 0},
                                     .shard_samples = 16,
                                     .batch = 8,
                                     .description = "synthetic FLUX encodings for tests"},
                                    one);
}

}  // namespace titan::test
