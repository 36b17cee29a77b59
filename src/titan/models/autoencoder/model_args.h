#pragma once
// The KL autoencoder of latent diffusion (diffusers' AutoencoderKL with DownEncoderBlock2D and
// UpDecoderBlock2D blocks, which is also BFL's FLUX autoencoder): its hyperparameters as
// diffusers' config.json names them, and the FLUX flavor.
#include <cstdint>
#include <string>
#include <vector>

namespace titan::models::autoencoder {

struct ModelArgs {
  int64_t in_channels = 3;   // of the image
  int64_t out_channels = 3;  // of the decoded image
  int64_t latent_channels = 16;
  // One level per entry: the channels of its resnets; every level but the last halves H and W.
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  int64_t layers_per_block = 2;  // resnets per encoder level (the decoder has one more)
  int64_t norm_num_groups = 32;
  // latents = (z - shift_factor) * scaling_factor, and back before decoding.
  double scaling_factor = 0.3611;
  double shift_factor = 0.1159;
  // 1x1 convolutions on the moments (quant_conv) and on the latent (post_quant_conv), as Stable
  // Diffusion's autoencoders have; FLUX's has neither.
  bool use_quant_conv = false;
  bool use_post_quant_conv = false;
  bool mid_block_add_attention = true;  // the mid blocks' single-head attention over H * W

  int64_t levels() const { return static_cast<int64_t>(block_out_channels.size()); }
  // H and W of the latent are the image's divided by this.
  int64_t downscale() const { return int64_t{1} << (levels() - 1); }

  // Throws, naming the field, when the sizes cannot make a model (groups not dividing channels...).
  void validate() const;
};

// "flux": BFL's FLUX.1 autoencoder (ch 128, mult (1, 2, 4, 4), 2 resnets per level, 16 latent
// channels, scale 0.3611, shift 0.1159). An unknown name is an error listing the known ones.
ModelArgs flavor(const std::string& name);
std::vector<std::string> flavor_names();

}  // namespace titan::models::autoencoder
