#pragma once
// The [model] section, and the [attention] and [moe] sections a model family is built with.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "titan/attention/attention_config.h"
#include "titan/core/config_schema.h"
#include "titan/nn/moe/moe_config.h"

namespace titan::models {

struct ModelConfig {
  std::string name = "llama3";       // the family in the registry
  std::string flavor = "debugmodel";  // its size preset
  std::string attention = "splash";  // "splash" | "reference"
  int64_t vocab_size = 0;            // 0: the flavor's own; else overrides it (e.g. a tokenizer's size)
  int64_t n_layers = 0;              // 0: the flavor's own; else overrides its depth
  std::optional<bool> weight_tying = std::nullopt;  // unset: the flavor's own; only families that can tie
  std::string tokenizer_path = {};   // empty: the byte tokenizer
  // The hf family's model: a Hugging Face config.json, or a folder holding one. Empty: the
  // folder of checkpoint.initial_load_path (train/config/job_config.cpp fills it in).
  std::string hf_config = {};
  // The config.json itself when it came from no file of its own (an import's, a checkpoint's);
  // not a key. Read instead of hf_config when set.
  nlohmann::json hf_json = nullptr;
  // Their own sections, kept here because a family is built from them with the rest.
  attention::AttentionConfig attn = {};
  nn::moe::MoeConfig moe = {};
};

// The [model] keys; [attention] and [moe] are the keys of `attn` and `moe`.
void declare_keys(config::Keys<ModelConfig>& keys);

// Refuses [moe] keys set for `model` (family/flavor), which has no experts for them to act on.
void check_no_moe_keys(const ModelConfig& cfg, const std::string& model);

}  // namespace titan::models
