// A Hugging Face config.json, read as `titan convert` and checkpoint.initial_load_path import a
// model folder: the [model] keys it describes, its tensors' shapes, and the config.json an export
// of the import writes, in both layouts. The folder's model.safetensors is empty: the weights are
// the index target's business.
//
// The family's adapter functions are called as its train spec's state dict adapter calls them,
// not through the registry: the registry links the models' kernels, which clang 14 (the fuzz
// build's compiler) cannot compile (splash.cpp), and the parsing is all in the adapters.
#include "fuzz_input.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/models/llama3/state_dict_adapter.h"
#include "titan/models/qwen3/state_dict_adapter.h"

namespace {

using namespace titan;
using models::common::hf::ConfigLayout;
using nlohmann::json;

constexpr ConfigLayout kLayouts[] = {ConfigLayout::transformers4, ConfigLayout::transformers5};

void read_llama3(const json& config) {
  namespace llama3 = models::llama3;
  llama3::matching_flavor(llama3::parse_hf_config(config));
  llama3::hf_shapes(llama3::parse_hf_config(config));
  for (ConfigLayout layout : kLayouts) llama3::imported_hf_config(config, layout);
}

void read_qwen3(models::qwen3::Family family, const json& config) {
  namespace qwen3 = models::qwen3;
  const qwen3::ModelArgs args = qwen3::parse_hf_config(family, config);
  qwen3::matching_flavor(family, args, models::common::hf::layout_of(config));
  qwen3::hf_shapes(args);
  for (ConfigLayout layout : kLayouts) qwen3::imported_hf_config(family, config, layout);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::fs::path dir = fuzz::fresh_dir("hf");
  fuzz::write_file(dir / checkpoint::kHfConfigFile, {reinterpret_cast<const char*>(data), size});
  fuzz::write_file(dir / checkpoint::kHfWeightsFile, std::string_view("\x02\0\0\0\0\0\0\0{}", 10));
  return fuzz::accepting_titan_errors([&] {
    const checkpoint::HfReader reader(dir);
    const json& config = reader.config();
    // The registry's choice of family (train_spec_for_hf), which refuses the other model_types.
    const json type = config.value("model_type", json());
    if (type == "llama") read_llama3(config);
    if (type == "qwen3") read_qwen3(models::qwen3::Family::dense, config);
    if (type == "qwen3_moe") read_qwen3(models::qwen3::Family::moe, config);
  });
}
