#pragma once
// The job config: everything a training run is told, read from a TOML file and then
// `--section.key=value` overrides, as TorchTitan's JobConfig (same section and key names, same
// defaults where they make sense on our machines).
//
// Each section's struct, defaults, help and checks live beside the component that reads it
// (core/config_schema.h says how); this file composes them into the job's sections and adds the
// checks across sections. `JobConfig{}` is the default config.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "titan/core/config_schema.h"
#include "titan/data/dataset_config.h"
#include "titan/data/sft_config.h"
#include "titan/dist/dist_config.h"
#include "titan/models/model_config.h"
#include "titan/optim/optim_config.h"
#include "titan/parallel/activation_checkpoint_config.h"
#include "titan/train/config/checkpoint_config.h"
#include "titan/train/config/compile_config.h"
#include "titan/train/config/flux_config.h"
#include "titan/train/config/grpo_config.h"
#include "titan/train/config/metrics_config.h"
#include "titan/train/config/profiling_config.h"
#include "titan/train/config/training_config.h"
#include "titan/train/config/validation_config.h"

namespace titan::train {

// The [job] section.
struct JobSection {
  std::string dump_folder = "./outputs";
  std::string description = "default job";
};
void declare_keys(config::Keys<JobSection>& keys);

struct JobConfig {
  JobSection job;
  models::ModelConfig model;  // [model]; its attn and moe members are [attention] and [moe]
  optim::OptimizerConfig optimizer;
  optim::LrSchedulerConfig lr_scheduler;
  data::DatasetConfig data;  // [training]'s data keys
  TrainingConfig training;
  dist::ParallelismConfig parallelism;
  dist::CommConfig comm;
  CheckpointConfig checkpoint;
  parallel::ActivationCheckpointConfig activation_checkpoint;
  CompileConfig compile;
  MetricsConfig metrics;
  ProfilingConfig profiling;
  ValidationConfig validation;
  data::SftConfig sft;  // read when training.objective = "sft"
  GrpoConfig grpo;
  FluxConfig flux;  // read when model.name = "flux"
};

// Reads `toml_path`, applies `overrides` (command-line words: "--section.key=value", or
// "--section.key" "value"; a bool key alone means true; "none" unsets an optional key), then
// validates. Every problem found is reported in one titan::Error, each naming the key, where it
// was set (file:line or the override) and what is allowed; unknown keys come with the closest
// valid one. The file must name model.name.
JobConfig load_job_config(const std::string& toml_path, const std::vector<std::string>& overrides = {});
// The same from TOML text; `source_name` stands for the file in messages.
JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {});

// Checks every key against its allowed values and the keys against each other; throws listing
// all violations. load_job_config calls it; call it again after changing a config in code.
void validate(const JobConfig& cfg);

// The config as TOML, every key with its help as a comment (unset optional keys as comments).
// parse_job_config(to_toml(cfg), ...) gives back cfg.
std::string to_toml(const JobConfig& cfg);
// {"section": {"key": value}}, unset optional keys as null.
nlohmann::json to_json(const JobConfig& cfg);
// The config back from to_json's form (a checkpoint keeps it so), checked as a file is: unknown
// keys are errors, absent keys take their defaults, null leaves an optional key unset.
// `source_name` stands for the JSON in messages.
JobConfig job_config_from_json(const nlohmann::json& j, const std::string& source_name);

// "section.key" for every key, in declaration order.
std::vector<std::string> config_keys();

// The schema itself: each key's rule and where its value lives (tests walk every key).
const config::Schema<JobConfig>& job_config_schema();

}  // namespace titan::train
