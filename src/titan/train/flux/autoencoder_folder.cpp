#include "titan/train/flux/autoencoder_folder.h"

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/autoencoder/state_dict_adapter.h"
#include "titan/train/flux/weight_cast.h"

namespace titan::train::flux {

namespace fs = std::filesystem;
namespace ae = models::autoencoder;

std::shared_ptr<ae::Autoencoder> load_autoencoder_folder(const fs::path& dir, TensorOptions opts) {
  const checkpoint::HfReader reader(dir, checkpoint::kDiffusersWeightsFile);
  const ae::ModelArgs args = ae::parse_diffusers_config(reader.config(), reader.config_path().string());
  const nn::StateDict state = reader.load(ae::shapes(args), opts.dtype);
  auto model = std::make_shared<ae::Autoencoder>(args, opts);
  model->load_state_dict(state);
  return model;
}

void save_autoencoder_folder(const fs::path& dir, const ae::Autoencoder& model, DType dtype) {
  checkpoint::save_hf(dir, ae::to_diffusers_config(model.args()), model.state_dict(), dtype, {},
                      checkpoint::kDiffusersWeightsFile);
}

std::shared_ptr<ae::Autoencoder> load_bfl_autoencoder(const fs::path& file, const ae::ModelArgs& args,
                                                      TensorOptions opts) {
  const checkpoint::SafetensorsFile f = checkpoint::read_safetensors(file.string());
  nn::StateDict ours;
  try {
    ours = ae::from_bfl(cast_weights(f.tensors, opts.dtype, file.string()), args);
  } catch (const Error& e) {
    TITAN_CHECK(false, file.string(), ": ", e.what());
  }
  auto model = std::make_shared<ae::Autoencoder>(args, opts);
  model->load_state_dict(ours);
  return model;
}

void save_bfl_autoencoder(const fs::path& file, const ae::Autoencoder& model, DType dtype) {
  const std::map<std::string, Tensor> tensors =
      cast_weights(ae::to_bfl(model.state_dict(), model.args()), dtype, file.string());
  const fs::path staged = fs::path(file.string() + ".partial");
  checkpoint::write_safetensors(staged.string(), tensors, {{"format", "pt"}}, /*durable=*/true);
  fs::rename(staged, file);
}

}  // namespace titan::train::flux
