#include "titan/models/autoencoder/model_args.h"

#include "titan/core/error.h"

namespace titan::models::autoencoder {

void ModelArgs::validate() const {
  TITAN_CHECK(in_channels > 0 && out_channels > 0 && latent_channels > 0,
              "autoencoder: in_channels, out_channels and latent_channels must be positive, got ",
              in_channels, ", ", out_channels, ", ", latent_channels);
  TITAN_CHECK(!block_out_channels.empty() && block_out_channels.size() <= 16,
              "autoencoder: block_out_channels must list 1 to 16 levels, got ", block_out_channels.size());
  TITAN_CHECK(layers_per_block > 0, "autoencoder: layers_per_block must be positive, got ", layers_per_block);
  TITAN_CHECK(norm_num_groups > 0, "autoencoder: norm_num_groups must be positive, got ", norm_num_groups);
  for (size_t i = 0; i < block_out_channels.size(); ++i)
    TITAN_CHECK(block_out_channels[i] > 0 && block_out_channels[i] % norm_num_groups == 0,
                "autoencoder: block_out_channels[", i, "] = ", block_out_channels[i],
                " must be a positive multiple of norm_num_groups = ", norm_num_groups,
                " (every GroupNorm splits its channels into that many groups)");
  TITAN_CHECK(scaling_factor != 0, "autoencoder: scaling_factor must not be 0 (decoding divides by it)");
}

ModelArgs flavor(const std::string& name) {
  TITAN_CHECK(name == "flux", "autoencoder: unknown flavor '", name, "'; known: flux");
  return ModelArgs{};
}

std::vector<std::string> flavor_names() {
  return {"flux"};
}

}  // namespace titan::models::autoencoder
