#include "titan/train/config/job_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"

namespace titan::train {

void declare_keys(config::Keys<JobSection>& keys) {
  keys.add("dump_folder", &JobSection::dump_folder, config::non_empty(),
           "folder for everything the run writes: checkpoints, traces, logs")
      .add("description", &JobSection::description, {},
           "free text, printed at start and stored with the config");
}

namespace {

// What training.objective = "grpo" reads and refuses: its prompts replace the dataset, its own
// held-out accuracy replaces validation, and its update is eager data parallelism (the rollouts
// alone may run in graph mode). Under any other objective a [grpo] key would be read by nothing.
void check_grpo(const JobConfig& c, config::Problems& problems) {
  // Keys compared with their defaults, not looked up among those written: a config written back
  // (to_toml, a checkpoint's copy) carries every key.
  const nlohmann::json ours = to_json(c), defaults = to_json(JobConfig{});
  if (c.training.objective != "grpo") {
    for (const auto& [key, value] : ours.at("grpo").items())
      if (value != defaults.at("grpo").at(key))
        problems.add("grpo." + key + " = " + value.dump() + " is read only under training.objective = \"grpo\", and the objective is \"" +
                     c.training.objective + "\"; remove the key or set the objective");
    return;
  }
  if (c.grpo.prompts_path.empty())
    problems.add("grpo.prompts_path is empty: GRPO needs a JSONL file of prompts, one {\"" + c.grpo.prompt_field +
                 "\": ..., \"" + c.grpo.answer_field + "\": ...} per line");
  for (const char* key : {"dataset", "dataset_path", "dataset_field", "dataset_split"})
    if (ours.at("training").at(key) != defaults.at("training").at(key))
      problems.add("training." + std::string(key) + " = " + ours.at("training").at(key).dump() +
                   " is not read under training.objective = \"grpo\", whose data are grpo.prompts_path's prompts; "
                   "remove it");
  if (c.training.global_batch_size != -1 || c.training.gradient_accumulation_steps)
    problems.add("training.global_batch_size and training.gradient_accumulation_steps are not read under training.objective "
                 "= \"grpo\": a step's rows are grpo.prompts_per_step x grpo.group_size completions, taken "
                 "training.local_batch_size at a time; remove them");
  if (c.validation.enable)
    problems.add("validation.enable = true: GRPO measures held-out greedy accuracy instead (grpo.eval_path, "
                 "grpo.eval_every); set validation.enable = false");
  if (c.compile.graph())
    problems.add("compile.enable = true: GRPO's update runs eagerly; its rollouts run in graph mode with "
                 "grpo.generator = \"graph\"; set compile.enable = false");
  const auto& par = c.parallelism;
  for (const auto& [key, degree] : {std::pair<const char*, int64_t>{"tensor_parallel_degree", par.tensor_parallel_degree},
                                    {"context_parallel_degree", par.context_parallel_degree},
                                    {"pipeline_parallel_degree", par.pipeline_parallel_degree}})
    if (degree > 1)
      problems.add("parallelism." + std::string(key) + " = " + std::to_string(degree) +
                   ": GRPO splits its rollouts and updates over data-parallel ranks only (FSDP, HSDP, DDP); set it "
                   "to 1");
  if (c.grpo.group_size == 1 && c.grpo.advantage_norm == "unbiased_std")
    problems.add("grpo.group_size = 1 with grpo.advantage_norm = \"unbiased_std\": one sample has no unbiased std; "
                 "raise group_size");
}

using C = JobConfig;

// The keys an objective does not read are refused when they hold other than their defaults (a
// printed config or a checkpoint's copy holds every key).
void check_objective(const C& c, const config::Origins& origins, config::Problems& problems) {
  const bool sft = c.training.objective == "sft";
  auto where = [&](const std::string& key) {
    auto it = origins.find(key);
    return it == origins.end() ? std::string() : " (" + it->second + ")";
  };
  const data::SftConfig s;
  const std::vector<std::pair<std::string, bool>> sft_keys = {
      {"sft.prompt_field", c.sft.prompt_field != s.prompt_field},
      {"sft.completion_field", c.sft.completion_field != s.completion_field},
      {"sft.over_length", c.sft.over_length != s.over_length},
      {"sft.packing", c.sft.packing != s.packing}};
  for (const auto& [key, changed] : sft_keys)
    if (!sft && changed)
      problems.add(key + where(key) + " is read only when training.objective = \"sft\", and it is \"" +
                   c.training.objective + "\"; remove the key or set training.objective = \"sft\"");
  const data::DatasetConfig d;
  for (const auto& [key, changed] :
       {std::pair<std::string, bool>{"training.dataset_field", c.data.dataset_field != d.dataset_field},
        {"training.dataset_split", c.data.dataset_split != d.dataset_split}})
    if (sft && changed)
      problems.add(key + where(key) +
                   " is not read when training.objective = \"sft\": SFT reads JSONL rows by sft.prompt_field and "
                   "sft.completion_field; remove the key");
  // Each cp rank's loss is the mean over its own share of a row, which under SFT may hold no
  // completion token at all (a NaN mean) and weighs the shares unequally.
  if (sft && c.parallelism.context_parallel_degree > 1)
    problems.add(
        "parallelism.context_parallel_degree = " + std::to_string(c.parallelism.context_parallel_degree) +
        " is not supported with training.objective = \"sft\" yet (a cp rank's share of a row may hold "
        "no completion token); set context_parallel_degree = 1");
}

config::Schema<JobConfig> make_schema() {
  config::Schema<JobConfig> s("job config");
  s.section("job", "what this run is and where its files go").part(&C::job);
  s.section("model", "which model to train").part(&C::model);
  s.section("attention", "splash attention's tiles (model.attention = \"splash\")").part([](C & c) -> auto& {
    return c.model.attn;
  });
  s.section("moe", "load balancing and expert capacity of mixture-of-experts models (e.g. qwen3_moe)").part([](C & c) -> auto& {
    return c.model.moe;
  });
  s.section("optimizer", "AdamW with decoupled weight decay").part(&C::optimizer);
  s.section("lr_scheduler", "linear warmup to optimizer.lr, then decay").part(&C::lr_scheduler);
  s.section("training", "data, batch and length of the run").part(&C::data).part(&C::training);
  s.section("parallelism", "how ranks split the work; 1 disables a dimension").part(&C::parallelism);
  s.section("comm", "collectives between ranks").part(&C::comm);
  s.section("checkpoint", "saving and resuming").part(&C::checkpoint);
  s.section("activation_checkpoint", "recompute activations in backward").part(&C::activation_checkpoint);
  s.section("compile", "execution mode of the training step").part(&C::compile);
  s.section("metrics", "what is logged and where").part(&C::metrics);
  s.section("profiling", "Chrome/Perfetto traces of training steps").part(&C::profiling);
  s.section("validation", "loss on held-out data during training").part(&C::validation);
  s.section("sft", "supervised fine-tuning's prompt/completion data (training.objective = \"sft\")")
      .part(&C::sft);
  s.section("grpo", "GRPO post-training (training.objective = \"grpo\")").part(&C::grpo);
  s.section("flux", "FLUX flow-matching training (model.name = \"flux\")").part(&C::flux);

  s.check([](const C& c, const config::Origins& origins, config::Problems& problems) {
    check_objective(c, origins, problems);
    const auto& par = c.parallelism;
    // With data_parallel_shard_degree = -1 the degree is known at launch; the replicas alone
    // already have to divide the batch.
    const int64_t known_dp =
        par.data_parallel_replicate_degree * std::max<int64_t>(1, par.data_parallel_shard_degree);
    problems.capture("", [&] { plan_batches(c.training, known_dp); });
    problems.capture("[lr_scheduler] with training.steps = " + std::to_string(c.training.steps) + ": ",
                     [&] { c.lr_scheduler.schedule(c.training.steps).validate(); });
    if (par.pipeline_parallel_degree > 1 &&
        c.training.local_batch_size % par.pipeline_parallel_microbatch_size)
      problems.add("parallelism.pipeline_parallel_microbatch_size = " +
                   std::to_string(par.pipeline_parallel_microbatch_size) +
                   " does not divide training.local_batch_size = " +
                   std::to_string(c.training.local_batch_size) + "; pick a divisor of it");
    // Graph mode validates on the host's whole model: only its training step splits the sequence.
    if (par.tensor_parallel_degree > 1 && par.enable_sequence_parallel)
      for (const auto& [key, seq] :
           {std::pair<const char*, int64_t>{"training.seq_len", c.training.seq_len},
            {"validation.seq_len",
             c.validation.enable && !c.compile.graph() ? c.validation.seq_len_with(c.training.seq_len) : 0}})
        if (seq % par.tensor_parallel_degree != 0)
          problems.add(std::string(key) + " = " + std::to_string(seq) +
                       " does not divide by parallelism.tensor_parallel_degree = " +
                       std::to_string(par.tensor_parallel_degree) +
                       ", as sequence parallelism splits the sequence; pick a multiple of it, or set "
                       "parallelism.enable_sequence_parallel = false");
    if (const int64_t cp = par.context_parallel_degree; cp > 1) {
      if (c.training.seq_len % (2 * cp) != 0)
        problems.add(
            "training.seq_len = " + std::to_string(c.training.seq_len) +
            " is not a multiple of 2 x parallelism.context_parallel_degree = " + std::to_string(2 * cp) +
            ": each cp rank holds two equal chunks of every sequence; pick a multiple of it");
      if (par.tensor_parallel_degree > 1 && par.enable_sequence_parallel &&
          (c.training.seq_len / cp) % par.tensor_parallel_degree != 0)
        problems.add("training.seq_len = " + std::to_string(c.training.seq_len) + ": the " +
                     std::to_string(c.training.seq_len / cp) +
                     " tokens a cp rank holds do not divide by parallelism.tensor_parallel_degree = " +
                     std::to_string(par.tensor_parallel_degree) +
                     " for sequence parallelism; pick a multiple of " +
                     std::to_string(cp * par.tensor_parallel_degree));
    }
    check_grpo(c, problems);
    check_graph_keys(c.compile, c.training.objective == "grpo" && c.grpo.generator == "graph", problems);
    if (c.validation.enable && c.validation.seq_len > c.training.seq_len)
      problems.add("validation.seq_len = " + std::to_string(c.validation.seq_len) +
                   " exceeds training.seq_len = " + std::to_string(c.training.seq_len) +
                   ", the positions the model is built for; lower validation.seq_len to at most " +
                   std::to_string(c.training.seq_len));
  });

  // TorchTitan keys that were renamed; a config written for an older TorchTitan meets these.
  s.renamed("training.batch_size", "training.local_batch_size");
  s.renamed("training.compile", "compile.enable");
  s.renamed("checkpoint.enable_checkpoint", "checkpoint.enable");
  s.renamed("lr_scheduler.lr_min", "lr_scheduler.min_lr_factor");
  // titan's own key once: two keys for one bit.
  s.retired("compile.mode", "compile.enable = true alone selects graph mode, the one compiled mode; remove the key");
  s.retired("training.deterministic",
            "titan is deterministic without it: a run repeats bitwise on the same machine, thread count and "
            "ranks (every sum is taken in a fixed order, no atomics); remove the key");
  return s;
}

// What one key's default is another key's value: the hf family's config.json is, unless given, the
// one in the Hugging Face folder training starts from.
JobConfig with_defaults_from_other_keys(JobConfig cfg) {
  if (cfg.model.name == "hf" && cfg.model.hf_config.empty()) cfg.model.hf_config = cfg.checkpoint.initial_load_path;
  return cfg;
}

}  // namespace

const config::Schema<JobConfig>& job_config_schema() {
  static const config::Schema<JobConfig> s = make_schema();
  return s;
}

JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  return with_defaults_from_other_keys(job_config_schema().parse(toml_text, source_name, overrides));
}

JobConfig load_job_config(const std::string& toml_path, const std::vector<std::string>& overrides) {
  config::Origins origins;
  JobConfig cfg = job_config_schema().load(toml_path, overrides, "configs/llama3/debug.toml", &origins);
  // Every other key has a default worth running with; the model has none: a file that names
  // none is a mistake (an empty or wrong file), not a request for the default model.
  if (!origins.contains("model.name"))
    throw Error(
        "job config " + toml_path + (origins.empty() ? " is empty: it" : "") +
        " names no model: the key model.name is missing; add a [model] section with name = \"llama3\" "
        "(or another registered family) and its flavor, as configs/llama3/debug.toml does");
  return with_defaults_from_other_keys(std::move(cfg));
}

void validate(const JobConfig& cfg) {
  job_config_schema().validate(cfg);
}

std::string to_toml(const JobConfig& cfg) {
  return job_config_schema().to_toml(cfg);
}

nlohmann::json to_json(const JobConfig& cfg) {
  return job_config_schema().engine().to_json(&cfg);
}

JobConfig job_config_from_json(const nlohmann::json& j, const std::string& source_name) {
  JobConfig cfg;
  job_config_schema().engine().from_json(j, source_name, &cfg);
  return cfg;
}

std::vector<std::string> config_keys() {
  return job_config_schema().keys();
}

}  // namespace titan::train
