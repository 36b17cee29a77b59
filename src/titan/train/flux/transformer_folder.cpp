#include "titan/train/flux/transformer_folder.h"

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/flux/state_dict_adapter.h"
#include "titan/train/flux/weight_cast.h"

namespace titan::train::flux {

namespace fs = std::filesystem;
namespace fm = models::flux;

std::shared_ptr<fm::FluxTransformer> load_transformer_folder(const fs::path& dir, TensorOptions opts,
                                                             int64_t patch_size) {
  const checkpoint::HfReader reader(dir, checkpoint::kDiffusersWeightsFile);
  const fm::FluxModelArgs args =
      fm::parse_diffusers_config(reader.config(), reader.config_path().string(), patch_size);
  const nn::StateDict diffusers = reader.load(fm::diffusers_shapes(args), opts.dtype);
  auto model = std::make_shared<fm::FluxTransformer>(args, opts);
  model->load_state_dict(fm::from_diffusers(diffusers, args));
  return model;
}

void save_transformer_folder(const fs::path& dir, const fm::FluxTransformer& model, DType dtype) {
  checkpoint::save_hf(dir, fm::to_diffusers_config(model.args()),
                      fm::to_diffusers(model.state_dict(), model.args()), dtype, {},
                      checkpoint::kDiffusersWeightsFile);
}

std::shared_ptr<fm::FluxTransformer> load_bfl_transformer(const fs::path& file, const fm::FluxModelArgs& args,
                                                          TensorOptions opts) {
  const checkpoint::SafetensorsFile f = checkpoint::read_safetensors(file.string());
  nn::StateDict ours;
  try {
    ours = fm::from_bfl(cast_weights(f.tensors, opts.dtype, file.string()), args);
  } catch (const Error& e) {
    TITAN_CHECK(false, file.string(), ": ", e.what());
  }
  auto model = std::make_shared<fm::FluxTransformer>(args, opts);
  model->load_state_dict(ours);
  return model;
}

void save_bfl_transformer(const fs::path& file, const fm::FluxTransformer& model, DType dtype) {
  const std::map<std::string, Tensor> tensors = cast_weights(model.state_dict(), dtype, file.string());
  const fs::path staged = fs::path(file.string() + ".partial");
  checkpoint::write_safetensors(staged.string(), tensors, {{"format", "pt"}}, /*durable=*/true);
  fs::rename(staged, file);
}

}  // namespace titan::train::flux
