#include "titan/rl/saved_model.h"

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/core/json_fields.h"
#include "titan/data/tokenizer_files.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/hf_interop.h"
#include "titan/train/config/job_config.h"

namespace titan::rl {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The model of `file_config` (a config.json; `where` names it in errors), saved in `dir`.
SavedModel from_hf_config(const fs::path& dir, const json& file_config, const std::string& where,
                          const std::string& family = "") {
  const models::StateDictAdapter& adapter =
      *models::train_spec_for_hf(file_config, where, family).state_dict_adapter;
  SavedModel s;
  s.dir = dir;
  json config;
  try {
    // As convert imports it, so that a folder and its conversion build the same model: the
    // family's defaults filled in for absent keys (max_position_embeddings among them).
    config = adapter.imported_hf_config(file_config, models::common::hf::ConfigLayout::transformers5);
    s.config = adapter.from_hf_config(config);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  const json context = config.value("max_position_embeddings", json());
  TITAN_CHECK(context.is_number_integer() && context.get<int64_t>() > 0, where,
              ": max_position_embeddings, the model's context, should be a positive integer, found ",
              context.dump(), "; set it in the config.json");
  s.context = context.get<int64_t>();
  if (data::holds_tokenizer(dir)) s.tokenizer_path = dir.string();
  const json_fields::JsonPath at{where, ""};
  const json& eos = json_fields::optional_member(file_config, "eos_token_id", at);
  const int64_t max_id = s.config.vocab_size - 1;
  if (eos.is_array()) {
    for (size_t i = 0; i < eos.size(); ++i)
      s.eos_ids.push_back(json_fields::as_integer(eos[i], (at / "eos_token_id")[i], 0, max_id));
  } else if (!eos.is_null()) {
    s.eos_ids.push_back(json_fields::as_integer(eos, at / "eos_token_id", 0, max_id));
  }
  return s;
}

}  // namespace

fs::path resolve_checkpoint(const fs::path& path) {
  TITAN_CHECK(fs::exists(path), "checkpoint ", path.string(),
              " does not exist; pass a checkpoint folder (job.dump_folder/checkpoint.folder of a run with "
              "checkpoint.enable = true), one of its step-<N> folders, or a Hugging Face model folder");
  if (fs::exists(path / checkpoint::kMetadataFile) || checkpoint::is_hf_dir(path)) return path;
  TITAN_CHECK(
      fs::is_directory(path), "checkpoint ", path.string(),
      " is a file; pass a checkpoint folder, one of its step-<N> folders, or a Hugging Face model folder");
  const auto found = train::CheckpointManager::list(path);
  TITAN_CHECK(!found.empty(), "checkpoint folder ", path.string(),
              " holds no complete checkpoint (a step-<N> ", "folder with ", checkpoint::kMetadataFile,
              ") and is no Hugging Face folder (no ", checkpoint::kHfConfigFile,
              "); train with checkpoint.enable = true into it first, or pass another folder");
  return found.rbegin()->second;
}

SavedModel read_saved_model(const fs::path& path) {
  const fs::path dir = resolve_checkpoint(path);
  if (checkpoint::is_hf_dir(dir)) {
    const checkpoint::HfReader reader(dir);
    return from_hf_config(dir, reader.config(), reader.config_path().string());
  }
  const json state = checkpoint::read_metadata(dir).state;
  const std::string where = (dir / checkpoint::kMetadataFile).string();
  if (state.contains("hf_config"))
    return from_hf_config(dir, state["hf_config"], where + " (state.hf_config)",
                          state.value("model_name", std::string()));
  TITAN_CHECK(
      state.contains("config"), "checkpoint ", dir.string(), ": ", where,
      " holds neither a job config (state.config, written by titan train) nor a config.json "
      "(state.hf_config, written by titan convert --to titan), so the model it holds is unknown; pass a "
      "checkpoint of one of them, or a Hugging Face folder");
  const train::JobConfig job = train::job_config_from_json(state["config"], where + " (state.config)");
  return {.dir = dir,
          .config = job.model,
          .context = job.training.seq_len,
          .tokenizer_path = job.model.tokenizer_path};
}

std::shared_ptr<models::CausalLM> load_saved_model(const SavedModel& saved) {
  // Initialised, then overwritten: the registry builds models with their weights set.
  Generator gen(0);
  std::shared_ptr<models::CausalLM> model =
      models::get_train_spec(saved.config.name).build(saved.config, saved.context, gen);
  if (!checkpoint::is_hf_dir(saved.dir)) {
    checkpoint::Reader reader(saved.dir);
    train::CheckpointManager::load_model(reader, *model);
    return model;
  }
  const checkpoint::HfReader reader(saved.dir);
  nn::StateDict state = train::load_hf_state(reader, std::nullopt, saved.config.name);
  for (const auto& [name, t] : model->state_dict()) {
    auto it = state.find(name);
    if (it != state.end()) it->second = it->second.to(t.dtype());
  }
  model->load_state_dict(state);
  return model;
}

}  // namespace titan::rl
