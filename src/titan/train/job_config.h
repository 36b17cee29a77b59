#pragma once
// The job config: everything a training run is told, read from a TOML file and then
// `--section.key=value` overrides, as TorchTitan's JobConfig (same section and key names, same
// defaults where they make sense on our machines).
//
// Every key is defined once, in the table in job_config.cpp (section, key, member, allowed
// values, help); parsing, overrides, validation, printing and the list of valid keys all derive
// from it. Defaults live in the member initialisers below, so `JobConfig{}` is the default config.
// A key added here without a table entry cannot be set from a file; one added to the table is
// parsed, checked and printed with no further code.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "titan/models/registry.h"
#include "titan/optim/lr_scheduler.h"

namespace titan::train {

struct JobConfig {
  struct Job {
    std::string dump_folder = "./outputs";
    std::string description = "default job";
  };

  // The registry's ModelConfig, so that a model family is built from cfg.model as it is.
  struct Model : models::ModelConfig {
    std::string tokenizer_path;  // empty: the byte tokenizer tokenizer
  };

  struct Optimizer {
    std::string name = "AdamW";
    double lr = 8e-4;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
  };

  struct LrScheduler {
    int64_t warmup_steps = 200;
    // Unset: decay over every step after warmup. Set: stay at the peak, then decay over the
    // last decay_ratio of the steps (warmup-stable-decay).
    std::optional<double> decay_ratio;
    std::string decay_type = "linear";
    double min_lr_factor = 0.0;
  };

  struct Training {
    std::string dataset = "kjv";
    std::string dataset_path;
    std::string dataset_field = "text";
    std::string dataset_split = "blank_line";
    std::string bad_data = "error";
    int64_t local_batch_size = 8;
    // -1: local_batch_size x data-parallel degree x gradient_accumulation_steps.
    int64_t global_batch_size = -1;
    // Unset: 1, or global_batch_size / (local_batch_size x data-parallel degree) when that is set.
    std::optional<int64_t> gradient_accumulation_steps;
    int64_t seq_len = 2048;
    int64_t steps = 10000;
    double max_norm = 1.0;
    std::string mixed_precision_param = "float32";
    int64_t seed = 0;
    bool deterministic = false;
  };

  struct Parallelism {
    int64_t data_parallel_replicate_degree = 1;
    int64_t data_parallel_shard_degree = -1;  // -1: the ranks the other degrees leave
    std::string fsdp_reshard_after_forward = "default";
    int64_t tensor_parallel_degree = 1;
    int64_t pipeline_parallel_degree = 1;
    std::string pipeline_parallel_schedule = "1F1B";
    int64_t pipeline_parallel_microbatch_size = 1;
    int64_t context_parallel_degree = 1;
    int64_t expert_parallel_degree = 1;
  };

  struct Comm {
    // A collective that has not completed after this long fails, naming the ranks that did not
    // answer, instead of hanging.
    double timeout_seconds = 300;
  };

  struct Checkpoint {
    bool enable = false;
    std::string folder = "checkpoint";  // under job.dump_folder
    int64_t interval = 500;
    std::string initial_load_path;
    bool initial_load_model_only = true;
    bool last_save_model_only = true;
    bool last_save_in_hf = false;
    // config.json's layout in that export: "transformers5" or "transformers4".
    std::string hf_config_format = "transformers5";
    std::string export_dtype = "float32";
    std::string async_mode = "disabled";
    int64_t keep_latest_k = 0;  // 0: keep all
    int64_t load_step = -1;     // -1: the latest
  };

  struct ActivationCheckpoint {
    std::string mode = "none";
    std::string selective_ac_option = "2";  // TorchTitan's spelling: a layer interval, as a string
  };

  struct Compile {
    bool enable = false;
    std::string mode = "graph";
    // What the step runs as: `mode` when enabled, else eager.
    std::string execution_mode() const { return enable ? mode : "eager"; }
  };

  struct Metrics {
    int64_t log_freq = 10;
    bool enable_tensorboard = false;
    std::string save_tb_folder = "tb";
    bool enable_jsonl = true;
    bool save_for_all_ranks = false;
    bool disable_color_printing = false;
    double peak_flops = 0;  // per device, for MFU; 0: measured on this machine
  };

  struct Profiling {
    bool enable_profiling = false;
    std::string save_traces_folder = "profile_traces";
    int64_t profile_freq = 10;
    bool enable_memory_snapshot = false;
    std::string save_memory_snapshot_folder = "memory_snapshot";
  };

  Job job;
  Model model;
  Optimizer optimizer;
  LrScheduler lr_scheduler;
  Training training;
  Parallelism parallelism;
  Comm comm;
  Checkpoint checkpoint;
  ActivationCheckpoint activation_checkpoint;
  Compile compile;
  Metrics metrics;
  Profiling profiling;
};

// Reads `toml_path`, applies `overrides` (command-line words: "--section.key=value", or
// "--section.key" "value"; a bool key alone means true; "none" unsets an optional key), then
// validates. Every problem found is reported in one titan::Error, each naming the key, where it
// was set (file:line or the override) and what is allowed; unknown keys come with the closest
// valid one.
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

// "section.key" for every key, in table order.
std::vector<std::string> config_keys();

// How each optimizer step's batch splits over `dp_degree` data-parallel ranks (dp_replicate x
// dp_shard once the mesh is resolved): every rank runs gradient_accumulation_steps micro-batches
// of training.local_batch_size.
struct BatchPlan {
  int64_t global_batch_size = 0;
  int64_t gradient_accumulation_steps = 1;
};
BatchPlan plan_batches(const JobConfig& cfg, int64_t dp_degree);

// The [lr_scheduler] section over training.steps, for optim::LrScheduler.
optim::LrSchedule lr_schedule(const JobConfig& cfg);

// k of activation_checkpoint.selective_ac_option: checkpoint every k-th layer.
int64_t selective_ac_layer_interval(const JobConfig::ActivationCheckpoint& ac);

}  // namespace titan::train
