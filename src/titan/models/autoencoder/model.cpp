#include "titan/models/autoencoder/model.h"

#include "titan/attention/splash.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/upsample.h"

namespace titan::models::autoencoder {

namespace {

// diffusers' resnets, attention and output norms all take 1e-6, not GroupNorm's default 1e-5.
constexpr double kNormEps = 1e-6;
// diffusers' clamp of the log-variance (DiagonalGaussianDistribution).
constexpr double kMinLogvar = -30.0, kMaxLogvar = 20.0;

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, TensorOptions opts) {
  return std::make_shared<nn::Conv2d>(in, out, 3, 1, 1, true, opts);
}

std::shared_ptr<nn::GroupNorm> make_group_norm(int64_t groups, int64_t channels, TensorOptions opts) {
  return std::make_shared<nn::GroupNorm>(groups, channels, kNormEps, true, opts);
}

template <typename M>
std::shared_ptr<nn::ModuleList<M>> module_list() {
  return std::make_shared<nn::ModuleList<M>>();
}

// norm_out, SiLU, conv_out: how both the encoder and the decoder end.
Tensor head(nn::GroupNorm& norm, nn::Conv2d& conv, const Tensor& x) {
  return conv(ops::silu(norm(x)));
}

}  // namespace

ResnetBlock::ResnetBlock(int64_t in_channels, int64_t out_channels, int64_t groups, TensorOptions opts) {
  norm1 = register_module("norm1", make_group_norm(groups, in_channels, opts));
  conv1 = register_module("conv1", conv3x3(in_channels, out_channels, opts));
  norm2 = register_module("norm2", make_group_norm(groups, out_channels, opts));
  conv2 = register_module("conv2", conv3x3(out_channels, out_channels, opts));
  if (in_channels != out_channels)
    conv_shortcut = register_module(
        "conv_shortcut", std::make_shared<nn::Conv2d>(in_channels, out_channels, 1, 1, 0, true, opts));
}

Tensor ResnetBlock::forward(const Tensor& x) const {
  // One statement per op: a temporary lives to the end of its statement, so nesting the calls would
  // hold the norm's and the activation's outputs through the convolution (3 more tensors of the
  // block's size at its peak, which at 1024 px is 0.5 GiB each an image).
  Tensor h = ops::silu((*norm1)(x));
  h = (*conv1)(h);
  h = ops::silu((*norm2)(h));
  h = (*conv2)(h);
  return (conv_shortcut ? (*conv_shortcut)(x) : x) + h;
}

MidAttention::MidAttention(int64_t channels, int64_t groups, TensorOptions opts) {
  group_norm = register_module("group_norm", make_group_norm(groups, channels, opts));
  to_q = register_module("to_q", std::make_shared<nn::Linear>(channels, channels, true, opts));
  to_k = register_module("to_k", std::make_shared<nn::Linear>(channels, channels, true, opts));
  to_v = register_module("to_v", std::make_shared<nn::Linear>(channels, channels, true, opts));
  to_out = register_module("to_out", module_list<nn::Linear>());
  to_out->push_back(std::make_shared<nn::Linear>(channels, channels, true, opts));
}

Tensor MidAttention::forward(const Tensor& x) const {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t positions = h * w;
  const Tensor tokens = (*group_norm)(x).reshape({n, c, positions}).transpose(1, 2);  // [N, HW, C]
  // One head of width C: [N, HW, 1, C]. Splash attention's tiles never hold the [HW, HW] scores
  // (at FLUX's deepest level, H/8 x W/8: 1 GiB an image at 1024 px), as diffusers' SDPA does not.
  auto head = [&](nn::Linear& projection) { return projection(tokens).reshape({n, positions, 1, c}); };
  const Tensor attended = attention::splash_attention(
      head(*to_q), head(*to_k), head(*to_v),
      attention::BlockMask::build(attention::Mask::every_pair(positions), n, positions));
  const Tensor out = (*to_out)[0](attended.reshape({n, positions, c}));
  return x + out.transpose(1, 2).reshape({n, c, h, w});
}

MidBlock::MidBlock(int64_t channels, int64_t groups, bool attention, TensorOptions opts) {
  resnets = register_module("resnets", module_list<ResnetBlock>());
  attentions = register_module("attentions", module_list<MidAttention>());
  for (int i = 0; i < 2; ++i)
    resnets->push_back(std::make_shared<ResnetBlock>(channels, channels, groups, opts));
  if (attention) attentions->push_back(std::make_shared<MidAttention>(channels, groups, opts));
}

Tensor MidBlock::forward(const Tensor& x) const {
  Tensor h = (*resnets)[0](x);
  if (!attentions->empty()) h = (*attentions)[0](h);
  return (*resnets)[1](h);
}

Downsample::Downsample(int64_t channels, TensorOptions opts) {
  conv = register_module(
      "conv",
      std::make_shared<nn::Conv2d>(
          channels, channels, 3,
          ops::Conv2dOptions{.stride = 2, .pad_top = 0, .pad_bottom = 1, .pad_left = 0, .pad_right = 1}, true,
          opts));
}

Upsample::Upsample(int64_t channels, TensorOptions opts) {
  conv = register_module("conv", conv3x3(channels, channels, opts));
}

Tensor Upsample::forward(const Tensor& x) const {
  return (*conv)(ops::upsample_nearest(x, 2));
}

DownBlock::DownBlock(int64_t in_channels, int64_t out_channels, int64_t layers, int64_t groups,
                     bool downsample, TensorOptions opts) {
  resnets = register_module("resnets", module_list<ResnetBlock>());
  downsamplers = register_module("downsamplers", module_list<Downsample>());
  for (int64_t i = 0; i < layers; ++i)
    resnets->push_back(
        std::make_shared<ResnetBlock>(i == 0 ? in_channels : out_channels, out_channels, groups, opts));
  if (downsample) downsamplers->push_back(std::make_shared<Downsample>(out_channels, opts));
}

Tensor DownBlock::forward(const Tensor& x) const {
  Tensor h = x;
  for (const auto& r : *resnets) h = (*r)(h);
  for (const auto& d : *downsamplers) h = (*d)(h);
  return h;
}

UpBlock::UpBlock(int64_t in_channels, int64_t out_channels, int64_t layers, int64_t groups, bool upsample,
                 TensorOptions opts) {
  resnets = register_module("resnets", module_list<ResnetBlock>());
  upsamplers = register_module("upsamplers", module_list<Upsample>());
  for (int64_t i = 0; i < layers; ++i)
    resnets->push_back(
        std::make_shared<ResnetBlock>(i == 0 ? in_channels : out_channels, out_channels, groups, opts));
  if (upsample) upsamplers->push_back(std::make_shared<Upsample>(out_channels, opts));
}

Tensor UpBlock::forward(const Tensor& x) const {
  Tensor h = x;
  for (const auto& r : *resnets) h = (*r)(h);
  for (const auto& u : *upsamplers) h = (*u)(h);
  return h;
}

Encoder::Encoder(const ModelArgs& a, TensorOptions opts) {
  const std::vector<int64_t>& ch = a.block_out_channels;
  conv_in = register_module("conv_in", conv3x3(a.in_channels, ch[0], opts));
  down_blocks = register_module("down_blocks", module_list<DownBlock>());
  for (int64_t i = 0; i < a.levels(); ++i)
    down_blocks->push_back(std::make_shared<DownBlock>(ch[i == 0 ? 0 : i - 1], ch[i], a.layers_per_block,
                                                       a.norm_num_groups, i + 1 < a.levels(), opts));
  mid_block = register_module(
      "mid_block", std::make_shared<MidBlock>(ch.back(), a.norm_num_groups, a.mid_block_add_attention, opts));
  conv_norm_out = register_module("conv_norm_out", make_group_norm(a.norm_num_groups, ch.back(), opts));
  conv_out = register_module("conv_out", conv3x3(ch.back(), 2 * a.latent_channels, opts));
}

Tensor Encoder::forward(const Tensor& image) const {
  Tensor h = (*conv_in)(image);
  for (const auto& b : *down_blocks) h = (*b)(h);
  return head(*conv_norm_out, *conv_out, (*mid_block)(h));
}

std::vector<nn::Module*> Encoder::blocks() const {
  std::vector<nn::Module*> out;
  for (const auto& b : *down_blocks) out.push_back(b.get());
  out.push_back(mid_block.get());
  return out;
}

Decoder::Decoder(const ModelArgs& a, TensorOptions opts) {
  const std::vector<int64_t>& ch = a.block_out_channels;
  conv_in = register_module("conv_in", conv3x3(a.latent_channels, ch.back(), opts));
  mid_block = register_module(
      "mid_block", std::make_shared<MidBlock>(ch.back(), a.norm_num_groups, a.mid_block_add_attention, opts));
  up_blocks = register_module("up_blocks", module_list<UpBlock>());
  for (int64_t i = 0; i < a.levels(); ++i) {
    const int64_t level = a.levels() - 1 - i;
    up_blocks->push_back(std::make_shared<UpBlock>(ch[std::min(level + 1, a.levels() - 1)], ch[level],
                                                   a.layers_per_block + 1, a.norm_num_groups, level > 0,
                                                   opts));
  }
  conv_norm_out = register_module("conv_norm_out", make_group_norm(a.norm_num_groups, ch[0], opts));
  conv_out = register_module("conv_out", conv3x3(ch[0], a.out_channels, opts));
}

Tensor Decoder::forward(const Tensor& z) const {
  Tensor h = (*mid_block)((*conv_in)(z));
  for (const auto& b : *up_blocks) h = (*b)(h);
  return head(*conv_norm_out, *conv_out, h);
}

std::vector<nn::Module*> Decoder::blocks() const {
  std::vector<nn::Module*> out = {mid_block.get()};
  for (const auto& b : *up_blocks) out.push_back(b.get());
  return out;
}

DiagonalGaussian::DiagonalGaussian(const Tensor& moments) {
  TITAN_CHECK(moments.dim() == 4 && moments.size(1) % 2 == 0,
              "autoencoder: the encoder's moments must be [N, 2 * latent_channels, h, w], got ",
              moments.desc());
  const int64_t latent = moments.size(1) / 2;
  mean = moments.narrow(1, 0, latent);
  logvar = ops::clamp(moments.narrow(1, latent, latent), kMinLogvar, kMaxLogvar);
}

Tensor DiagonalGaussian::stddev() const {
  return ops::exp(logvar * 0.5);
}

Tensor DiagonalGaussian::sample(Generator& gen) const {
  return mean + stddev() * Tensor::randn(mean.sizes(), gen, mean.options());
}

Autoencoder::Autoencoder(const ModelArgs& args, TensorOptions opts) : args_(args) {
  args_.validate();
  encoder = register_module("encoder", std::make_shared<Encoder>(args_, opts));
  decoder = register_module("decoder", std::make_shared<Decoder>(args_, opts));
  const int64_t latent = args_.latent_channels;
  if (args_.use_quant_conv)
    quant_conv = register_module("quant_conv",
                                 std::make_shared<nn::Conv2d>(2 * latent, 2 * latent, 1, 1, 0, true, opts));
  if (args_.use_post_quant_conv)
    post_quant_conv =
        register_module("post_quant_conv", std::make_shared<nn::Conv2d>(latent, latent, 1, 1, 0, true, opts));
}

DiagonalGaussian Autoencoder::encode_distribution(const Tensor& image) {
  const int64_t f = args_.downscale();
  TITAN_CHECK(image.dim() == 4 && image.size(1) == args_.in_channels && image.size(2) % f == 0 &&
                  image.size(3) % f == 0,
              "autoencoder: expected an image [N, ", args_.in_channels, ", H, W] with H and W multiples of ",
              f, ", got ", image.desc(), "; crop or resize it");
  Tensor moments = (*encoder)(image);
  if (quant_conv) moments = (*quant_conv)(moments);
  return DiagonalGaussian(moments);
}

Tensor Autoencoder::to_latents(const Tensor& z) const {
  return (z - args_.shift_factor) * args_.scaling_factor;
}

Tensor Autoencoder::encode(const Tensor& image, Generator& gen) {
  return to_latents(encode_distribution(image).sample(gen));
}

Tensor Autoencoder::encode_mean(const Tensor& image) {
  return to_latents(encode_distribution(image).mean);
}

Tensor Autoencoder::decode_z(const Tensor& z) {
  TITAN_CHECK(z.dim() == 4 && z.size(1) == args_.latent_channels, "autoencoder: expected latents [N, ",
              args_.latent_channels, ", h, w], got ", z.desc());
  return (*decoder)(post_quant_conv ? (*post_quant_conv)(z) : z);
}

Tensor Autoencoder::decode(const Tensor& latents) {
  return decode_z(latents / args_.scaling_factor + args_.shift_factor);
}

}  // namespace titan::models::autoencoder
