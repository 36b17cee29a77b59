#pragma once
// model.name -> TrainSpec: everything the trainer needs to know about a model family, so that
// train/ never names a model.
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/core/rng.h"
#include "titan/models/causal_lm.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/model_config.h"
#include "titan/models/model_summary.h"
#include "titan/parallel/context_parallel_plan.h"
#include "titan/parallel/expert_parallel.h"
#include "titan/parallel/fully_shard.h"
#include "titan/parallel/pipeline_parallel.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::models {

// How a pipeline splits the model ([parallelism]'s pipeline keys).
struct PipelineOptions {
  std::string schedule = "1F1B";
  int64_t micro_batches = 1;  // per pipeline run: local_batch_size / pipeline_parallel_microbatch_size
  // "layers.<i>" where each stage after the first begins; empty: an even split.
  std::vector<std::string> split_points = {};
};

// How parallelize() spreads and wraps a built model ([activation_checkpoint] and the
// [parallelism] plans).
struct ParallelizeOptions {
  std::string activation_checkpoint_mode = "none";  // "none" | "full" | "selective"
  int64_t activation_checkpoint_every_k = 1;        // selective: every k-th block
  // The job's mesh; FSDP shards over its dp_shard dimension. Null: one process, nothing to shard.
  dist::DeviceMesh* mesh = nullptr;
  parallel::FullyShardOptions fsdp{};
  // Tensor parallelism over mesh[dist::MeshAxis::tp] when its degree exceeds 1; expert parallelism over
  // mesh[dist::MeshAxis::ep] likewise.
  parallel::TensorParallelOptions tp{};
  // Context parallelism over mesh[dist::MeshAxis::cp] when its degree exceeds 1: the training sequences' length
  // and the attention tiles ([attention] block_q, block_kv).
  int64_t seq_len = 0;
  int64_t block_q = attention::kDefaultBlockQ;
  int64_t block_kv = attention::kDefaultBlockKv;
  // Pipeline parallelism over mesh[dist::MeshAxis::pp] when its degree exceeds 1.
  PipelineOptions pipeline{};
};

// What parallelize() leaves the trainer: the context-parallel state when the mesh splits
// sequences, the tensor-parallel state when it splits tensors
// (its loss, placements and gradient reductions), and the FSDP state when it shards them (its
// shards are what the optimizer steps). Either may be null. FSDP is declared last so that it is
// destroyed first: it shards what tensor parallelism has already split.
struct Parallelized {
  // Its batches are sharded by the trainer, which hands it each micro-batch's document ids.
  std::unique_ptr<parallel::ContextParallel> cp;
  std::unique_ptr<parallel::TensorParallel> tp;
  // Its experts' slices and gradient reductions; the trainer feeds its ranks different batches.
  std::unique_ptr<parallel::ExpertParallel> ep;
  // Which stages this rank runs, and the schedule's table.
  std::unique_ptr<parallel::PipelineParallel> pp;
  std::unique_ptr<parallel::FullyShard> fsdp;
};

// How a family's models look to Hugging Face transformers: config.json, parameter names and
// layouts. checkpoint/ reads and writes the HF folders; train/ and apps/ join the two.
struct StateDictAdapter {
  // config.json's "model_type"s that this family reads ("llama"; the hf family's many).
  std::vector<std::string> hf_model_types;
  // config.json (without the dtype, which the writer adds) of the model build() makes from
  // `cfg`, its flavor with the vocab override, in `layout`.
  std::function<nlohmann::json(const ModelConfig& cfg, common::hf::ConfigLayout layout)> hf_config;
  // The [model] keys (name, flavor, vocab_size always set) of the model config.json (either
  // layout) describes. Throws, naming the closest flavor and the keys that differ (as the file
  // names them), when no flavor matches.
  std::function<ModelConfig(const nlohmann::json& config)> from_hf_config;
  // Every tensor of the HF model config.json describes, by HF name. Throws, naming the key,
  // when config.json cannot describe a model of this family (e.g. head counts that do not
  // divide).
  std::function<std::map<std::string, Shape>(const nlohmann::json& config)> hf_shapes;
  // Our state dict -> HF names and layouts, and back, for the model config.json describes. The
  // layouts differ by moving elements only, so a round trip gives bit-identical tensors.
  std::function<nn::StateDict(const nn::StateDict& ours, const nlohmann::json& config)> to_hf;
  std::function<nn::StateDict(const nn::StateDict& hf, const nlohmann::json& config)> from_hf;
  // config.json of the model from_hf makes from a checkpoint of `config` (either layout), which
  // may differ from it (llama3 unties tied embeddings); what an export of that model writes in
  // `layout`: the file's other keys kept, the other layout's removed.
  std::function<nlohmann::json(const nlohmann::json& config, common::hf::ConfigLayout layout)>
      imported_hf_config;
};

struct TrainSpec {
  std::string name;
  std::vector<std::string> flavors;
  // Which of train/'s workloads trains the family (train/workload.h): "language_model", whose
  // model build() makes; "flux", the diffusion transformer (train/flux/flux_workload.h), which
  // leaves build, parallelize and plan_tp empty.
  std::string workload = "language_model";
  // Builds the model on the CPU with weights initialised from `gen` (deterministic per seed);
  // `max_seq_len` sizes position tables. Under a MetaScope (core/meta.h) the parameters are meta
  // and left for parallel::deferred_init, which draws the same values from `gen`.
  std::function<std::shared_ptr<CausalLM>(const ModelConfig&, int64_t max_seq_len, Generator& gen)> build;
  std::function<ModelSummary(const ModelConfig&, int64_t seq_len)> summarize;
  // Applies the parallel plans to a built model, in TorchTitan's order (TP, EP, activation
  // checkpointing, compile, FSDP); the model's code does not change.
  // The trainer's optimizer, gradient reduction and checkpoints then work on what it returns.
  std::function<Parallelized(CausalLM&, const ParallelizeOptions&)> parallelize;
  // The tensor-parallel plan parallelize() applies, stated to any TpStyles: graph mode reads it
  // into shardings (parallel/tp_layout.h). Families without tensor parallelism leave it empty.
  std::function<void(CausalLM&, parallel::TpStyles&)> plan_tp;
  // Hugging Face import and export; families without one leave it empty.
  std::optional<StateDictAdapter> state_dict_adapter;
};

void register_train_spec(TrainSpec spec);
// Registers the families that ship with titan (models/builtin.cpp). Called once, lazily, by
// get_train_spec and registered_models: self-registering static objects would be dropped by the
// linker from a static library.
void register_builtin_models();
// Errors name the unknown model and list the registered ones.
const TrainSpec& get_train_spec(const std::string& name);
std::vector<std::string> registered_models();
// The adapter of family `name`; errors name the families that have one.
const StateDictAdapter& hf_adapter(const std::string& name);
// The family whose adapter reads config.json's "model_type" (`where` names the file in errors).
// Where several do (llama3 and hf read "llama"), `preferred` when it is one of them, else a
// family with flavors whose flavor config.json describes, else the hf family.
const TrainSpec& train_spec_for_hf(const nlohmann::json& config, const std::string& where,
                                   const std::string& preferred = "");

}  // namespace titan::models
