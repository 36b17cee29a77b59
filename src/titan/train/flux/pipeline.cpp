#include "titan/train/flux/pipeline.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/ops/arith.h"

namespace titan::train::flux {

VelocityFn flux_velocity(models::flux::FluxTransformer& model, int64_t latent_height, int64_t latent_width,
                         double guidance) {
  const models::flux::FluxModelArgs& args = model.args();
  const Tensor img_ids = models::flux::image_ids(latent_height, latent_width, args.patch_size);
  return [&model, img_ids, guidance, has_guidance = args.guidance_embed](const Tensor& x, double sigma,
                                                                         const TextConditioning& text) {
    const int64_t batch = x.size(0);
    TITAN_CHECK(text.t5.size(0) == batch && text.clip_pooled.size(0) == batch, "FLUX sampling: ", batch,
                " latents but text conditioning for ", text.t5.size(0), " (T5) and ", text.clip_pooled.size(0),
                " (CLIP) samples; give one per latent");
    return model({.img = x,
                  .img_ids = img_ids,
                  .txt = text.t5,
                  .txt_ids = models::flux::text_ids(text.t5.size(1)),
                  .timesteps = Tensor::full({batch}, sigma),
                  .y = text.clip_pooled,
                  .guidance = has_guidance ? Tensor::full({batch}, guidance) : Tensor()});
  };
}

Tensor sample(models::flux::FluxTransformer& model, const Tensor& noise, int64_t latent_height, int64_t latent_width,
              const TextConditioning& positive, const TextConditioning* negative, const SampleOptions& options) {
  const models::flux::FluxModelArgs& args = model.args();
  const int64_t p = args.patch_size;
  TITAN_CHECK(latent_height % p == 0 && latent_width % p == 0, "FLUX sampling: latents of ", latent_height, "x",
              latent_width, " pixels do not split into ", p, "x", p, " patches; give multiples of ", p);
  const int64_t tokens = (latent_height / p) * (latent_width / p);
  TITAN_CHECK(noise.dim() == 3 && noise.size(1) == tokens && noise.size(2) == args.in_channels,
              "FLUX sampling: the noise must be packed latents [B, ", tokens, ", ", args.in_channels, "] for ",
              latent_height, "x", latent_width, " latent pixels, got ", noise.desc());
  autograd::NoGradGuard no_grad;
  const std::vector<double> sigmas = flux_sigmas(options.steps, tokens, options.schedule);
  return euler_sample(noise, sigmas, flux_velocity(model, latent_height, latent_width, options.guidance), positive,
                      options.cfg_scale > 1.0 ? negative : nullptr, options.cfg_scale);
}

ImagePipeline::ImagePipeline(std::shared_ptr<ConditioningStack> conditioning,
                             std::shared_ptr<models::flux::FluxTransformer> transformer)
    : conditioning_(std::move(conditioning)), transformer_(std::move(transformer)) {
  const int64_t ae = conditioning_->autoencoder().args().latent_channels;
  TITAN_CHECK(ae == transformer_->args().latent_channels, "FLUX pipeline: the autoencoder has ", ae,
              " latent channels but the transformer takes ", transformer_->args().latent_channels,
              " (in_channels ", transformer_->args().in_channels, " = channels x patch^2); give the "
              "autoencoder the transformer was trained with");
}

std::pair<int64_t, int64_t> ImagePipeline::latent_size(int64_t height, int64_t width) const {
  const int64_t f = conditioning_->autoencoder().args().downscale(), p = transformer_->args().patch_size;
  for (const auto& [flag, pixels] : {std::pair{"--height", height}, std::pair{"--width", width}})
    TITAN_CHECK(pixels > 0 && pixels % (f * p) == 0, "FLUX pipeline: ", flag, " ", pixels,
                " is not a positive multiple of ", f * p, " (the autoencoder's downscale ", f, " x the ", p, "x", p,
                " patches)");
  return {height / f, width / f};
}

Tensor ImagePipeline::initial_noise(int64_t count, const ImageOptions& options) const {
  const auto [h, w] = latent_size(options.height, options.width);
  Generator gen(options.seed);
  const Tensor noise = Tensor::randn({count, transformer_->args().latent_channels, h, w}, gen);
  return models::flux::pack_latents(noise, transformer_->args().patch_size);
}

TextConditioning ImagePipeline::encode(std::span<const std::string> captions) {
  std::map<std::string, Tensor> text = conditioning_->encode_text(captions);
  const models::flux::FluxModelArgs& args = transformer_->args();
  TITAN_CHECK(text.at("t5").size(2) == args.context_in_dim && text.at("clip_pooled").size(1) == args.vec_in_dim,
              "FLUX pipeline: T5 gives width ", text.at("t5").size(2), " and CLIP ", text.at("clip_pooled").size(1),
              " but the transformer takes context_in_dim ", args.context_in_dim, " and vec_in_dim ", args.vec_in_dim,
              "; give the text encoders the transformer was trained with");
  return {.t5 = text.at("t5"), .clip_pooled = text.at("clip_pooled")};
}

Tensor ImagePipeline::generate(std::span<const std::string> prompts, const ImageOptions& options,
                               const Tensor& latents) {
  TITAN_CHECK(!prompts.empty(), "FLUX pipeline: no prompts given");
  TITAN_CHECK(options.images_per_prompt >= 1, "FLUX pipeline: --images-per-prompt must be at least 1, got ",
              options.images_per_prompt);
  const auto [h, w] = latent_size(options.height, options.width);
  const int64_t count = static_cast<int64_t>(prompts.size()) * options.images_per_prompt;
  // Each prompt once per image, as diffusers repeats its embeddings.
  std::vector<std::string> captions;
  for (const std::string& p : prompts) captions.insert(captions.end(), options.images_per_prompt, p);
  const TextConditioning positive = encode(captions);
  TextConditioning negative;
  if (options.sampling.cfg_scale > 1.0) {
    const TextConditioning one = encode(std::span(&options.negative_prompt, 1));
    negative = {.t5 = one.t5.expand({count, one.t5.size(1), one.t5.size(2)}).contiguous(),
                .clip_pooled = one.clip_pooled.expand({count, one.clip_pooled.size(1)}).contiguous()};
  }
  const Tensor noise = latents.defined() ? latents : initial_noise(count, options);
  TITAN_CHECK(noise.size(0) == count, "FLUX pipeline: ", noise.size(0), " latents given for ", count,
              " images (", prompts.size(), " prompts x ", options.images_per_prompt, ")");
  const Tensor tokens = sample(*transformer_, noise, h, w, positive, &negative, options.sampling);
  const Tensor z = models::flux::unpack_latents(tokens, h, w, transformer_->args().patch_size);

  autograd::NoGradGuard no_grad;
  models::autoencoder::Autoencoder& ae = conditioning_->autoencoder();
  Tensor images = Tensor::empty({count, ae.args().out_channels, options.height, options.width});
  // One image at a time: the decoder's activations at full resolution are the largest tensors.
  for (int64_t i = 0; i < count; ++i) {
    const Tensor decoded = ae.decode(z.narrow(0, i, 1));
    images.narrow(0, i, 1).copy_(ops::clamp(decoded * 0.5 + 0.5, 0.0, 1.0));
  }
  return images;
}

data::Image image_grid(const Tensor& images, int64_t columns) {
  TITAN_CHECK(images.dim() == 4 && images.size(1) == 3, "image_grid: expected RGB images [N, 3, H, W], got ",
              images.desc());
  TITAN_CHECK(columns >= 1, "image_grid: columns must be at least 1, got ", columns);
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const int64_t cols = std::min(columns, n), rows = (n + columns - 1) / columns;
  data::Image grid(cols * w, rows * h);
  const Tensor pixels = images.to(kF32).contiguous();
  const float* src = pixels.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < h; ++y) {
      uint8_t* out = grid.row((i / columns) * h + y) + (i % columns) * w * 3;
      for (int64_t x = 0; x < w; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          const double v = std::clamp(static_cast<double>(src[((i * 3 + c) * h + y) * w + x]), 0.0, 1.0);
          out[x * 3 + c] = static_cast<uint8_t>(std::lround(v * 255.0));
        }
    }
  return grid;
}

}  // namespace titan::train::flux
