#include "titan/models/flux/model_args.h"

#include <map>
#include <numeric>
#include <sstream>

#include "titan/core/error.h"
#include "titan/models/model_summary.h"

namespace titan::models::flux {

void FluxModelArgs::validate() const {
  TITAN_CHECK(in_channels > 0 && vec_in_dim > 0 && context_in_dim > 0 && hidden_size > 0,
              "flux: in_channels, vec_in_dim, context_in_dim and hidden_size must be positive, got ",
              in_channels, ", ", vec_in_dim, ", ", context_in_dim, ", ", hidden_size);
  TITAN_CHECK(num_heads > 0 && hidden_size % num_heads == 0, "flux: hidden_size ", hidden_size,
              " must be a multiple of num_heads ", num_heads);
  TITAN_CHECK(mlp_hidden_dim() > 0, "flux: mlp_ratio ", mlp_ratio, " gives an empty MLP");
  TITAN_CHECK(depth >= 0 && depth_single_blocks >= 0, "flux: block counts must not be negative, got depth ",
              depth, " and depth_single_blocks ", depth_single_blocks);
  int64_t axes = 0;
  for (size_t i = 0; i < axes_dim.size(); ++i) {
    TITAN_CHECK(axes_dim[i] > 0 && axes_dim[i] % 2 == 0, "flux: axes_dim[", i, "] = ", axes_dim[i],
                " must be positive and even (RoPE rotates pairs)");
    axes += axes_dim[i];
  }
  TITAN_CHECK(axes == head_dim(), "flux: axes_dim sums to ", axes,
              " but the head width hidden_size / num_heads is ", head_dim(),
              "; the RoPE axes must cover each head exactly");
  TITAN_CHECK(theta > 0, "flux: theta must be positive, got ", theta);
  TITAN_CHECK(
      patch_size > 0 && latent_channels > 0 && in_channels == latent_channels * patch_size * patch_size,
      "flux: in_channels ", in_channels, " must be latent_channels ", latent_channels, " x patch_size^2 (",
      patch_size, "^2): the packed token holds each latent channel's patch");
}

namespace {

std::map<std::string, FluxModelArgs> make_flavors() {
  std::map<std::string, FluxModelArgs> f;
  f["flux-schnell"] = FluxModelArgs{};
  FluxModelArgs dev;
  dev.guidance_embed = true;
  f["flux-dev"] = dev;
  FluxModelArgs debug;
  debug.hidden_size = 1536;
  debug.num_heads = 12;
  debug.depth = 2;
  debug.depth_single_blocks = 2;
  f["flux-debug"] = debug;
  FluxModelArgs tiny;
  tiny.in_channels = 16;
  tiny.vec_in_dim = 32;
  tiny.context_in_dim = 64;
  tiny.hidden_size = 128;
  tiny.num_heads = 4;
  tiny.depth = 2;
  tiny.depth_single_blocks = 2;
  tiny.axes_dim = {8, 12, 12};
  tiny.latent_channels = 4;
  f["flux-tiny"] = tiny;
  for (const auto& [name, args] : f) args.validate();
  return f;
}

const std::map<std::string, FluxModelArgs>& flavors() {
  static const std::map<std::string, FluxModelArgs> f = make_flavors();
  return f;
}

}  // namespace

const FluxModelArgs& flux_flavor(const std::string& name) {
  const auto it = flavors().find(name);
  if (it == flavors().end()) {
    std::string known;
    for (const std::string& n : flux_flavors()) known += (known.empty() ? "" : ", ") + n;
    TITAN_CHECK(false, "flux: unknown flavor '", name, "'; known: ", known);
  }
  return it->second;
}

std::vector<std::string> flux_flavors() {
  std::vector<std::string> names;
  for (const auto& [name, args] : flavors()) names.push_back(name);
  return names;
}

FluxSummary flux_summary(const FluxModelArgs& a, int64_t img_tokens, int64_t txt_tokens) {
  a.validate();
  TITAN_CHECK(img_tokens > 0 && txt_tokens >= 0,
              "flux summary: expected img_tokens > 0 and txt_tokens >= 0, got ", img_tokens, " and ",
              txt_tokens);
  const int64_t h = a.hidden_size, m = a.mlp_hidden_dim(), hd = a.head_dim();
  auto linear = [](int64_t in, int64_t out) { return in * out + out; };
  const int64_t mlp_embedder = linear(256, h) + linear(h, h);
  // Per stream of a double block: modulation (6h), qkv, Q/K norm scales, proj, MLP.
  const int64_t stream =
      linear(h, 6 * h) + linear(h, 3 * h) + 2 * hd + linear(h, h) + linear(h, m) + linear(m, h);
  const int64_t single = linear(h, 3 * h + m) + linear(h + m, h) + 2 * hd + linear(h, 3 * h);
  const int64_t final_layer = linear(h, 2 * h) + linear(h, a.in_channels);
  const int64_t vec_in = linear(a.vec_in_dim, h) + linear(h, h);
  const int64_t guidance = a.guidance_embed ? mlp_embedder : 0;
  const int64_t img_in = linear(a.in_channels, h), txt_in = linear(a.context_in_dim, h);

  FluxSummary s;
  s.num_params = img_in + txt_in + mlp_embedder + vec_in + guidance + a.depth * 2 * stream +
                 a.depth_single_blocks * single + final_layer;
  const double L = static_cast<double>(img_tokens + txt_tokens);
  const double I = static_cast<double>(img_tokens), T = static_cast<double>(txt_tokens);
  // Modulation linears and the embedders act on one vector per sample, not per token.
  const double per_sample =
      static_cast<double>(mlp_embedder + vec_in + guidance + a.depth * 2 * linear(h, 6 * h) +
                          a.depth_single_blocks * linear(h, 3 * h) + linear(h, 2 * h));
  const double stream_tokens = static_cast<double>(stream - linear(h, 6 * h));
  const double single_tokens = static_cast<double>(single - linear(h, 3 * h));
  const double matmul_params_tokens = static_cast<double>(img_in) * I + static_cast<double>(txt_in) * T +
                                      static_cast<double>(a.depth) * stream_tokens * (I + T) +
                                      static_cast<double>(a.depth_single_blocks) * single_tokens * L +
                                      static_cast<double>(linear(h, a.in_channels)) * I + per_sample;
  const double attention =
      12.0 * static_cast<double>(a.depth + a.depth_single_blocks) * static_cast<double>(h) * L * L;
  s.flops_per_sample = 6.0 * matmul_params_tokens + attention;
  std::ostringstream d;
  d << "hidden " << h << ", " << a.num_heads << " heads x " << hd << ", " << a.depth << " double + "
    << a.depth_single_blocks << " single blocks, mlp " << m << (a.guidance_embed ? ", guidance" : "") << ", "
    << fmt_count(static_cast<double>(s.num_params)) << " parameters";
  s.description = d.str();
  return s;
}

}  // namespace titan::models::flux
