#pragma once
// A model as `titan train` saved it, rebuilt for inference: the job config kept in the
// checkpoint's metadata names the family, flavor and sizes; the weights are its "model." tensors,
// from a full checkpoint or a model-only export, in whatever floating dtype they were saved.
#include <filesystem>
#include <memory>

#include "titan/models/causal_lm.h"
#include "titan/train/job_config.h"

namespace titan::rl {

struct TrainedModel {
  std::filesystem::path dir;  // the checkpoint read (a step-<N> folder)
  train::JobConfig config;    // the job that saved it
  std::shared_ptr<models::CausalLM> model;
};

// `path` itself when it is a checkpoint (holds metadata.json), else the latest complete
// checkpoint in the folder `path`. Errors say what was found instead.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// Builds the model the checkpoint at resolve_checkpoint(path) was trained as (through the model
// registry, max_seq_len = training.seq_len) and loads its weights.
TrainedModel load_trained_model(const std::filesystem::path& path);

}  // namespace titan::rl
