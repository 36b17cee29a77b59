#pragma once
// The FLUX transformer on disk (models/flux/state_dict_adapter.h):
//   a diffusers folder (FLUX.1-dev's transformer/): config.json + diffusion_pytorch_model.safetensors
//     (or its sharded index);
//   BFL's single file flux1-*.safetensors, which has no config: the caller says which model it holds.
// Loads check every tensor's name and shape before copying any (an error names each tensor at fault
// with the file's shape and the expected one) and cast to the model's dtype.
#include <filesystem>
#include <memory>

#include "titan/models/flux/model.h"

namespace titan::train::flux {

// The model described by dir/config.json, with dir's weights; `patch_size` is the pipeline's
// packing, which diffusers' config does not hold (models/flux/state_dict_adapter.h).
std::shared_ptr<models::flux::FluxTransformer> load_transformer_folder(const std::filesystem::path& dir,
                                                                       TensorOptions opts = {},
                                                                       int64_t patch_size = 2);
// `model` as a diffusers folder from_pretrained reads, its tensors in `dtype` (f32 or bf16).
void save_transformer_folder(const std::filesystem::path& dir, const models::flux::FluxTransformer& model,
                             DType dtype = kF32);

// BFL's single file holding the model `args` describes.
std::shared_ptr<models::flux::FluxTransformer> load_bfl_transformer(const std::filesystem::path& file,
                                                                    const models::flux::FluxModelArgs& args,
                                                                    TensorOptions opts = {});
// `model` by BFL's names, in `dtype`; written to a temporary file, synced, then renamed onto `file`.
void save_bfl_transformer(const std::filesystem::path& file, const models::flux::FluxTransformer& model,
                          DType dtype = kF32);

}  // namespace titan::train::flux
