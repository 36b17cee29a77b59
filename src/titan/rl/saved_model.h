#pragma once
// A saved model, rebuilt for inference. Three kinds of folder say which model they hold:
//   - a checkpoint of titan train (full, or a model-only export): the job config in its
//     metadata names the family, flavor and sizes; its context is training.seq_len;
//   - a checkpoint of titan convert --to titan: the config.json it was converted from, kept in
//     its metadata (state.hf_config);
//   - a Hugging Face folder (config.json and safetensors), read as convert reads it.
// The last two take their context from config.json's max_position_embeddings. The weights are
// read in whatever floating dtype they were saved and cast to the model's.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/models/causal_lm.h"
#include "titan/models/registry.h"

namespace titan::rl {

// What a saved model is, read from its metadata or config.json alone: nothing is built yet, so
// a caller can refuse what it cannot use before paying for the weights.
struct SavedModel {
  std::filesystem::path dir;   // the folder read: a step-<N> checkpoint or a Hugging Face folder
  models::ModelConfig config;  // family (name), flavor, vocabulary and the rest of [model]
  int64_t context = 0;         // the model's max_seq_len
  // The tokenizer that goes with it, as data::load_tokenizer takes it ("": the byte tokenizer):
  // the training run's model.tokenizer_path, else `dir` when it holds a tokenizer.json (convert
  // copies an HF folder's). nullopt: none is known.
  std::optional<std::string> tokenizer_path;
  // The ids that end a generation by config.json's eos_token_id (one id or a list, as chat models
  // have); empty for a checkpoint of titan train, whose tokenizer says.
  std::vector<int64_t> eos_ids = {};
};

// `path` itself when it is a checkpoint (holds metadata.json) or a Hugging Face folder (holds
// config.json), else the latest complete checkpoint in the folder `path`. Errors say what was
// found instead.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// Describes the model at resolve_checkpoint(path). Throws when the folder does not say which
// model it holds, naming what it looked for.
SavedModel read_saved_model(const std::filesystem::path& path);

// Builds `saved`'s model (through the model registry) and loads its weights.
std::shared_ptr<models::CausalLM> load_saved_model(const SavedModel& saved);

}  // namespace titan::rl
