#pragma once
// Hugging Face import and export of a model's weights: a family's state dict adapter (names,
// layouts, config.json; models/) joined to HF folders on disk (checkpoint/hf_checkpoint).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/models/registry.h"
#include "titan/nn/module.h"

namespace titan::train {

// Writes `state` (our names) of the model `config` (its family's config.json, in one layout)
// describes as the HF folder `dir`: config.json, with the dtype under that layout's key, and
// model.safetensors in `dtype` (f32 or bf16), atomically. Throws, writing nothing, when the
// tensors are not exactly those config.json describes. The tokenizer files of `tokenizer_from`
// (when given and it holds one) go into the folder with the weights.
void save_hf_model(const std::filesystem::path& dir, const models::StateDictAdapter& adapter,
                   const nlohmann::json& config, const nn::StateDict& state, DType dtype,
                   const std::filesystem::path& tokenizer_from = {});

// The family that reads the folder's config.json (by its model_type; `preferred` where several
// do, see models::train_spec_for_hf).
const models::TrainSpec& hf_family(const checkpoint::HfReader& reader, const std::string& preferred = "");

// The [model] keys (name, flavor, vocab_size) of the model the folder's config.json describes;
// throws, naming the folder, when it is none of the family's flavors.
models::ModelConfig hf_model_config(const checkpoint::HfReader& reader, const std::string& preferred = "");

// Exactly the tensors the folder's config.json describes (anything missing, extra or misshaped
// is an error naming the tensor and its file), by our names and in our layouts; cast to `dtype`,
// or kept as stored when nullopt.
nn::StateDict load_hf_state(const checkpoint::HfReader& reader, std::optional<DType> dtype,
                            const std::string& preferred = "");

// `titan convert --to hf`: the model of titan checkpoint `step_dir` (its "model.*" tensors; a
// full checkpoint's optimizer state is left out) as the HF folder `out`, its config.json in
// `layout` only. The checkpoint's state says which model it holds: "hf_config" (written by
// import_hf_checkpoint; either layout), else the [model] and [moe] sections of "config" (the
// trainer's). The checkpoint's tokenizer, if it holds one, goes with it.
void export_hf_checkpoint(
    const std::filesystem::path& step_dir, const std::filesystem::path& out, DType dtype,
    models::common::hf::ConfigLayout layout = models::common::hf::ConfigLayout::transformers5);

// `titan convert --to titan`: the HF folder `hf_dir` (config.json in either layout) as a
// model-only titan checkpoint `out` (tensors "model.<our name>" as stored; state {"step": 0,
// "model_only": true, "hf_config": the family's imported_hf_config, in transformers 5's
// layout, "model_name": the family}), which checkpoint.initial_load_path starts training from; with the folder's
// tokenizer, if it holds one.
void import_hf_checkpoint(const std::filesystem::path& hf_dir, const std::filesystem::path& out);

}  // namespace titan::train
