#include "titan/train/hf_interop.h"

#include <cstring>

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/problems.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer_files.h"

namespace titan::train {

namespace fs = std::filesystem;
namespace hf = models::common::hf;
using json = nlohmann::json;

namespace {

// Runs an adapter's reading of config.json; its errors name the key, this names the folder.
template <typename F>
auto reading(const checkpoint::HfReader& reader, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error("Hugging Face checkpoint " + reader.dir().string() + ": " + e.what());
  }
}

// Copies the tokenizer files of `from` into a staged folder, so that a crash cannot leave the
// model without the tokenizer it was trained with.
checkpoint::AlsoWrite carry_tokenizer(const fs::path& from) {
  if (from.empty()) return {};
  return [from](const fs::path& stage) { data::copy_tokenizer(from, stage); };
}

// Checkpoint tensors of the model (not the optimizer) are named "model.<name>".
constexpr const char* kModel = "model.";

}  // namespace

void save_hf_model(const fs::path& dir, const models::StateDictAdapter& adapter, const json& config,
                   const nn::StateDict& state, DType dtype, const fs::path& tokenizer_from) {
  nn::StateDict hf = adapter.to_hf(state, config);
  // A folder whose weights contradict its config.json would load nowhere; say so now.
  checkpoint::Problems problems;
  const std::map<std::string, Shape> expected = adapter.hf_shapes(config);
  for (const auto& [name, shape] : expected) {
    auto it = hf.find(name);
    if (it == hf.end())
      problems.add("missing tensor '" + name + "' " + shape_str(shape));
    else if (it->second.sizes() != shape)
      problems.add("tensor '" + name + "' is " + it->second.desc() + ", config.json says " +
                   shape_str(shape));
  }
  for (const auto& [name, t] : hf)
    if (!expected.count(name)) problems.add("unexpected tensor '" + name + "' " + t.desc());
  TITAN_CHECK(problems.empty(), "Hugging Face export to ", dir.string(),
              ": the weights do not fit the model config.json describes:", problems.str());
  json written = config;
  written[hf::kDtypeKey.in(hf::layout_of(config))] = checkpoint::torch_dtype_name(dtype);
  checkpoint::save_hf(dir, written, hf, dtype, carry_tokenizer(tokenizer_from));
}

const models::TrainSpec& hf_family(const checkpoint::HfReader& reader, const std::string& preferred) {
  return models::train_spec_for_hf(reader.config(), reader.config_path().string(), preferred);
}

models::ModelConfig hf_model_config(const checkpoint::HfReader& reader, const std::string& preferred) {
  const models::StateDictAdapter& adapter = *hf_family(reader, preferred).state_dict_adapter;
  return reading(reader, [&] { return adapter.from_hf_config(reader.config()); });
}

nn::StateDict load_hf_state(const checkpoint::HfReader& reader, std::optional<DType> dtype,
                            const std::string& preferred) {
  const models::StateDictAdapter& adapter = *hf_family(reader, preferred).state_dict_adapter;
  std::map<std::string, Shape> expected = reading(reader, [&] { return adapter.hf_shapes(reader.config()); });
  // A tied model's folder may still store lm_head.weight (some save_pretrained versions write both
  // names): taken when it is the embedding's copy, refused when it is not.
  constexpr const char* kLmHead = "lm_head.weight";
  constexpr const char* kEmbedding = "model.embed_tokens.weight";
  const bool tied_copy = !expected.count(kLmHead) && expected.count(kEmbedding) && reader.holds(kLmHead) &&
                         reader.config().value("tie_word_embeddings", false);
  if (tied_copy) expected[kLmHead] = expected.at(kEmbedding);
  std::map<std::string, Tensor> hf = reader.load(expected, dtype);
  if (tied_copy) {
    const Tensor head = hf.at(kLmHead).contiguous(), embedding = hf.at(kEmbedding).contiguous();
    TITAN_CHECK(head.dtype() == embedding.dtype() &&
                    std::memcmp(head.data_ptr(), embedding.data_ptr(), head.nbytes()) == 0,
                "Hugging Face checkpoint ", reader.dir().string(),
                ": config.json says tie_word_embeddings = true, but its lm_head.weight differs from "
                "model.embed_tokens.weight; a tied model has one matrix. Set tie_word_embeddings to false in ",
                reader.config_path().string(), " if the two are meant to differ");
    hf.erase(kLmHead);
  }
  return adapter.from_hf(hf, reader.config());
}

void export_hf_checkpoint(const fs::path& step_dir, const fs::path& out, DType dtype,
                          hf::ConfigLayout layout) {
  checkpoint::Reader reader(step_dir);
  const json& state = reader.metadata().state;
  const std::string where = (step_dir / checkpoint::kMetadataFile).string();
  const models::TrainSpec* family = nullptr;
  json config;
  if (state.contains("hf_config")) {
    family = &models::train_spec_for_hf(state["hf_config"], where + " (state.hf_config)",
                                        state.value("model_name", std::string()));
    config = family->state_dict_adapter->imported_hf_config(state["hf_config"], layout);
  } else {
    models::ModelConfig m;
    try {
      const json& section = state.at("config").at("model");
      m.name = section.at("name").get<std::string>();
      m.flavor = section.at("flavor").get<std::string>();
      m.vocab_size = section.value("vocab_size", int64_t{0});
      m.n_layers = section.value("n_layers", int64_t{0});
      m.hf_config = section.value("hf_config", std::string());
      // Unset (null) means the flavor's own choice.
      if (section.contains("weight_tying") && !section["weight_tying"].is_null())
        m.weight_tying = section["weight_tying"].get<bool>();
      // [moe]: the balancing loss's coefficient goes into config.json; a model with the expert
      // bias is refused there by name (HF has no place for it).
      const json moe = state.at("config").value("moe", json::object());
      m.moe.aux_loss_coeff = moe.value("aux_loss_coeff", m.moe.aux_loss_coeff);
      m.moe.load_balance_bias = moe.value("load_balance_bias", m.moe.load_balance_bias);
    } catch (const json::exception& e) {
      TITAN_CHECK(false, where,
                  ": the state names no model: neither \"hf_config\" nor the job config's [model] section (",
                  e.what(),
                  "); only checkpoints saved by titan train or titan convert say which model they hold");
    }
    family = &models::get_train_spec(m.name);
    config = models::hf_adapter(m.name).hf_config(m, layout);
  }
  const models::StateDictAdapter& adapter = models::hf_adapter(family->name);
  checkpoint::Pieces targets;
  for (const auto& [name, t] : reader.metadata().tensors)
    if (name.starts_with(kModel))
      targets.emplace(name, checkpoint::whole(Tensor::empty(t.shape, {.dtype = t.dtype})));
  reader.load(targets, {.scope = kModel});
  nn::StateDict weights;
  for (const auto& [name, p] : targets) weights.emplace(name.substr(std::string(kModel).size()), p.data);
  save_hf_model(out, adapter, config, weights, dtype, step_dir);
}

void import_hf_checkpoint(const fs::path& hf_dir, const fs::path& out) {
  checkpoint::HfReader reader(hf_dir);
  checkpoint::Pieces pieces;
  for (const auto& [name, t] : load_hf_state(reader, std::nullopt))
    pieces.emplace(kModel + name, checkpoint::whole(t));
  const models::TrainSpec& family = hf_family(reader);
  const json config = family.state_dict_adapter->imported_hf_config(reader.config(), hf::ConfigLayout::transformers5);
  // The family is kept with the config: where two read its model_type (llama3 and hf), the layouts
  // of their weights differ.
  checkpoint::save(out, pieces,
                   {{"step", 0}, {"model_only", true}, {"hf_config", config}, {"model_name", family.name}},
                   carry_tokenizer(hf_dir));
}

}  // namespace titan::train
