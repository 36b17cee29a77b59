#include "titan/train/flux/flux_batches.h"

#include <cmath>
#include <numeric>

#include "titan/core/error.h"
#include "titan/core/rng.h"
#include "titan/models/flux/model.h"
#include "titan/train/flux/rectified_flow.h"

namespace titan::train::flux {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The Philox seed of one draw (`stream`) of the sample keyed `key`.
uint64_t stream_seed(uint64_t key, uint64_t stream) { return splitmix64(key ^ splitmix64(stream)); }

enum Stream : uint64_t { kLatent = 1, kNoise, kTime, kDropT5, kDropClip, kEpoch, kCrop };

std::vector<float> values(const std::map<std::string, Tensor>& encodings, const std::string& name,
                          const std::string& where) {
  const auto it = encodings.find(name);
  TITAN_CHECK(it != encodings.end(), "flux: the encodings' ", where, " hold no \"", name,
              "\" tensor; re-encode the cache with `titan flux encode`");
  // A cache encoded with --dtype bf16 is read in float32, as training computes.
  return it->second.to(kF32).contiguous().to_vector<float>();
}

}  // namespace

FluxBatches::FluxBatches(std::shared_ptr<SampleEncodings> source, int64_t first, int64_t count,
                         const FluxConfig& cfg, uint64_t seed, int64_t patch_size)
    : source_(std::move(source)), first_(first), count_(count), cfg_(cfg), seed_(seed), patch_size_(patch_size) {
  TITAN_CHECK(count_ > 0 && first_ >= 0 && first_ + count_ <= source_->size(), "flux: samples [", first_, ", ",
              first_ + count_, ") of ", source_->size(), " (", source_->description(), "); the data is too small");
}

const std::vector<int64_t>& FluxBatches::permutation(int64_t epoch) {
  if (epoch == epoch_) return perm_;
  perm_.resize(static_cast<size_t>(count_));
  std::iota(perm_.begin(), perm_.end(), 0);
  const uint64_t key = stream_seed(seed_, kEpoch + static_cast<uint64_t>(epoch) * 16);
  for (int64_t i = count_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(philox_uniform_f64(key, static_cast<uint64_t>(i)) * static_cast<double>(i + 1));
    std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(std::min(j, i))]);
  }
  epoch_ = epoch;
  return perm_;
}

FluxBatch FluxBatches::training(int64_t first_slot, int64_t rows) {
  std::vector<int64_t> samples;
  std::vector<uint64_t> keys, crop_draws;
  for (int64_t g = first_slot; g < first_slot + rows; ++g) {
    samples.push_back(permutation(g / count_)[static_cast<size_t>(g % count_)]);
    keys.push_back(stream_seed(seed_, static_cast<uint64_t>(g) * 16 + 8));
    crop_draws.push_back(stream_seed(keys.back(), kCrop));
  }
  return assemble(encodings(samples, crop_draws), keys, true, 0);
}

FluxBatch FluxBatches::validation(const std::vector<int64_t>& samples, double t) {
  std::vector<uint64_t> keys;
  for (int64_t s : samples) keys.push_back(stream_seed(seed_ ^ 0x7a11da7eULL, static_cast<uint64_t>(s)));
  if (samples != validation_samples_) {
    validation_encodings_ = encodings(samples, {});
    validation_samples_ = samples;
  }
  return assemble(validation_encodings_, keys, false, t);
}

std::vector<std::map<std::string, Tensor>> FluxBatches::encodings(const std::vector<int64_t>& samples,
                                                                  const std::vector<uint64_t>& crop_draws) {
  std::vector<int64_t> positions;
  for (int64_t s : samples) positions.push_back(first_ + s);
  return source_->samples(positions, crop_draws);
}

FluxBatch FluxBatches::assemble(const std::vector<std::map<std::string, Tensor>>& encoded,
                                const std::vector<uint64_t>& keys, bool train, double fixed_t) {
  const auto b = static_cast<int64_t>(encoded.size());
  const std::map<std::string, Tensor>& empty = source_->empty_prompt();
  const std::vector<float> empty_t5 = values(empty, "t5", "empty prompt"),
                           empty_clip = values(empty, "clip_pooled", "empty prompt");
  std::vector<float> x0, noise, txt, y, t;
  Shape latent_shape;
  int64_t txt_len = 0, txt_dim = 0;
  for (int64_t k = 0; k < b; ++k) {
    const std::map<std::string, Tensor>& enc = encoded[static_cast<size_t>(k)];
    const Tensor& mean_t = enc.at("latent_mean");
    latent_shape = mean_t.sizes();
    const std::vector<float> mean = values(enc, "latent_mean", "sample"), logvar = values(enc, "latent_logvar", "sample");
    const std::vector<float> t5 = values(enc, "t5", "sample"), clip = values(enc, "clip_pooled", "sample");
    TITAN_CHECK(t5.size() == empty_t5.size() && clip.size() == empty_clip.size(),
                "flux: the encoding cache's empty prompt has ", empty_t5.size(), " T5 and ", empty_clip.size(),
                " CLIP values, its samples ", t5.size(), " and ", clip.size(), "; re-encode it");
    txt_len = enc.at("t5").size(0);
    txt_dim = enc.at("t5").size(1);
    const uint64_t key = keys[static_cast<size_t>(k)];
    const auto n = static_cast<int64_t>(mean.size());
    std::vector<float> eps(static_cast<size_t>(n)), z(static_cast<size_t>(n));
    fill_normal(z.data(), n, stream_seed(key, kNoise), 0, 0.0f, 1.0f);
    if (train) fill_normal(eps.data(), n, stream_seed(key, kLatent), 0, 0.0f, 1.0f);
    const auto scale = static_cast<float>(source_->scaling_factor()),
               shift = static_cast<float>(source_->shift_factor());
    // The latent drawn from the autoencoder's distribution (its mean for validation), then FLUX's
    // shift and scale.
    for (int64_t i = 0; i < n; ++i) {
      const float latent = train ? mean[static_cast<size_t>(i)] + std::exp(0.5f * logvar[static_cast<size_t>(i)]) * eps[static_cast<size_t>(i)]
                                 : mean[static_cast<size_t>(i)];
      x0.push_back((latent - shift) * scale);
    }
    noise.insert(noise.end(), z.begin(), z.end());
    if (train) {
      Generator gen(stream_seed(key, kTime));
      const Tensor tk = cfg_.timestep_sampling == "logit_normal"
                            ? sample_timesteps_logit_normal(1, gen, cfg_.logit_mean, cfg_.logit_std, cfg_.time_shift)
                            : sample_timesteps_uniform(1, gen);
      t.push_back(static_cast<float>(tk.item()));
    } else {
      t.push_back(static_cast<float>(fixed_t));
    }
    // Prompt dropout, T5 and CLIP each on its own draw (TorchTitan's flux dataset).
    const bool drop_t5 = train && philox_uniform_f64(stream_seed(key, kDropT5), 0) < cfg_.prompt_dropout;
    const bool drop_clip = train && philox_uniform_f64(stream_seed(key, kDropClip), 0) < cfg_.prompt_dropout;
    const std::vector<float>& t5_used = drop_t5 ? empty_t5 : t5;
    const std::vector<float>& clip_used = drop_clip ? empty_clip : clip;
    txt.insert(txt.end(), t5_used.begin(), t5_used.end());
    y.insert(y.end(), clip_used.begin(), clip_used.end());
  }
  TITAN_CHECK(latent_shape.size() == 3, "flux: the cache's latent_mean is [", latent_shape.size(),
              " dims], expected [channels, height, width]");
  const int64_t c = latent_shape[0], h = latent_shape[1], w = latent_shape[2];
  FluxBatch batch;
  batch.x0 = models::flux::pack_latents(Tensor::from_vector(x0, {b, c, h, w}), patch_size_);
  batch.noise = models::flux::pack_latents(Tensor::from_vector(noise, {b, c, h, w}), patch_size_);
  batch.t = Tensor::from_vector(t, {b});
  batch.txt = Tensor::from_vector(txt, {b, txt_len, txt_dim});
  batch.y = Tensor::from_vector(y, {b, static_cast<int64_t>(y.size()) / b});
  batch.height = h;
  batch.width = w;
  return batch;
}

}  // namespace titan::train::flux
