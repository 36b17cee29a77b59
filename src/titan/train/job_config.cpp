#include "titan/train/job_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>
#include <utility>
#include <variant>

#include "titan/core/error.h"

namespace titan::train {

namespace {

// Where a key's value lives; one alternative per value type a key can have.
using Ref = std::variant<bool*, int64_t*, double*, std::string*, std::optional<bool>*,
                         std::optional<int64_t>*, std::optional<double>*>;

template <class T>
struct Unwrap {
  using type = T;
  static constexpr bool optional = false;
};
template <class T>
struct Unwrap<std::optional<T>> {
  using type = T;
  static constexpr bool optional = true;
};

template <class T>
const char* kind() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true or false)";
  if constexpr (std::is_same_v<T, int64_t>) return "an integer";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
}

// Shortest text that reads back as the same double, and always as a TOML float.
std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf, nan
  return s;
}

template <class T>
std::string format_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
  if constexpr (std::is_same_v<T, double>) return format_double(v);
  if constexpr (std::is_same_v<T, std::string>) {
    // Basic strings with escapes: toml++ would otherwise pick 'literal' quoting.
    std::ostringstream os;
    toml::value<std::string> node(v);
    os << toml::toml_formatter{node, toml::format_flags::allow_unicode_strings};
    return os.str();
  }
}

// Problem messages, assembled as TITAN_CHECK assembles its parts.
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  ((os << parts), ...);
  return os.str();
}

// What values a key allows besides its type. Numbers are compared as doubles, exact for every
// bound used here.
struct Rule {
  std::optional<double> min = std::nullopt, max = std::nullopt;
  bool min_open = false, max_open = false;
  std::optional<int64_t> sentinel = std::nullopt;  // allowed outside [min, max], meaning "derive it"
  std::vector<std::string> choices = {};
  bool non_empty = false;

  std::string describe() const {
    if (!choices.empty()) {
      std::string s = "one of";
      for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : " ") + format_value(choices[i]);
      return s;
    }
    if (non_empty) return "a non-empty string";
    std::string s;
    if (min && max) {
      s = cat(min_open ? "in (" : "in [", *min, ", ", *max, max_open ? ")" : "]");
    } else if (min) {
      s = cat(min_open ? "> " : ">= ", *min);
    }
    if (sentinel) s += " or " + std::to_string(*sentinel);
    return s;
  }

  // Why `v` is not allowed ("must be ..."), or nothing.
  template <class T>
  std::optional<std::string> violation(const T& v) const {
    if constexpr (Unwrap<T>::optional) {
      return v ? violation(*v) : std::nullopt;
    } else if constexpr (std::is_same_v<T, std::string>) {
      bool ok = (!non_empty || !v.empty()) &&
                (choices.empty() || std::find(choices.begin(), choices.end(), v) != choices.end());
      if (!ok) return "must be " + describe();
    } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (sentinel && v == *sentinel) return std::nullopt;
      if constexpr (std::is_floating_point_v<T>) {
        if (!std::isfinite(v)) return std::string("must be a finite number") + (min ? " " + describe() : "");
      }
      auto x = static_cast<double>(v);
      bool ok = (!min || (min_open ? x > *min : x >= *min)) && (!max || (max_open ? x < *max : x <= *max));
      if (!ok) return "must be " + describe();
    }
    return std::nullopt;
  }
};

Rule positive() {
  return {.min = 0, .min_open = true};
}
Rule non_negative() {
  return {.min = 0};
}
Rule at_least_one() {
  return {.min = 1};
}
Rule fraction() {
  return {.min = 0, .max = 1};
}
Rule non_empty() {
  return {.non_empty = true};
}
Rule one_of(std::vector<std::string> choices) {
  return {.choices = std::move(choices)};
}
Rule or_minus_one(Rule r) {
  r.sentinel = -1;
  return r;
}

struct Field {
  std::string section, key;
  std::function<Ref(JobConfig&)> ref;
  Rule rule;
  std::string help;

  std::string name() const { return section + "." + key; }
  // Fields hold accessors to a mutable config; reading goes through the same accessor.
  Ref get(const JobConfig& cfg) const { return ref(const_cast<JobConfig&>(cfg)); }
};

struct Section {
  std::string name, help;
};

struct Schema {
  std::vector<Section> sections;
  std::vector<Field> fields;
};

template <class S>
class SectionBuilder {
 public:
  SectionBuilder(Schema& schema, std::string name, S JobConfig::*section, std::string help)
      : schema_(schema), name_(std::move(name)), section_(section) {
    schema_.sections.push_back({name_, std::move(help)});
  }

  // `Owner` is S or a base of it (the model section extends models::ModelConfig).
  template <class T, class Owner>
  SectionBuilder& add(std::string key, T Owner::*member, Rule rule, std::string help) {
    static_assert(std::is_base_of_v<Owner, S>);
    auto section = section_;
    schema_.fields.push_back({name_, std::move(key),
                              [section, member](JobConfig& c) -> Ref { return &((c.*section).*member); },
                              std::move(rule), std::move(help)});
    return *this;
  }

 private:
  Schema& schema_;
  std::string name_;
  S JobConfig::*section_;
};

const std::vector<std::string> kDtypes = {"float32", "bfloat16", "float16"};

const std::pair<const char*, optim::DecayType> kDecayTypes[] = {{"linear", optim::DecayType::linear},
                                                                {"sqrt", optim::DecayType::sqrt},
                                                                {"cosine", optim::DecayType::cosine}};

std::vector<std::string> decay_type_names() {
  std::vector<std::string> names;
  for (const auto& [name, type] : kDecayTypes) names.push_back(name);
  return names;
}

// The one definition of every key. Defaults are the member initialisers in job_config.h.
Schema make_schema() {
  using C = JobConfig;
  Schema s;
  SectionBuilder(s, "job", &C::job, "what this run is and where its files go")
      .add("dump_folder", &C::Job::dump_folder, non_empty(),
           "folder for everything the run writes: checkpoints, traces, logs")
      .add("description", &C::Job::description, {}, "free text, printed at start and stored with the config");

  SectionBuilder(s, "model", &C::model, "which model to train")
      .add("name", &C::Model::name, non_empty(), "model family in the registry, e.g. llama3")
      .add("flavor", &C::Model::flavor, non_empty(), "size preset of the family, e.g. debugmodel, 8B")
      .add("attention", &C::Model::attention, one_of({"reference", "splash"}),
           "attention kernel: block-sparse splash, or the reference that materialises the scores")
      .add("vocab_size", &C::Model::vocab_size, non_negative(),
           "0: the flavor's; else overrides it (e.g. the tokenizer's size)")
      .add("weight_tying", &C::Model::weight_tying, {},
           "share the embedding with the output projection; unset: as the flavor does")
      .add("tokenizer_path", &C::Model::tokenizer_path, {},
           "a folder holding a Hugging Face tokenizer.json (or the file); empty: the byte tokenizer");

  // Kept in the model section's struct (models::ModelConfig), which the model is built from.
  SectionBuilder(s, "attention", &C::model, "splash attention's tiles (model.attention = \"splash\")")
      .add("block_q", &C::Model::attention_block_q, at_least_one(), "queries per tile")
      .add("block_kv", &C::Model::attention_block_kv, at_least_one(), "keys per tile")
      .add("document_masking", &C::Model::attention_document_masking, {},
           "packed documents attend only within themselves (a new document after each eos)");

  // Kept in the model section's struct too.
  SectionBuilder(s, "moe", &C::model, "load balancing of mixture-of-experts models (e.g. qwen3_moe)")
      .add("aux_loss_coeff", &C::Model::moe_aux_loss_coeff, non_negative(),
           "weight of the load-balancing loss added to the training loss; 0: none")
      .add("load_balance_loss", &C::Model::moe_load_balance_loss, one_of({"per_layer", "global"}),
           "per_layer: the mean of each MoE layer's Switch loss (1 when balanced); global: one loss over "
           "the tokens of all layers pooled, transformers' load_balancing_loss_func (top_k when balanced)")
      .add("load_balance_bias", &C::Model::moe_load_balance_bias, {},
           "auxiliary-loss-free balancing: a per-expert bias on the routing choice, nudged after every step "
           "towards an even load")
      .add("bias_update_rate", &C::Model::moe_bias_update_rate, non_negative(),
           "the bias's step per optimizer step");

  SectionBuilder(s, "optimizer", &C::optimizer, "AdamW with decoupled weight decay")
      .add("name", &C::Optimizer::name, one_of({"AdamW"}), "optimizer")
      .add("lr", &C::Optimizer::lr, non_negative(), "peak learning rate")
      .add("beta1", &C::Optimizer::beta1, {.min = 0, .max = 1, .max_open = true}, "first-moment decay")
      .add("beta2", &C::Optimizer::beta2, {.min = 0, .max = 1, .max_open = true}, "second-moment decay")
      .add("eps", &C::Optimizer::eps, non_negative(), "added to the denominator")
      .add("weight_decay", &C::Optimizer::weight_decay, non_negative(), "decoupled weight decay");

  SectionBuilder(s, "lr_scheduler", &C::lr_scheduler, "linear warmup to optimizer.lr, then decay")
      .add("warmup_steps", &C::LrScheduler::warmup_steps, non_negative(), "steps of linear warmup")
      .add("decay_ratio", &C::LrScheduler::decay_ratio, fraction(),
           "unset: decay over all steps after warmup; else hold the peak and decay over this fraction "
           "of the steps at the end (warmup-stable-decay)")
      .add("decay_type", &C::LrScheduler::decay_type, one_of(decay_type_names()), "shape of the decay")
      .add("min_lr_factor", &C::LrScheduler::min_lr_factor, fraction(),
           "the decay ends at this fraction of optimizer.lr");

  SectionBuilder(s, "training", &C::training, "data, batch and length of the run")
      .add("dataset", &C::Training::dataset, non_empty(),
           "a built-in dataset (kjv: the bundled corpus), or a path as dataset_path takes")
      .add("dataset_path", &C::Training::dataset_path, {},
           "a file, folder or glob of text (.txt, .gz), JSONL (.jsonl, .jsonl.gz) and token shards (.tok); "
           "empty: the dataset's own")
      .add("dataset_field", &C::Training::dataset_field, non_empty(), "JSONL: the field holding a document's text")
      .add("dataset_split", &C::Training::dataset_split, one_of({"blank_line", "file"}),
           "text files: documents end at blank lines, or each file is one")
      .add("bad_data", &C::Training::bad_data, one_of({"error", "skip"}),
           "invalid UTF-8, empty documents, bad JSONL lines, damaged shards: stop, or skip and count")
      .add("local_batch_size", &C::Training::local_batch_size, positive(),
           "sequences per rank per micro-batch")
      .add("global_batch_size", &C::Training::global_batch_size, or_minus_one(positive()),
           "sequences per optimizer step over all ranks; -1: local x data-parallel x accumulation")
      .add("gradient_accumulation_steps", &C::Training::gradient_accumulation_steps, at_least_one(),
           "micro-batches per optimizer step; unset: 1, or derived from global_batch_size")
      .add("seq_len", &C::Training::seq_len, positive(), "tokens per sequence")
      .add("steps", &C::Training::steps, positive(), "optimizer steps to train")
      .add("max_norm", &C::Training::max_norm, positive(), "clip the global gradient norm to this")
      .add("mixed_precision_param", &C::Training::mixed_precision_param, one_of({"float32", "bfloat16"}),
           "dtype of parameters in forward and backward")
      .add("seed", &C::Training::seed, non_negative(), "seed of initialisation and data order")
      .add("deterministic", &C::Training::deterministic, {},
           "only bitwise-reproducible kernels, even where slower");

  SectionBuilder(s, "parallelism", &C::parallelism, "how ranks split the work; 1 disables a dimension")
      .add("data_parallel_replicate_degree", &C::Parallelism::data_parallel_replicate_degree, at_least_one(),
           "replicas of the weights (DDP, or HSDP with sharding)")
      .add("data_parallel_shard_degree", &C::Parallelism::data_parallel_shard_degree,
           or_minus_one(at_least_one()), "ranks the weights are sharded over (FSDP); -1: the ranks left over")
      .add("fsdp_reshard_after_forward", &C::Parallelism::fsdp_reshard_after_forward,
           one_of({"default", "always", "never"}), "free gathered weights after forward")
      .add("tensor_parallel_degree", &C::Parallelism::tensor_parallel_degree, at_least_one(),
           "ranks each layer's matmuls are split over")
      .add("pipeline_parallel_degree", &C::Parallelism::pipeline_parallel_degree, at_least_one(),
           "pipeline stages (ranks)")
      .add("pipeline_parallel_schedule", &C::Parallelism::pipeline_parallel_schedule,
           one_of({"GPipe", "1F1B", "Interleaved1F1B"}), "pipeline schedule")
      .add("pipeline_parallel_microbatch_size", &C::Parallelism::pipeline_parallel_microbatch_size,
           positive(), "sequences per pipeline micro-batch; divides local_batch_size")
      .add("context_parallel_degree", &C::Parallelism::context_parallel_degree, at_least_one(),
           "ranks each sequence is split over (ring attention)")
      .add("expert_parallel_degree", &C::Parallelism::expert_parallel_degree, at_least_one(),
           "ranks the experts of MoE layers are split over");

  SectionBuilder(s, "comm", &C::comm, "collectives between ranks")
      .add("timeout_seconds", &C::Comm::timeout_seconds, positive(),
           "a collective still waiting after this long fails, naming the ranks that did not answer");

  SectionBuilder(s, "checkpoint", &C::checkpoint, "saving and resuming")
      .add("enable", &C::Checkpoint::enable, {}, "save checkpoints and resume from the latest")
      .add("folder", &C::Checkpoint::folder, non_empty(), "checkpoint folder, under job.dump_folder")
      .add("interval", &C::Checkpoint::interval, positive(), "save every this many steps")
      .add("initial_load_path", &C::Checkpoint::initial_load_path, {},
           "checkpoint, or Hugging Face model folder, to start from when the folder has none; empty: none")
      .add("initial_load_model_only", &C::Checkpoint::initial_load_model_only, {},
           "from initial_load_path load the weights only, not optimizer and data state")
      .add("last_save_model_only", &C::Checkpoint::last_save_model_only, {},
           "the final save holds the weights only, in export_dtype")
      .add("last_save_in_hf", &C::Checkpoint::last_save_in_hf, {},
           "write the final save as a Hugging Face folder: config.json + model.safetensors (needs "
           "last_save_model_only)")
      .add("hf_config_format", &C::Checkpoint::hf_config_format, one_of({"transformers5", "transformers4"}),
           "config.json's layout in the last_save_in_hf export: transformers5 (rope_parameters, dtype, "
           "num_local_experts, as transformers 5 writes it) or transformers4 (rope_theta, rope_scaling, "
           "torch_dtype, num_experts: transformers 4.x ignores rope_parameters)")
      .add("export_dtype", &C::Checkpoint::export_dtype, one_of(kDtypes), "dtype of a model-only final save")
      .add("async_mode", &C::Checkpoint::async_mode, one_of({"disabled", "async", "async_with_pinned_mem"}),
           "write checkpoints in the background")
      .add("keep_latest_k", &C::Checkpoint::keep_latest_k, non_negative(),
           "delete all but the latest k checkpoints; 0: keep all")
      .add("load_step", &C::Checkpoint::load_step, or_minus_one(non_negative()),
           "step to resume from; -1: the latest");

  SectionBuilder(s, "activation_checkpoint", &C::activation_checkpoint, "recompute activations in backward")
      .add("mode", &C::ActivationCheckpoint::mode, one_of({"none", "selective", "full"}),
           "none, every layer (full), or every k-th layer (selective)")
      .add("selective_ac_option", &C::ActivationCheckpoint::selective_ac_option, non_empty(),
           "with mode = \"selective\": k as a string, e.g. \"2\" checkpoints every 2nd layer");

  SectionBuilder(s, "compile", &C::compile, "execution mode of the training step")
      .add("enable", &C::Compile::enable, {}, "run the step in `mode`; false: eager, op by op")
      .add("mode", &C::Compile::mode, one_of({"eager", "fused", "graph"}),
           "fused: eager with fused kernels; graph: the whole step captured once and replayed");

  SectionBuilder(s, "metrics", &C::metrics, "what is logged and where")
      .add("log_freq", &C::Metrics::log_freq, positive(), "log every this many steps")
      .add("enable_tensorboard", &C::Metrics::enable_tensorboard, {}, "write TensorBoard event files")
      .add("save_tb_folder", &C::Metrics::save_tb_folder, non_empty(),
           "TensorBoard folder, under job.dump_folder")
      .add("enable_jsonl", &C::Metrics::enable_jsonl, {}, "append each logged step to a JSONL file")
      .add("save_for_all_ranks", &C::Metrics::save_for_all_ranks, {},
           "every rank writes its metrics, not rank 0 only")
      .add("disable_color_printing", &C::Metrics::disable_color_printing, {}, "plain console output")
      .add("peak_flops", &C::Metrics::peak_flops, non_negative(),
           "peak FLOP/s per device for MFU; 0: measured on this machine");

  SectionBuilder(s, "profiling", &C::profiling, "Chrome/Perfetto traces of training steps")
      .add("enable_profiling", &C::Profiling::enable_profiling, {}, "write traces")
      .add("save_traces_folder", &C::Profiling::save_traces_folder, non_empty(),
           "trace folder, under job.dump_folder")
      .add("profile_freq", &C::Profiling::profile_freq, positive(),
           "trace one step in this many; also the steps memory snapshots are written at")
      .add("enable_memory_snapshot", &C::Profiling::enable_memory_snapshot, {},
           "record every allocation's owner from the start; write a memory snapshot (JSON) every "
           "profile_freq steps and on out-of-memory; draw one with scripts/memviz.py SNAPSHOT -o out.html")
      .add("save_memory_snapshot_folder", &C::Profiling::save_memory_snapshot_folder, non_empty(),
           "memory snapshot folder, under job.dump_folder");
  return s;
}

const Schema& schema() {
  static const Schema s = make_schema();
  return s;
}

const Field* find_field(const std::string& name) {
  for (const Field& f : schema().fields)
    if (f.name() == name) return &f;
  return nullptr;
}

bool is_section(const std::string& name) {
  const auto& secs = schema().sections;
  return std::any_of(secs.begin(), secs.end(), [&](const Section& s) { return s.name == name; });
}

// Optimal string alignment distance: edits, counting a swap of neighbours as one ("stpes").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// TorchTitan keys that were renamed; a config written for an older TorchTitan meets these.
const std::pair<const char*, const char*> kRenamed[] = {
    {"training.batch_size", "training.local_batch_size"},
    {"training.compile", "compile.enable"},
    {"checkpoint.enable_checkpoint", "checkpoint.enable"},
    {"lr_scheduler.lr_min", "lr_scheduler.min_lr_factor"},
};

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

// "; did you mean 'x'?" for an unknown "section.key" (or a bare key at the top level), else the
// valid keys of its section, else the valid sections.
std::string suggest_key(const std::string& name) {
  for (const auto& [old_name, new_name] : kRenamed)
    if (name == old_name)
      return std::string("; did you mean '") + new_name + "'? (its name in newer TorchTitan)";
  size_t dot = name.find('.');
  std::string sec = dot == std::string::npos ? "" : name.substr(0, dot);
  std::string key = dot == std::string::npos ? name : name.substr(dot + 1);
  // A misspelt section or key, or a key filed under the wrong section ("job.seed").
  const Field* best = nullptr;
  size_t best_score = SIZE_MAX;
  for (const Field& f : schema().fields) {
    size_t score =
        std::min(edit_distance(name, f.name()), edit_distance(key, f.key) + (sec == f.section ? 0 : 1));
    if (score < best_score) best = &f, best_score = score;
  }
  if (best && best_score <= std::max<size_t>(2, key.size() / 3))
    return "; did you mean '" + best->name() + "'?";
  if (is_section(sec)) {
    std::vector<std::string> keys;
    for (const Field& f : schema().fields)
      if (f.section == sec) keys.push_back(f.key);
    return "; valid keys in [" + sec + "]: " + join(keys, ", ");
  }
  std::vector<std::string> sections;
  for (const Section& s : schema().sections) sections.push_back(s.name);
  return "; valid sections: " + join(sections, ", ");
}

std::string suggest_section(const std::string& name) {
  const Section* best = nullptr;
  size_t best_score = SIZE_MAX;
  std::vector<std::string> names;
  for (const Section& s : schema().sections) {
    names.push_back(s.name);
    size_t score = edit_distance(name, s.name);
    if (score < best_score) best = &s, best_score = score;
  }
  if (best && best_score <= std::max<size_t>(2, name.size() / 3))
    return "; did you mean [" + best->name + "]?";
  return "; valid sections: " + join(names, ", ");
}

std::string where(const toml::source_region& r, const std::string& source_name, bool column = false) {
  std::string s = r.path ? *r.path : source_name;
  if (r.begin.line) s += ":" + std::to_string(r.begin.line);
  if (r.begin.line && column) s += ":" + std::to_string(r.begin.column);
  return s;
}

std::string describe_node(const toml::node& n) {
  std::ostringstream os;
  switch (n.type()) {
    case toml::node_type::string: os << "a string"; break;
    case toml::node_type::integer: os << "an integer"; break;
    case toml::node_type::floating_point: os << "a floating-point number"; break;
    case toml::node_type::boolean: os << "a boolean"; break;
    case toml::node_type::table: os << "a table"; break;
    case toml::node_type::array: os << "an array"; break;
    default: os << "a date/time"; break;
  }
  if (auto s = n.as_string()) {
    os << " (" << format_value(s->get()) << ")";
  } else if (n.is_value()) {
    os << " (";
    n.visit([&](const auto& v) { os << v; });
    os << ")";
  }
  return os.str();
}

// Integers are accepted where a float is expected, nothing else converts.
template <class T>
bool read_node(const toml::node& n, T& out) {
  if constexpr (Unwrap<T>::optional) {
    typename T::value_type v{};
    if (!read_node(n, v)) return false;
    out = v;
    return true;
  } else if constexpr (std::is_same_v<T, double>) {
    if (auto f = n.as_floating_point()) {
      out = f->get();
    } else if (auto i = n.as_integer()) {
      out = static_cast<double>(i->get());
    } else {
      return false;
    }
    return true;
  } else {
    std::optional<T> v = n.value_exact<T>();
    if (v) out = *v;
    return v.has_value();
  }
}

// Sets the field from a TOML node; the error text (without the key) when the type is wrong.
std::optional<std::string> assign(const Field& f, JobConfig& cfg, const toml::node& n) {
  return std::visit(
      [&](auto* p) -> std::optional<std::string> {
        using T = typename Unwrap<std::remove_pointer_t<decltype(p)>>::type;
        if (read_node(n, *p)) return std::nullopt;
        return std::string("expected ") + kind<T>() + ", found " + describe_node(n);
      },
      f.ref(cfg));
}

using Origins = std::map<std::string, std::string>;

// Problems gathered over a whole file or validation, thrown as one error so a user fixes all at once.
class Problems {
 public:
  void add(std::string p) { list_.push_back(std::move(p)); }
  bool empty() const { return list_.empty(); }
  // Runs a check that throws titan::Error, keeping its message.
  template <class Check>
  void capture(const std::string& context, Check&& check) {
    try {
      check();
    } catch (const Error& e) {
      add(context + e.what());
    }
  }
  void raise_if_any(const std::string& headline) const {
    if (list_.empty()) return;
    std::string body = list_.size() == 1
                           ? ": " + list_[0]
                           : ": " + std::to_string(list_.size()) + " problems:\n  " + join(list_, "\n  ");
    TITAN_CHECK(false, headline, body);
  }

 private:
  std::vector<std::string> list_;
};

void read_table(const toml::table& root, const std::string& source, JobConfig& cfg, Origins& origins,
                Problems& problems) {
  // toml++ iterates keys in sorted order; problems are reported in file order.
  std::vector<std::pair<toml::source_index, std::string>> found;
  auto report = [&](const toml::key& key, std::string problem) {
    found.emplace_back(key.source().begin.line, std::move(problem));
  };
  for (auto&& [sec_key, sec_node] : root) {
    std::string sec(sec_key.str());
    std::string at = where(sec_key.source(), source);
    const toml::table* table = sec_node.as_table();
    if (!table) {
      if (is_section(sec)) {
        report(sec_key,
               cat("[", sec, "] at ", at, " must be a table of keys, found ", describe_node(sec_node)));
      } else {
        report(sec_key,
               cat("unknown key '", sec, "' at ", at, " (keys belong in a [section])", suggest_key(sec)));
      }
      continue;
    }
    if (!is_section(sec) && table->empty()) {
      report(sec_key, cat("unknown section [", sec, "] at ", at, suggest_section(sec)));
      continue;
    }
    for (auto&& [key, node] : *table) {
      std::string name = sec + "." + std::string(key.str());
      std::string key_at = where(key.source(), source);
      const Field* f = find_field(name);
      if (!f) {
        report(key, cat("unknown key '", name, "' at ", key_at, suggest_key(name)));
      } else if (auto err = assign(*f, cfg, node)) {
        report(key, cat(name, " at ", key_at, ": ", *err));
      } else {
        origins[name] = key_at;
      }
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [line, problem] : found) problems.add(std::move(problem));
}

// Sets a field from an override's text: strings as written, "none" unsets an optional, anything
// else is read as a TOML value so numbers and bools follow the same rules as in a file.
std::optional<std::string> assign_text(const Field& f, JobConfig& cfg, const std::string& text) {
  Ref ref = f.ref(cfg);
  if (auto* s = std::get_if<std::string*>(&ref)) {
    **s = text;
    return std::nullopt;
  }
  bool unset = text == "none" && std::visit(
                                     [](auto* p) {
                                       using V = std::remove_pointer_t<decltype(p)>;
                                       if constexpr (Unwrap<V>::optional) *p = std::nullopt;
                                       return Unwrap<V>::optional;
                                     },
                                     ref);
  if (unset) return std::nullopt;
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text, std::string_view("override"));
  } catch (const toml::parse_error&) {
    // Not a TOML value: reported below as the wrong type, with the text as typed.
  }
  const toml::node* node = parsed.size() == 1 ? parsed.get("v") : nullptr;
  if (node) return assign(f, cfg, *node);
  return std::visit(
      [&](auto* p) {
        using T = typename Unwrap<std::remove_pointer_t<decltype(p)>>::type;
        return std::string("expected ") + kind<T>() + ", found '" + text + "'";
      },
      ref);
}

void apply_overrides(const std::vector<std::string>& args, JobConfig& cfg, Origins& origins,
                     Problems& problems) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!arg.starts_with("--") || arg.size() == 2) {
      problems.add("override '" + arg + "': expected --section.key=value or --section.key value");
      continue;
    }
    size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::optional<std::string> value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    bool next_is_value = i + 1 < args.size() && !args[i + 1].starts_with("--");
    const Field* f = find_field(name);
    if (!f) {
      if (!value && next_is_value) ++i;  // its value goes with it
      problems.add(cat("unknown key '", name, "' in override '", arg, "'", suggest_key(name)));
      continue;
    }
    if (!value) {
      if (next_is_value) {
        value = args[++i];
      } else if (std::holds_alternative<bool*>(f->ref(cfg)) ||
                 std::holds_alternative<std::optional<bool>*>(f->ref(cfg))) {
        value = "true";  // a bare flag
      } else {
        problems.add(cat("override '", arg, "' has no value; write --", name, "=VALUE"));
        continue;
      }
    }
    std::string spelled = "--" + name + "=" + *value;
    if (auto err = assign_text(*f, cfg, *value)) {
      problems.add("override '" + spelled + "': " + *err);
    } else {
      origins[name] = "override '" + spelled + "'";
    }
  }
}

template <class T>
std::string format_any(const T& v) {
  if constexpr (Unwrap<T>::optional)
    return v ? format_value(*v) : "unset";
  else
    return format_value(v);
}

void check(const JobConfig& cfg, const Origins& origins, Problems& problems) {
  for (const Field& f : schema().fields) {
    std::visit(
        [&](const auto* p) {
          if (auto why = f.rule.violation(*p)) {
            auto origin = origins.find(f.name());
            std::string from = origin == origins.end() ? "" : " (" + origin->second + ")";
            problems.add(f.name() + " = " + format_any(*p) + from + ": " + *why);
          }
        },
        f.get(cfg));
  }
  // The checks across keys assume each key is in its own range.
  if (!problems.empty()) return;

  const auto& par = cfg.parallelism;
  // With data_parallel_shard_degree = -1 the degree is known at launch; the replicas alone
  // already have to divide the batch.
  int64_t known_dp =
      par.data_parallel_replicate_degree * std::max<int64_t>(1, par.data_parallel_shard_degree);
  problems.capture("", [&] { plan_batches(cfg, known_dp); });
  problems.capture("[lr_scheduler] with training.steps = " + std::to_string(cfg.training.steps) + ": ",
                   [&] { lr_schedule(cfg).validate(); });
  if (cfg.activation_checkpoint.mode == "selective")
    problems.capture("", [&] { selective_ac_layer_interval(cfg.activation_checkpoint); });
  if (par.pipeline_parallel_degree > 1 &&
      cfg.training.local_batch_size % par.pipeline_parallel_microbatch_size) {
    problems.add("parallelism.pipeline_parallel_microbatch_size = " +
                 std::to_string(par.pipeline_parallel_microbatch_size) +
                 " does not divide training.local_batch_size = " +
                 std::to_string(cfg.training.local_batch_size) + "; pick a divisor of it");
  }
  if (cfg.model.attention_document_masking && cfg.model.attention != "splash") {
    problems.add("attention.document_masking = true needs model.attention = \"splash\" (the reference path is "
                 "causal only); set one of them");
  }
  if (!cfg.checkpoint.last_save_in_hf &&
      cfg.checkpoint.hf_config_format != JobConfig::Checkpoint{}.hf_config_format) {
    problems.add("checkpoint.hf_config_format = \"" + cfg.checkpoint.hf_config_format +
                 "\" applies to the Hugging Face export only, and checkpoint.last_save_in_hf is false; set "
                 "--checkpoint.last_save_in_hf=true, or drop hf_config_format");
  }
  if (cfg.checkpoint.last_save_in_hf && !cfg.checkpoint.last_save_model_only) {
    problems.add(
        "checkpoint.last_save_in_hf = true needs checkpoint.last_save_model_only = true (safetensors hold "
        "weights only); set one of them");
  }
}

// The config a parsed file (or a checkpoint's JSON) and the overrides make, checked.
JobConfig from_table(const toml::table& root, const std::string& source_name,
                     const std::vector<std::string>& overrides) {
  JobConfig cfg;
  Origins origins;
  Problems problems;
  read_table(root, source_name, cfg, origins, problems);
  apply_overrides(overrides, cfg, origins, problems);
  problems.raise_if_any("job config " + source_name);
  check(cfg, origins, problems);
  problems.raise_if_any("job config " + source_name + " is invalid");
  return cfg;
}

toml::table parse_toml(const std::string& toml_text, const std::string& source_name) {
  try {
    return toml::parse(toml_text, std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    TITAN_CHECK(false, "job config ", where(e.source(), source_name, true),
                ": invalid TOML: ", e.description());
  }
}

}  // namespace

JobConfig parse_job_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  return from_table(parse_toml(toml_text, source_name), source_name, overrides);
}

JobConfig load_job_config(const std::string& toml_path, const std::vector<std::string>& overrides) {
  // A folder, /dev/null or a pipe would read as an empty file: the all-defaults job.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(toml_path, ec);
  const char* found = !std::filesystem::exists(st)        ? "does not exist"
                      : std::filesystem::is_directory(st) ? "is a folder"
                                                          : "is no regular file (a device, pipe or socket)";
  TITAN_CHECK(std::filesystem::is_regular_file(st), "job config: cannot read '", toml_path, "': it ", found,
              "; pass the path of a TOML file, e.g. --config configs/llama3/debug.toml");
  std::ifstream in(toml_path, std::ios::binary);
  TITAN_CHECK(in, "job config: cannot read '", toml_path,
              "' (check its permissions); pass the path of a TOML file, ",
              "e.g. --config configs/llama3/debug.toml");
  std::ostringstream text;
  text << in.rdbuf();
  const toml::table root = parse_toml(text.str(), toml_path);
  JobConfig cfg = from_table(root, toml_path, overrides);
  // Every other key has a default worth running with; the model has none: a file that names
  // none is a mistake (an empty or wrong file), not a request for the default model.
  const bool named = root.at_path("model.name").is_value() ||
                     std::any_of(overrides.begin(), overrides.end(), [](const std::string& o) {
                       return o == "--model.name" || o.starts_with("--model.name=");
                     });
  TITAN_CHECK(named, "job config ", toml_path, (root.empty() ? " is empty: it" : ""),
              " names no model: the key model.name is missing; add a [model] section with name = \"llama3\" ",
              "(or another registered family) and its flavor, as configs/llama3/debug.toml does");
  return cfg;
}

void validate(const JobConfig& cfg) {
  Problems problems;
  check(cfg, {}, problems);
  problems.raise_if_any("job config is invalid");
}

std::string to_toml(const JobConfig& cfg) {
  std::ostringstream os;
  os << "# titan job config. Any key can be overridden on the command line: --section.key=value\n";
  for (const Section& sec : schema().sections) {
    os << "\n[" << sec.name << "]  # " << sec.help << "\n";
    for (const Field& f : schema().fields) {
      if (f.section != sec.name) continue;
      std::string allowed = f.rule.describe();
      std::string comment = f.help + (allowed.empty() ? "" : "; " + allowed);
      std::visit(
          [&](const auto* p) {
            using V = std::remove_cvref_t<decltype(*p)>;
            if constexpr (Unwrap<V>::optional) {
              if (!*p) {
                os << "# " << f.key << " is unset  # " << comment << "\n";
                return;
              }
            }
            os << f.key << " = " << format_any(*p) << "  # " << comment << "\n";
          },
          f.get(cfg));
    }
  }
  return os.str();
}

nlohmann::json to_json(const JobConfig& cfg) {
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : schema().fields) {
    std::visit(
        [&](const auto* p) {
          using V = std::remove_cvref_t<decltype(*p)>;
          if constexpr (Unwrap<V>::optional) {
            j[f.section][f.key] = *p ? nlohmann::json(**p) : nlohmann::json(nullptr);
          } else {
            j[f.section][f.key] = *p;
          }
        },
        f.get(cfg));
  }
  return j;
}

JobConfig job_config_from_json(const nlohmann::json& j, const std::string& source_name) {
  // Through TOML, so that one reader checks types, ranges and names, whichever form a config has.
  auto to_toml_value = [](const nlohmann::json& v, toml::table& into, const std::string& key,
                          const auto& self) -> void {
    switch (v.type()) {
      case nlohmann::json::value_t::null: break;  // an unset optional key
      case nlohmann::json::value_t::boolean: into.insert(key, v.get<bool>()); break;
      case nlohmann::json::value_t::number_integer:
      case nlohmann::json::value_t::number_unsigned: into.insert(key, v.get<int64_t>()); break;
      case nlohmann::json::value_t::number_float: into.insert(key, v.get<double>()); break;
      case nlohmann::json::value_t::string: into.insert(key, v.get<std::string>()); break;
      case nlohmann::json::value_t::object: {
        toml::table sub;
        for (const auto& [k, x] : v.items()) self(x, sub, k, self);
        into.insert(key, std::move(sub));
        break;
      }
      default: into.insert(key, toml::array{}); break;  // no key takes an array: reported as such
    }
  };
  TITAN_CHECK(j.is_object(), "job config ", source_name, ": expected a JSON object of sections, got ",
              j.dump().substr(0, 80));
  toml::table root;
  for (const auto& [section, keys] : j.items()) to_toml_value(keys, root, section, to_toml_value);
  return from_table(root, source_name, {});
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const Field& f : schema().fields) keys.push_back(f.name());
  return keys;
}

BatchPlan plan_batches(const JobConfig& cfg, int64_t dp_degree) {
  const auto& t = cfg.training;
  TITAN_CHECK(dp_degree >= 1, "plan_batches: the data-parallel degree must be at least 1, got ", dp_degree);
  int64_t per_micro_batch = t.local_batch_size * dp_degree;
  if (t.global_batch_size == -1) {
    int64_t accumulation = t.gradient_accumulation_steps.value_or(1);
    return {per_micro_batch * accumulation, accumulation};
  }
  TITAN_CHECK(t.global_batch_size % per_micro_batch == 0,
              "training.global_batch_size = ", t.global_batch_size,
              " is not a multiple of training.local_batch_size (", t.local_batch_size,
              ") x data-parallel degree (", dp_degree, ") = ", per_micro_batch, "; set it to a multiple of ",
              per_micro_batch, ", or to -1 to derive it");
  int64_t accumulation = t.global_batch_size / per_micro_batch;
  TITAN_CHECK(!t.gradient_accumulation_steps || *t.gradient_accumulation_steps == accumulation,
              "training.gradient_accumulation_steps = ", t.gradient_accumulation_steps.value_or(0),
              " disagrees with training.global_batch_size / (local_batch_size x data-parallel degree) = ",
              t.global_batch_size, " / (", t.local_batch_size, " x ", dp_degree, ") = ", accumulation,
              "; set one of the two, not both");
  return {t.global_batch_size, accumulation};
}

optim::LrSchedule lr_schedule(const JobConfig& cfg) {
  const auto& s = cfg.lr_scheduler;
  auto it = std::find_if(std::begin(kDecayTypes), std::end(kDecayTypes),
                         [&](const auto& entry) { return s.decay_type == entry.first; });
  TITAN_CHECK(it != std::end(kDecayTypes), "lr_scheduler.decay_type = ", format_value(s.decay_type),
              ": must be one of ", join(decay_type_names(), ", "));
  return {.training_steps = cfg.training.steps,
          .warmup_steps = s.warmup_steps,
          .decay_ratio = s.decay_ratio,
          .decay_type = it->second,
          .min_lr_factor = s.min_lr_factor};
}

int64_t selective_ac_layer_interval(const JobConfig::ActivationCheckpoint& ac) {
  const std::string& opt = ac.selective_ac_option;
  TITAN_CHECK(
      opt != "op", "activation_checkpoint.selective_ac_option = \"op\": per-op selective checkpointing ",
      "is not supported yet; use a layer interval such as \"2\" (every 2nd layer) or mode = \"full\"");
  int64_t k = 0;
  auto [end, ec] = std::from_chars(opt.data(), opt.data() + opt.size(), k);
  TITAN_CHECK(ec == std::errc() && end == opt.data() + opt.size() && k >= 1,
              "activation_checkpoint.selective_ac_option = ", format_value(opt),
              ": must be a positive integer k, as a string (\"2\": checkpoint every 2nd layer)");
  return k;
}

}  // namespace titan::train
