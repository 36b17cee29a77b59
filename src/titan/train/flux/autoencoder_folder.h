#pragma once
// FLUX's autoencoder on disk, in its two published forms (models/autoencoder/state_dict_adapter.h):
//   a diffusers folder (FLUX.1-dev's vae/): config.json + diffusion_pytorch_model.safetensors;
//   BFL's single file ae.safetensors, which has no config: the caller says which model it holds.
// Loads check every tensor's name and shape before copying any (an error names each tensor at
// fault with the file's shape and the expected one) and cast to the model's dtype.
#include <filesystem>
#include <memory>

#include "titan/models/autoencoder/model.h"

namespace titan::train::flux {

// The model described by dir/config.json, with dir's weights.
std::shared_ptr<models::autoencoder::Autoencoder> load_autoencoder_folder(const std::filesystem::path& dir,
                                                                          TensorOptions opts = {});
// `model` as a diffusers folder from_pretrained reads, its tensors in `dtype` (f32 or bf16);
// written atomically (a staging folder renamed onto `dir`).
void save_autoencoder_folder(const std::filesystem::path& dir, const models::autoencoder::Autoencoder& model,
                             DType dtype = kF32);

// BFL's ae.safetensors holding the model `args` describes (FLUX's by default).
std::shared_ptr<models::autoencoder::Autoencoder> load_bfl_autoencoder(
    const std::filesystem::path& file,
    const models::autoencoder::ModelArgs& args = models::autoencoder::flavor("flux"),
    TensorOptions opts = {});
// `model` by BFL's names, in `dtype`; written to a temporary file, synced, then renamed onto `file`.
void save_bfl_autoencoder(const std::filesystem::path& file, const models::autoencoder::Autoencoder& model,
                          DType dtype = kF32);

}  // namespace titan::train::flux
