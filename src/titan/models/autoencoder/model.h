#pragma once
// The KL autoencoder as diffusers' AutoencoderKL builds it for FLUX (DownEncoderBlock2D /
// UpDecoderBlock2D levels, a resnet-attention-resnet mid block, no time embedding, dropout 0).
// The module tree and so the parameter names are diffusers' ("encoder.down_blocks.0.resnets.1.
// conv2.weight"); state_dict_adapter.h maps them to BFL's. Images and latents are NCHW.
#include <memory>
#include <vector>

#include "titan/models/autoencoder/model_args.h"
#include "titan/nn/conv2d.h"
#include "titan/nn/group_norm.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"

namespace titan::models::autoencoder {

// diffusers' ResnetBlock2D: x + conv2(silu(norm2(conv1(silu(norm1(x)))))), x through a 1x1
// convolution (conv_shortcut) when the channels change.
class ResnetBlock : public nn::Module {
 public:
  ResnetBlock(int64_t in_channels, int64_t out_channels, int64_t groups, TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::GroupNorm> norm1, norm2;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Conv2d> conv_shortcut;  // null when in_channels == out_channels
};

// The mid block's attention: one head of width C over the H * W positions, after a GroupNorm,
// added to its input. q, k, v and the output projection are Linear [C, C] with bias, as diffusers
// holds them (to_out is a list whose element 0 is the projection).
class MidAttention : public nn::Module {
 public:
  MidAttention(int64_t channels, int64_t groups, TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::GroupNorm> group_norm;
  std::shared_ptr<nn::Linear> to_q, to_k, to_v;
  std::shared_ptr<nn::ModuleList<nn::Linear>> to_out;
};

// resnets.0, attentions.0 (unless the attention is switched off), resnets.1.
class MidBlock : public nn::Module {
 public:
  MidBlock(int64_t channels, int64_t groups, bool attention, TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::ModuleList<ResnetBlock>> resnets;
  std::shared_ptr<nn::ModuleList<MidAttention>> attentions;  // empty without attention
};

// diffusers' Downsample2D as FLUX's encoder has it: a stride-2 3x3 convolution after padding the
// bottom and the right by one.
class Downsample : public nn::Module {
 public:
  Downsample(int64_t channels, TensorOptions opts);
  Tensor forward(const Tensor& x) const { return (*conv)(x); }
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::Conv2d> conv;
};

// diffusers' Upsample2D: nearest-neighbour x2, then a 3x3 convolution.
class Upsample : public nn::Module {
 public:
  Upsample(int64_t channels, TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::Conv2d> conv;
};

// One level: its resnets, then (all levels but the last) the resampler.
class DownBlock : public nn::Module {
 public:
  DownBlock(int64_t in_channels, int64_t out_channels, int64_t layers, int64_t groups, bool downsample,
            TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::ModuleList<ResnetBlock>> resnets;
  std::shared_ptr<nn::ModuleList<Downsample>> downsamplers;  // empty on the last level
};

class UpBlock : public nn::Module {
 public:
  UpBlock(int64_t in_channels, int64_t out_channels, int64_t layers, int64_t groups, bool upsample,
          TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  std::shared_ptr<nn::ModuleList<ResnetBlock>> resnets;
  std::shared_ptr<nn::ModuleList<Upsample>> upsamplers;  // empty on the last level
};

// image [N, in_channels, H, W] -> moments [N, 2 * latent_channels, H / f, W / f] (f =
// args.downscale()): the mean's channels, then the log-variance's.
class Encoder : public nn::Module {
 public:
  Encoder(const ModelArgs& args, TensorOptions opts);
  Tensor forward(const Tensor& image) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  // The levels, then the mid block, in the order forward runs them (FSDP's units).
  std::vector<nn::Module*> blocks() const;

  std::shared_ptr<nn::Conv2d> conv_in;
  std::shared_ptr<nn::ModuleList<DownBlock>> down_blocks;
  std::shared_ptr<MidBlock> mid_block;
  std::shared_ptr<nn::GroupNorm> conv_norm_out;
  std::shared_ptr<nn::Conv2d> conv_out;
};

// z [N, latent_channels, h, w] -> image [N, out_channels, h * f, w * f]. up_blocks run from the
// deepest level (block_out_channels.back()) to the first.
class Decoder : public nn::Module {
 public:
  Decoder(const ModelArgs& args, TensorOptions opts);
  Tensor forward(const Tensor& z) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  // The mid block, then the levels, in the order forward runs them.
  std::vector<nn::Module*> blocks() const;

  std::shared_ptr<nn::Conv2d> conv_in;
  std::shared_ptr<MidBlock> mid_block;
  std::shared_ptr<nn::ModuleList<UpBlock>> up_blocks;
  std::shared_ptr<nn::GroupNorm> conv_norm_out;
  std::shared_ptr<nn::Conv2d> conv_out;
};

// diffusers' DiagonalGaussianDistribution: the encoder's moments split along channels, the
// log-variance clamped to [-30, 20] as diffusers clamps it (BFL's model does not clamp; a trained
// encoder's values lie well inside).
struct DiagonalGaussian {
  Tensor mean;    // [N, latent_channels, h, w]
  Tensor logvar;  // the same shape, clamped

  explicit DiagonalGaussian(const Tensor& moments);
  Tensor stddev() const;  // exp(logvar / 2)
  // mean + std * noise, the noise standard normal from `gen`'s stream (core/rng.h).
  Tensor sample(Generator& gen) const;
};

class Autoencoder : public nn::Module {
 public:
  explicit Autoencoder(const ModelArgs& args, TensorOptions opts = {});

  const ModelArgs& args() const { return args_; }

  // The encoder's distribution over z for `image` [N, in_channels, H, W] (values in [-1, 1]; H
  // and W multiples of args().downscale()).
  DiagonalGaussian encode_distribution(const Tensor& image);
  // What the diffusion model sees: (z - shift_factor) * scaling_factor, z sampled from the
  // distribution with `gen` (FLUX's training), or its mean (encode_mean).
  Tensor encode(const Tensor& image, Generator& gen);
  Tensor encode_mean(const Tensor& image);
  // The inverse scaling of `latents`, then the decoder: the image [N, out_channels, H, W].
  Tensor decode(const Tensor& latents);
  // The decoder on an unscaled z (diffusers' AutoencoderKL.decode).
  Tensor decode_z(const Tensor& z);

  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Decoder> decoder;
  std::shared_ptr<nn::Conv2d> quant_conv;       // null unless args.use_quant_conv
  std::shared_ptr<nn::Conv2d> post_quant_conv;  // null unless args.use_post_quant_conv

 private:
  Tensor to_latents(const Tensor& z) const;
  ModelArgs args_;
};

}  // namespace titan::models::autoencoder
