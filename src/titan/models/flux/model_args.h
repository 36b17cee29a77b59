#pragma once
// FLUX.1's transformer (BFL's Flux / diffusers' FluxTransformer2DModel): its hyperparameters, the
// flavors, and the sizes an MFU figure needs.
#include <cstdint>
#include <string>
#include <vector>

namespace titan::models::flux {

struct FluxModelArgs {
  int64_t in_channels = 64;       // latent channels x patch_size^2 (packed token width); output width too
  int64_t vec_in_dim = 768;       // CLIP pooled width
  int64_t context_in_dim = 4096;  // T5 width
  int64_t hidden_size = 3072;
  double mlp_ratio = 4.0;
  int64_t num_heads = 24;
  int64_t depth = 19;  // double-stream blocks
  int64_t depth_single_blocks = 38;
  std::vector<int64_t> axes_dim = {16, 56, 56};  // sums to hidden_size / num_heads
  double theta = 10000;
  bool qkv_bias = true;
  bool guidance_embed = false;  // flux-dev: true
  int64_t patch_size = 2;       // latent pixels per token side (packing); diffusers' tiny test uses 1
  int64_t latent_channels = 16;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t mlp_hidden_dim() const {
    return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio);
  }
  // Throws naming the field when the sizes cannot make a model (axes not summing to the head
  // width, odd axes, in_channels != latent_channels * patch_size^2...).
  void validate() const;
};

// "flux-dev" (guidance_embed), "flux-schnell", "flux-debug" (hidden 1536, 12 heads, 2 + 2 blocks)
// and "flux-tiny" (CPU-trainable: hidden 128, 4 heads x 32 with axes (8, 12, 12), 2 + 2 blocks,
// context 64, vec 32, 4 latent channels, patch 2 so in_channels 16). An unknown name is an error
// listing the known ones.
const FluxModelArgs& flux_flavor(const std::string& name);
std::vector<std::string> flux_flavors();

// Sizes computed from the args alone (flux-dev must work without allocating it).
struct FluxSummary {
  int64_t num_params = 0;
  // Training FLOPs for one sample of img_tokens packed latent tokens and txt_tokens text tokens:
  // 6 x (the parameters every token goes through) x tokens for the matmuls forward + backward, as
  // for the LMs, counting each stream's own weights over its own tokens (img_* over the image,
  // txt_* over the text in the double blocks) and the embedders once per sample, plus
  // 12 x blocks x hidden x (img + txt)^2 for the joint attention's scores and values.
  double flops_per_sample = 0;
  std::string description;  // one line: hidden, heads, blocks, parameters
};
FluxSummary flux_summary(const FluxModelArgs& args, int64_t img_tokens, int64_t txt_tokens);

}  // namespace titan::models::flux
