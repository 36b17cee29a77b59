#include "titan/train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <streambuf>

#include "titan/core/allocator.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/core/trace.h"
#include "titan/data/dataset.h"
#include "titan/data/loader.h"
#include "titan/data/tokenizer.h"
#include "titan/data/tokenizer_files.h"
#include "titan/dist/device_mesh.h"
#include "titan/dist/tcp_store.h"
#include "titan/kernels/cpu/blas_kernels.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/registry.h"
#include "titan/nn/moe/moe.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"
#include "titan/optim/clip.h"
#include "titan/optim/lr_scheduler.h"
#include "titan/parallel/context_parallel_plan.h"
#include "titan/parallel/data_parallel.h"
#include "titan/parallel/data_parallel_style.h"
#include "titan/parallel/deferred_init.h"
#include "titan/parallel/fully_shard.h"
#include "titan/parallel/pipeline_executor.h"
#include "titan/parallel/pipeline_parallel.h"
#include "titan/parallel/tensor_parallel.h"
#include "titan/parallel/tp_layout.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/graph_mode/graph_moe.h"
#include "titan/train/graph_mode/graph_sharding.h"
#include "titan/train/graph_mode/graph_processes.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/metrics/memory_snapshot.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/metrics/peak_flops.h"
#include "titan/train/pipeline_step.h"
#include "titan/train/metrics/step_profiler.h"
#include "titan/train/validator.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signals{0};

extern "C" void on_signal(int sig) {
  // The first signal asks for a clean stop after the current step; a second one means "now".
  if (g_signals.fetch_add(1) > 0) std::_Exit(128 + sig);
  g_stop.store(true);
}

// The folder holding the tokenizer.json that model.tokenizer_path names, found where
// data::load_tokenizer finds it (the working directory, else the source tree); empty for the
// byte tokenizer or a tokenizer file of another name, which no model folder can carry.
fs::path tokenizer_dir(const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) return {};
  fs::path p(tokenizer_path);
  if (p.is_relative() && !fs::exists(p)) p = fs::path(TITAN_SOURCE_DIR) / p;
  if (fs::is_directory(p)) return p;
  return p.filename() == data::kTokenizerFile ? p.parent_path() : fs::path();
}

// The standard output or error stream, attached to a terminal.
bool console_is_terminal(const std::ostream& log) {
  return (&log == &std::cout && isatty(STDOUT_FILENO)) || (&log == &std::cerr && isatty(STDERR_FILENO));
}

// Where ranks other than 0 send the log: nowhere.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

// The dtype the run's matrix products multiply in (training.mixed_precision_param).
DType matmul_dtype(const TrainingConfig& t) {
  return t.mixed_precision_param == "bfloat16" ? kBF16 : kF32;
}

// "a,b" -> {"a", "b"}, spaces around the items dropped; "" -> {}.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    items.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
  }
  return items;
}

std::string activation_checkpoint_summary(const JobConfig& c) {
  const auto& ac = c.activation_checkpoint;
  if (c.compile.graph() && c.compile.scan_layers) switch (scan_saves_for(ac)) {
      case graph::ScanSaves::all: return "off (the layer loop keeps every result its backward reads)";
      case graph::ScanSaves::inputs: return "full (the layer loop keeps each block's input and computes it again in backward)";
      case graph::ScanSaves::products:
        return "selective op (the layer loop keeps matrix products and attention, and recomputes the rest in backward)";
    }
  if (ac.mode == "none") return "off";
  return ac.mode + " (" + (ac.every_k() == 1 ? "every block" : "1 block in " + std::to_string(ac.every_k())) +
         " recomputed in backward)";
}

// Keys whose feature titan does not have yet, or this machine cannot run, are refused here, all
// at once and before anything is allocated: a run must never seem to do what it does not.
void refuse_missing_features(const JobConfig& c) {
  std::vector<std::string> refused;
  // Graph mode's bf16 products are XLA's, which it runs on any CPU.
  if (matmul_dtype(c.training) == kBF16 && !c.compile.graph() && kernels::cpu::onednn_bf16_isa().empty())
    refused.push_back("training.mixed_precision_param = \"bfloat16\": this CPU (" + cpu_model_name() +
                      ") has neither AMX-BF16 nor AVX512-BF16, or ONEDNN_MAX_CPU_ISA keeps oneDNN from them, "
                      "and titan does not emulate bf16 products on float32 instructions (slower than float32 "
                      "itself); set it to \"float32\", or run on a CPU with them (Intel Sapphire Rapids or "
                      "later, AMD Zen 4 or later)");
  if (c.compile.graph()) {
    const auto& p = c.parallelism;
    for (const auto& [key, degree] :
         std::vector<std::pair<std::string, int64_t>>{{"context_parallel_degree", p.context_parallel_degree},
                                                      {"pipeline_parallel_degree", p.pipeline_parallel_degree},
                                                      {"expert_parallel_degree", p.expert_parallel_degree}})
      if (degree > 1)
        refused.push_back("parallelism." + key + " = " + std::to_string(degree) +
                          " with compile.mode = \"graph\": graph mode splits its step over data-parallel (replicate, "
                          "shard) and tensor-parallel degrees only; set the degree to 1 or compile.enable = false");
  }
  // What graph mode's layer loop (scan_saves_for) or the eager wrappers (every_k) cannot do, in
  // their own words.
  const auto& ac = c.activation_checkpoint;
  try {
    if (c.compile.graph() && c.compile.scan_layers) scan_saves_for(ac);
    else ac.every_k();
  } catch (const Error& e) {
    refused.push_back(e.what());
  }
  std::string message = "this job config asks for what titan cannot do yet:";
  for (const std::string& r : refused) message += "\n  " + r;
  if (!refused.empty()) throw Error(message);
}

// compile.plugin and plugin_options; on the CPU plugin without a device count, as many devices
// as the [parallelism] degrees name (data_parallel_shard_degree = -1 counting as 1), where the
// plugin's own default would be one per core.
graph::RuntimeOptions graph_runtime(const JobConfig& c) {
  graph::RuntimeOptions rt =
      graph::parse_runtime_options(c.compile.plugin, c.compile.plugin_options, "compile.plugin_options");
  const auto& p = c.parallelism;
  const int64_t named =
      p.data_parallel_replicate_degree * std::max<int64_t>(1, p.data_parallel_shard_degree) * p.tensor_parallel_degree;
  bool counted = false;
  for (const auto& option : rt.client_options) counted = counted || option.name == "cpu_device_count";
  if (rt.plugin == "cpu" && !counted) rt.client_options.push_back({"cpu_device_count", named});
  return rt;
}

// The hidden size: the width of the token embedding's rows, 0 for a model without one.
int64_t model_dim(const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const auto& [name, p] : params)
    if (name.ends_with("tok_embeddings.weight") && p.dim() == 2) return p.size(1);
  return 0;
}

}  // namespace

namespace {

// The forwards and backwards of a step's micro-batches, one after the other.
MicroBatchSums run_micro_batches(models::CausalLM& model, int64_t micro_batches,
                                 const std::function<data::Batch()>& next_batch, const GradientSync& sync) {
  MicroBatchSums sums;
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    data::Batch batch = next_batch();
    Tensor logits, loss;
    {
      trace::Span span("forward", "phase");
      // document_ids is defined only when the loader makes them (attention.document_masking).
      logits = model(batch.inputs, batch.document_ids);
      loss = sync.loss ? sync.loss(logits, batch.labels) : ops::cross_entropy(logits, batch.labels);
      if (Tensor aux = model.auxiliary_loss(); aux.defined()) {
        sums.has_aux = true;
        sums.aux += aux.item();
        loss = loss + aux;
      }
      sums.loss += loss.item();
    }
    if (sync.before_backward) sync.before_backward(micro == micro_batches - 1);
    trace::Span span("backward", "phase");
    (micro_batches == 1 ? loss : ops::scale(loss, 1.0 / static_cast<double>(micro_batches))).backward();
  }
  return sums;
}

}  // namespace

StepStats train_step(models::CausalLM& model, optim::AdamW& optimizer, const std::vector<Tensor>& params,
                     double max_norm, int64_t micro_batches, const std::function<data::Batch()>& next_batch,
                     const GradientSync& sync) {
  optimizer.zero_grad();
  MicroBatchSums sums;
  if (sync.forward_backward) {
    if (sync.before_backward) sync.before_backward(false);
    sums = sync.forward_backward(micro_batches, next_batch);
  } else {
    sums = run_micro_batches(model, micro_batches, next_batch, sync);
  }
  {
    trace::Span span("gradient reduce", "phase");
    if (sync.reduce) sync.reduce();
  }
  trace::Span span("optimizer", "phase");
  StepStats stats;
  // Replicated parameters: after reduce_gradients every rank holds the same whole gradients, so
  // this rank's norm is the global one. Sharded ones: the ranks' partial sums make it up.
  double partial = optim::grad_norm_partial(sync.norm_params.empty() ? params : sync.norm_params, 2.0);
  if (sync.sum_norm_partials) partial = sync.sum_norm_partials(partial);
  stats.grad_norm = optim::grad_norm_from_partial(partial, 2.0);
  // Clipped inside the update: the gradients stay as backward left them.
  optimizer.step(optim::clip_coefficient(max_norm, stats.grad_norm));
  stats.loss = sums.loss / static_cast<double>(micro_batches);
  if (sums.has_aux) stats.extra.emplace_back("aux_loss", sums.aux / static_cast<double>(micro_batches));
  for (auto& scalar : sums.extra) stats.extra.push_back(std::move(scalar));
  for (auto& scalar : model.end_step()) stats.extra.push_back(std::move(scalar));
  return stats;
}

struct Trainer::State {
  State(JobConfig c, std::ostream& l, dist::ProcessGroup w)
      : cfg(std::move(c)),
        world(std::move(w)),
        null_log(&null_buffer),
        log(world.rank() == 0 ? l : null_log),
        rng(static_cast<uint64_t>(cfg.training.seed)) {}
  // Rank 0 writes warnings to the log with everything else; the other ranks, whose log goes
  // nowhere, to stderr with their rank.
  void warn(const std::string& text) const {
    if (world.rank() == 0)
      log << "titan: warning: " << text << "\n";
    else
      std::cerr << "titan: rank " << world.rank() << ": warning: " << text << "\n";
  }
  JobConfig cfg;
  dist::ProcessGroup world;
  NullBuffer null_buffer;
  std::ostream null_log;
  std::ostream& log;
  std::unique_ptr<MemorySnapshots> memory_snapshots;
  std::unique_ptr<dist::DeviceMesh> mesh;
  std::unique_ptr<parallel::DataParallel> data_parallel;
  Generator rng;
  std::shared_ptr<models::CausalLM> model;
  // After the model, whose modules hold their hooks: destroyed first, FSDP (which shards what
  // tensor parallelism split) before tensor parallelism.
  std::unique_ptr<parallel::ContextParallel> cp;
  std::unique_ptr<parallel::TensorParallel> tp;
  std::unique_ptr<parallel::ExpertParallel> ep;
  std::unique_ptr<parallel::PipelineParallel> pp;
  std::unique_ptr<parallel::FullyShard> fsdp;
  std::unique_ptr<parallel::PipelineExecutor> pipeline;  // with pp
  models::ModelSummary summary;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::LrScheduler> scheduler;
  std::unique_ptr<MetricsLogger> metrics;
  std::unique_ptr<Validator> validator;  // null unless validation.enable
  std::vector<Tensor> params;
  std::vector<std::pair<std::string, Tensor>> named_params;  // params by parameter name
  BatchPlan plan;
  PeakFlops peak;
  bool warned_peak = false;
  // Holds references to the members above, so it is declared, and destroyed, after them.
  std::unique_ptr<CheckpointManager> checkpointer;
  std::unique_ptr<StepProfiler> profiler;
  // compile.mode = "graph": the runner (until the step takes it) and the mesh of its devices that
  // the [parallelism] degrees split the step over; the processes' mesh is then one rank.
  std::optional<graph::Runner> graph_runner;
  GraphMesh graph_mesh;
  // For graph_mesh.tp > 1: the plan's splits and its activations' layout (hooks on the model).
  std::unique_ptr<parallel::TpLayout> graph_tp;
  std::unique_ptr<GraphStep> graph;  // compile.mode = "graph"; null when eager
  std::unique_ptr<GraphMoeLayout> graph_moe;  // with graph: its MoE layers' dispatchers, for the run
  int64_t start_step = 0;
  parallel::DataParallelStyle dp_style = parallel::DataParallelStyle::none;

  // The constructor's steps, in order; each builds what its name says from cfg.
  struct Data;
  Data build_data();
  void build_model(const data::Tokenizer& tokenizer);
  // Under parallelism, makes every MoE layer's step counts the global ones (nn::moe::MoE::count_reducer).
  void install_global_expert_counts();
  void build_optimizer();
  void build_metrics();
  void log_setup(const Data& data);
  // The loader's next micro-batch; under context parallelism, this rank's tokens of it.
  data::Batch next_batch();
  // The plans that split parameters (tensor, expert parallelism), for initialisation and
  // checkpoints.
  std::vector<const parallel::ParameterSlices*> slice_plans() const;
  // Pipeline parallelism's forwards and backwards of one step (GradientSync::forward_backward).
  MicroBatchSums run_pipeline(int64_t batches, const std::function<data::Batch()>& next,
                              const GradientSync& sync);
};

// The training data of [training], and what the log and the validator need of it.
struct Trainer::State::Data {
  std::shared_ptr<const data::Tokenizer> tokenizer;
  data::DatasetOptions options;
  data::Dataset dataset;
  int32_t eos_id = -1;  // where documents end, for document masking; -1: not masked
};

Trainer::State::Data Trainer::State::build_data() {
  const JobConfig& c = cfg;
  Data d;
  d.tokenizer = data::load_tokenizer(c.model.tokenizer_path);
  d.options = c.data.options("training");
  d.dataset = data::load_dataset(d.options, *d.tokenizer);
  d.eos_id = c.model.attn.document_masking ? d.tokenizer->eos_id().value_or(-1) : -1;
  // Expert-parallel ranks read batches of their own, as data-parallel ones do.
  dist::ProcessGroup& batch = (*mesh)["batch"];
  loader = std::make_unique<data::DataLoader>(
      d.dataset.stream, data::LoaderOptions{.seq_len = c.training.seq_len,
                                            // Graph mode's one process loads every device's rows.
                                            .local_batch_size = c.training.local_batch_size * graph_mesh.dp(),
                                            .seed = static_cast<uint64_t>(c.training.seed),
                                            .dp_rank = batch.rank(),
                                            .dp_world = batch.size(),
                                            .eos_id = d.eos_id});
  return d;
}

void Trainer::State::build_model(const data::Tokenizer& tokenizer) {
  const JobConfig& c = cfg;
  const models::TrainSpec& spec = models::get_train_spec(c.model.name);
  summary = spec.summarize(c.model, c.training.seq_len);
  TITAN_CHECK(summary.num_params > 0, "model ", c.model.name, "/", c.model.flavor, " has no parameters");
  if (const int64_t cp = mesh->degree("cp"); cp > 1) {
    config::require(
        c.model.attention == "splash", "model.attention = \"", c.model.attention,
        "\" with parallelism.context_parallel_degree = ", cp,
        ": context parallelism runs ring attention over splash attention's tiles; set it to \"splash\"");
    config::require(
        !c.validation.enable, "validation.enable = true with parallelism.context_parallel_degree = ", cp,
        ": validation does not split its sequences over cp ranks yet; set it to false, or validate in a "
        "run without context parallelism");
  }
  if (const int64_t tp_degree = mesh->degree("tp"); tp_degree > 1) {
    // Checked before anything is built, naming what does not split.
    const std::pair<std::string, int64_t> splits[] = {
        {"its " + std::to_string(summary.n_heads) + " attention heads", summary.n_heads},
        {"its " + std::to_string(summary.n_kv_heads) +
             " key/value heads (titan does not replicate key/value heads across tp ranks)",
         summary.n_kv_heads},
        {"its feed-forward hidden size " + std::to_string(summary.ffn_hidden_dim), summary.ffn_hidden_dim},
        {"its vocabulary of " + std::to_string(summary.vocab_size) +
             " (model.vocab_size can round it up to a multiple)",
         summary.vocab_size}};
    for (const auto& [what, n] : splits)
      config::require(n % tp_degree == 0, "parallelism.tensor_parallel_degree = ", tp_degree, ": model ",
                      c.model.name, "/", c.model.flavor, " cannot split ", what, " into ", tp_degree,
                      " equal parts; choose a degree that divides it");
  }
  if (const int64_t ep_degree = mesh->degree("ep"); ep_degree > 1) {
    config::require(summary.num_experts > 0, "parallelism.expert_parallel_degree = ", ep_degree, ": model ",
                    c.model.name, "/", c.model.flavor,
                    " has no MoE layers whose experts could be split; set it to 1");
    config::require(summary.num_experts % ep_degree == 0, "parallelism.expert_parallel_degree = ", ep_degree,
                    ": model ", c.model.name, "/", c.model.flavor, " has ", summary.num_experts,
                    " experts per MoE layer (moe.num_experts), which do not split into ", ep_degree,
                    " equal parts; choose a degree that divides it");
    for (const auto& [dim, key] : {std::pair<const char*, const char*>{"tp", "tensor_parallel_degree"},
                                   {"cp", "context_parallel_degree"}})
      config::require(mesh->degree(dim) == 1, "parallelism.expert_parallel_degree = ", ep_degree,
                      " with parallelism.", key, " = ", mesh->degree(dim),
                      " is not supported yet; set one of them to 1");
    config::require(c.model.moe.capacity_factor == 0, "moe.capacity_factor = ", c.model.moe.capacity_factor,
                    " with parallelism.expert_parallel_degree = ", ep_degree,
                    ": the all-to-all dispatcher has no capacity yet; set capacity_factor = 0");
  }
  if (c.compile.graph() && summary.num_experts > 0)
    config::require(!c.compile.scan_layers, "compile.scan_layers = true: model ", c.model.name, "/", c.model.flavor,
                    " has MoE layers, whose expert loads and load-balancing losses graph mode's layer loop does not "
                    "carry out of its body yet; set compile.scan_layers = false (every layer recorded)");
  memory_snapshots = std::make_unique<MemorySnapshots>(c, world.rank(), log);
  {
    // Shapes only: each rank allocates and initialises what it holds once the plans have split and
    // sharded them (deferred initialisation, below), so no rank ever holds the whole model.
    MemoryOwnerScope owner(MemoryCategory::parameters);
    const MetaScope meta;
    model = spec.build(c.model, c.training.seq_len, rng);
  }
  config::require(model->vocab_size() >= tokenizer.vocab_size(), "model.vocab_size ", model->vocab_size(),
                  " is smaller than the ", tokenizer.vocab_size(), " ids of the ", tokenizer.description(),
                  "; raise model.vocab_size");
  if (const int64_t pp_degree = mesh->degree("pp"); pp_degree > 1) {
    const std::string key = "parallelism.pipeline_parallel_degree = " + std::to_string(pp_degree);
    config::require(mesh->degree("cp") == 1, key, " with parallelism.context_parallel_degree = ",
                    mesh->degree("cp"), " is not supported yet; use one of them");
    config::require(!c.validation.enable, key, " with validation.enable = true is not supported yet: ",
                    "validation runs the whole model on every rank; set it to false");
    const bool zero_bubble = c.parallelism.pipeline_parallel_schedule.starts_with("ZB");
    config::require(!zero_bubble || mesh->degree("dp_shard") == 1, key, " with schedule \"",
                    c.parallelism.pipeline_parallel_schedule, "\" and parallelism.data_parallel_shard_degree = ",
                    mesh->degree("dp_shard"),
                    ": FSDP frees a block's gathered weights after its backward, before the weight gradients a "
                    "zero-bubble schedule defers; use 1F1B or Interleaved1F1B with FSDP, or data_parallel_replicate_degree");
  }
  for (const auto& [dim, key] : {std::pair<const char*, const char*>{"tp", "tensor_parallel_degree"},
                                 {"cp", "context_parallel_degree"},
                                 {"pp", "pipeline_parallel_degree"}})
    config::require(spec.parallelize || mesh->degree(dim) == 1, "parallelism.", key, " = ", mesh->degree(dim),
                    ": model ", c.model.name, " has no plan for it; set it to 1");
  if (spec.parallelize) {
    const auto& ac = c.activation_checkpoint;
    // Graph mode's layer loop checkpoints by itself (GraphStepOptions::scan_saves).
    const bool graph_loop = c.compile.graph() && c.compile.scan_layers;
    models::Parallelized parts = spec.parallelize(
        *model, {.activation_checkpoint_mode = graph_loop ? "none" : ac.mode,
                 .activation_checkpoint_every_k = graph_loop ? 1 : ac.every_k(),
                 .mesh = mesh.get(),
                 .fsdp = {.reshard_after_forward = c.parallelism.fsdp_reshard_after_forward != "never"},
                 .tp = {.sequence_parallel = c.parallelism.enable_sequence_parallel,
                        .loss_parallel = !c.parallelism.disable_loss_parallel},
                 .seq_len = c.training.seq_len,
                 .block_q = c.model.attn.block_q,
                 .block_kv = c.model.attn.block_kv,
                 .pipeline = {.schedule = c.parallelism.pipeline_parallel_schedule,
                              .micro_batches = c.training.local_batch_size / c.parallelism.pipeline_parallel_microbatch_size,
                              .split_points = split_list(c.parallelism.pipeline_parallel_split_points)}});
    cp = std::move(parts.cp);
    tp = std::move(parts.tp);
    ep = std::move(parts.ep);
    pp = std::move(parts.pp);
    fsdp = std::move(parts.fsdp);
  }
  if (graph_mesh.tp > 1) {
    config::require(static_cast<bool>(spec.plan_tp), "parallelism.tensor_parallel_degree = ", graph_mesh.tp,
                    " with compile.mode = \"graph\": model ", c.model.name, " has no tensor-parallel plan; set it to 1");
    graph_tp = std::make_unique<parallel::TpLayout>(
        graph_mesh.tp, parallel::TensorParallelOptions{.sequence_parallel = c.parallelism.enable_sequence_parallel,
                                                       .loss_parallel = !c.parallelism.disable_loss_parallel});
    spec.plan_tp(*model, *graph_tp);
  }
  if (pp) {
    // Between stages: [micro-batch, seq, dim], the sequence split over tp under sequence parallelism.
    const int64_t tp_split = tp && tp->options().sequence_parallel ? mesh->degree("tp") : 1;
    pipeline = std::make_unique<parallel::PipelineExecutor>(
        pp->schedule(), pp->group(),
        Shape{c.parallelism.pipeline_parallel_microbatch_size, c.training.seq_len / tp_split, model->hidden_size()});
  }
  {
    MemoryOwnerScope owner(MemoryCategory::parameters);
    // A plan's slice first; a parameter outside this rank's pipeline stages is the empty box of it.
    parallel::SliceOf slice_of = [this, plans = slice_plans()](const std::string& name,
                                                               const Tensor&) -> std::optional<parallel::GlobalSlice> {
      for (const parallel::ParameterSlices* plan : plans)
        if (std::optional<parallel::GlobalSlice> slice = plan->slice_of(name)) return slice;
      return pp ? pp->slice_of(name) : std::nullopt;
    };
    parallel::deferred_init(*model, rng, fsdp.get(), slice_of);
  }
  install_global_expert_counts();
  config::require(
      fsdp || dp_style == parallel::DataParallelStyle::none || dp_style == parallel::DataParallelStyle::ddp,
      "parallelism.data_parallel_shard_degree = ", mesh->degree("dp_shard"), ": model ", c.model.name,
      " has no FSDP plan; set it to 1");
}

MicroBatchSums Trainer::State::run_pipeline(int64_t batches, const std::function<data::Batch()>& next,
                                            const GradientSync& sync) {
  const auto n = static_cast<double>(pipeline->schedule().micro_batches);
  MicroBatchSums sums;
  double compute = 0, wall = 0;
  for (int64_t batch = 0; batch < batches; ++batch) {
    const parallel::PipelineStepStats run = run_pipeline_batch(*model, *pp, *pipeline, next(), sync.loss,
                                                               1.0 / (static_cast<double>(batches) * n));
    sums.loss += run.loss_sum / n;
    sums.aux += run.aux_sum / n;
    sums.has_aux = sums.has_aux || run.has_aux;
    compute += run.compute_seconds;
    wall += run.wall_seconds;
  }
  // This rank's share of the schedule spent waiting; the metrics average it over the ranks.
  sums.extra.emplace_back("pp/bubble", wall > 0 ? 1 - compute / wall : 0.0);
  // The last stage's rank holds the losses, each stage's the auxiliary terms of its layers.
  dist::ProcessGroup& group = pp->group();
  sums.loss = group.all_reduce(sums.loss, dist::ReduceOp::sum);
  sums.aux = group.all_reduce(sums.aux, dist::ReduceOp::sum);
  sums.has_aux = group.all_reduce(sums.has_aux ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
  return sums;
}

std::vector<const parallel::ParameterSlices*> Trainer::State::slice_plans() const {
  std::vector<const parallel::ParameterSlices*> plans;
  if (tp) plans.push_back(tp.get());
  if (ep) plans.push_back(ep.get());
  return plans;
}

void Trainer::State::install_global_expert_counts() {
  // Every rank that routes tokens of its own (data, expert and context parallel ranks) counts
  // them; the expert bias and the expert-load figures need the step's global counts, the same on
  // every rank. Tensor-parallel ranks route the same tokens.
  std::vector<dist::ProcessGroup> groups;
  for (const char* dim : {"batch", "cp"})
    if ((*mesh)[dim].size() > 1) groups.push_back((*mesh)[dim]);
  if (groups.empty()) return;
  for (const auto& [name, m] : model->named_modules())
    if (auto* moe = dynamic_cast<nn::moe::MoE*>(m))
      moe->count_reducer = [groups](std::vector<int64_t>& counts) mutable {
        Tensor t = Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())});
        for (dist::ProcessGroup& g : groups) g.all_reduce(t, dist::ReduceOp::sum).wait();
        counts = t.to_vector<int64_t>();
      };
}

data::Batch Trainer::State::next_batch() {
  data::Batch b = loader->next();
  if (!cp) return b;
  cp->begin_batch(b.inputs.size(0), b.document_ids);
  b.inputs = cp->shard(b.inputs);
  b.labels = cp->shard(b.labels);
  if (b.document_ids.defined()) b.document_ids = cp->shard(b.document_ids);
  return b;
}

void Trainer::State::build_optimizer() {
  // The optimizer steps what this rank holds: the shards under FSDP, else the parameters.
  named_params = fsdp ? fsdp->named_shards() : model->named_parameters();
  const auto& named = named_params;
  for (auto& [n, p] : named) params.push_back(p);
  if (dp_style == parallel::DataParallelStyle::ddp)
    data_parallel = std::make_unique<parallel::DataParallel>(params, (*mesh)["dp"]);
  optimizer = std::make_unique<optim::AdamW>(named, cfg.optimizer.adamw_options());
  scheduler = std::make_unique<optim::LrScheduler>(*optimizer, cfg.lr_scheduler.schedule(cfg.training.steps));
}

void Trainer::State::build_metrics() {
  const JobConfig& c = cfg;
  // Rank 0 measures (ranks measuring at once on shared cores would each see a fraction) and
  // tells the others.
  if (world.rank() == 0) peak = resolve_peak_flops(c.metrics.peak_flops, matmul_dtype(c.training));
  if (world.size() > 1) {
    peak.flops_per_second = world.all_reduce(peak.flops_per_second, dist::ReduceOp::max);
    if (world.rank() != 0) peak.source = "rank 0's";
  }
  // Rank 0 writes metrics.jsonl and save_tb_folder; with save_for_all_ranks every other rank r
  // writes its own figures (its step time, throughput and memory) beside them.
  const int rank = world.rank();
  const bool writes_metrics = rank == 0 || c.metrics.save_for_all_ranks;
  metrics = std::make_unique<MetricsLogger>(
      MetricsOptions{
          .dump_folder = c.job.dump_folder,
          .log_freq = c.metrics.log_freq,
          .total_steps = c.training.steps,
          .peak_flops = peak.flops_per_second,
          .enable_jsonl = c.metrics.enable_jsonl && writes_metrics,
          .enable_tensorboard = c.metrics.enable_tensorboard && writes_metrics,
          .save_tb_folder = rank == 0 ? c.metrics.save_tb_folder
                                      : c.metrics.save_tb_folder + "/rank_" + std::to_string(rank),
          .jsonl_name = rank == 0 ? "metrics.jsonl" : "metrics_rank" + std::to_string(rank) + ".jsonl",
          .color = use_color(c.metrics.disable_color_printing, console_is_terminal(log)),
          .mode = c.compile.graph() ? "graph on " + c.compile.plugin : "",
          .device_peak_bytes = [this]() -> std::optional<int64_t> {
            if (!graph) return std::nullopt;
            const auto stats = graph->runner().client().memory_stats();
            return stats ? stats->peak_bytes_in_use : std::nullopt;
          }},
      log);
}

void Trainer::State::log_setup(const Data& d) {
  const JobConfig& c = cfg;
  const int64_t dp_size = (*mesh)["dp"].size();
  log << "titan: job \"" << c.job.description << "\", writing to " << c.job.dump_folder << "\n"
      << "titan: model " << c.model.name << "/" << c.model.flavor << ": " << summary.description << "\n"
      << "titan: " << summary.num_params << " parameters, " << summary.flops_per_token / 1e9
      << " GFLOP per token (training, seq " << c.training.seq_len << ")\n"
      << "titan: attention " << c.model.attention;
  if (c.model.attention == "splash")
    log << ", tiles of " << c.model.attn.block_q << " queries x " << c.model.attn.block_kv << " keys";
  log << (c.model.attn.document_masking ? ", documents masked from each other" : "")
      << "; activation checkpointing " << activation_checkpoint_summary(c) << "\n"
      << "titan: data " << c.data.dataset << " (" << d.options.path << "): " << d.dataset.stats.files
      << " files, " << d.dataset.stats.documents << " documents, " << loader->num_tokens() << " tokens, "
      << loader->num_windows() << " windows of " << c.training.seq_len << "; " << d.tokenizer->description()
      << "\n"
      << "titan: precision "
      << (matmul_dtype(c.training) == kBF16
              ? "bf16 matrix products (oneDNN " + kernels::cpu::onednn_version() + ", " +
                    kernels::cpu::onednn_bf16_isa() +
                    "), float32 weights, activations, reductions and optimizer"
              : "float32 (OpenBLAS " + kernels::cpu::blas_corename() + ")")
      << "\n"
      << "titan: batch " << c.training.local_batch_size << " x " << plan.gradient_accumulation_steps
      << " micro-batches"
      << (graph_mesh.dp() > 1 ? " per data-parallel device (" + std::to_string(graph_mesh.dp()) + " of them)" : "")
      << ", " << num_threads() << " threads, peak " << peak.flops_per_second / 1e9
      << " GFLOP/s (" << peak.source << ")\n";
  if (const std::string w = kernels::cpu::blas_kernel_warning(); !w.empty() && world.rank() == 0) warn(w);
  if (data_parallel)
    log << "titan: " << world.size() << " ranks, mesh dp_replicate " << mesh->degree("dp_replicate")
        << ": data parallel with replicated parameters (DDP), gradients averaged over " << dp_size
        << " ranks in " << data_parallel->num_buckets()
        << (data_parallel->num_buckets() == 1 ? " bucket" : " buckets") << " after backward; global batch "
        << plan.global_batch_size << "\n";
  if (fsdp)
    log << "titan: " << world.size() << " ranks, mesh dp_replicate " << mesh->degree("dp_replicate")
        << " x dp_shard " << mesh->degree("dp_shard") << ": " << parallel::style_name(dp_style)
        << ", parameters, gradients and optimizer "
        << "states sharded over " << mesh->degree("dp_shard") << " ranks (" << fsdp->shard_bytes() / 1e6
        << " MB of parameters on this rank); global batch " << plan.global_batch_size << "\n";
  if (ep)
    log << "titan: expert parallel over " << mesh->degree("ep") << " ranks ("
        << summary.num_experts / mesh->degree("ep") << " of the " << summary.num_experts
        << " experts of every MoE layer on each; tokens dispatched by all-to-all, batches of their own)\n";
  if (cp)
    log << "titan: context parallel over " << mesh->degree("cp") << " ranks (ring attention; each holds "
        << c.training.seq_len / mesh->degree("cp")
        << " tokens of every sequence, in two chunks that balance the causal mask)\n";
  if (tp)
    log << "titan: tensor parallel over " << mesh->degree("tp") << " ranks (Megatron plan"
        << (tp->options().sequence_parallel ? ", sequence parallel" : "")
        << (tp->options().loss_parallel ? ", loss over the split vocabulary"
                                        : ", logits gathered for the loss")
        << "); mesh dp_replicate " << mesh->degree("dp_replicate") << " x dp_shard "
        << mesh->degree("dp_shard") << " x tp " << mesh->degree("tp") << "\n";
  if (pp) {
    std::string spans;
    for (const parallel::StageSpan& span : pp->spans())
      spans += (spans.empty() ? "" : ", ") + std::to_string(span.first) + "-" + std::to_string(span.last - 1);
    log << "titan: pipeline parallel over " << mesh->degree("pp") << " ranks, layers " << spans
        << " by stage; " << parallel::describe_schedule(pp->schedule()) << "\n";
  }
  if (!d.dataset.stats.skipped.empty())
    log << "titan: data: " << d.dataset.stats.skipped_summary() << " (training.bad_data = skip)\n";
}

Trainer::Trainer(JobConfig cfg, std::ostream& log, dist::ProcessGroup world)
    : state_(std::make_unique<State>(std::move(cfg), log, std::move(world))) {
  State& s = *state_;
  const JobConfig& c = s.cfg;
  validate(c);
  refuse_missing_features(c);
  if (c.compile.graph()) {
    graph::RuntimeOptions runtime = graph_runtime(c);
    // Over several ranks the plugin joins the processes into one client, through a key-value
    // store that rank 0 serves.
    if (s.world.size() > 1) {
      add_process_options(runtime, s.world.rank(), s.world.size());
      runtime.store = dist::start_kv_store(s.world);
    }
    s.graph_runner.emplace(runtime);
    const graph::pjrt::Client& client = s.graph_runner->client();
    s.graph_mesh = graph_mesh(c.parallelism, s.world.size() > 1 ? client.global_device_count() : client.device_count());
    // A plugin that did not join the processes is named before the model is built.
    if (s.world.size() > 1) local_partitions(client, s.graph_mesh.devices(), &s.world);
  }
  // Graph mode's processes each load every device's rows and keep whole tensors on the host; the
  // plugin splits the step, so the eager side is one rank.
  s.mesh = c.compile.graph() ? dist::DeviceMesh::from_config(dist::ProcessGroup::single("world"), {}, c.comm)
                             : dist::DeviceMesh::from_config(s.world, c.parallelism, c.comm);
  s.dp_style = parallel::data_parallel_style(*s.mesh);
  s.plan = plan_batches(c.training, c.compile.graph() ? s.graph_mesh.dp() : (*s.mesh)["batch"].size());
  const State::Data data = s.build_data();
  s.build_model(*data.tokenizer);
  s.build_optimizer();
  s.build_metrics();
  s.log_setup(data);
  // Expert-parallel ranks validate batches of their own too.
  s.validator =
      make_validator(c, data.options, data.dataset, *data.tokenizer, data.eos_id, (*s.mesh)["batch"], s.log);
  s.checkpointer = std::make_unique<CheckpointManager>(
      c,
      Checkpointed{.model = *s.model,
                   .optimizer = *s.optimizer,
                   .scheduler = *s.scheduler,
                   .loader = *s.loader,
                   .rng = s.rng,
                   .fsdp = s.fsdp.get(),
                   .slices = s.slice_plans(),
                   .pp = s.pp.get(),
                   .replica_writer = s.mesh->coordinate("dp_replicate") == 0 && s.mesh->coordinate("cp") == 0,
                   .tokenizer_dir = tokenizer_dir(c.model.tokenizer_path)},
      s.log, s.world);
  s.start_step = s.checkpointer->load();
  if (c.compile.graph())
    s.graph = std::make_unique<GraphStep>(
        *s.model, *s.optimizer, s.named_params, std::move(*s.graph_runner),
        GraphStepOptions{.max_norm = c.training.max_norm,
                         .scan_layers = c.compile.scan_layers,
                         .scan_saves = c.compile.scan_layers ? scan_saves_for(c.activation_checkpoint)
                                                             : graph::ScanSaves::all,
                         .custom_kernels = c.compile.custom_kernels,
                         .mesh = s.graph_mesh,
                         .tp_splits = s.graph_tp ? s.graph_tp->splits() : std::map<std::string, int64_t>{},
                         .sequence_parallel = s.graph_tp && s.graph_tp->options().sequence_parallel,
                         .model_dim = model_dim(s.named_params),
                         .processes = s.world.size() > 1 ? &s.world : nullptr},
        s.log);
  if (s.graph) {
    s.graph_moe = std::make_unique<GraphMoeLayout>(*s.model, s.graph->custom_kernels().on);
    if (const auto& note = s.graph_moe->note()) s.log << "titan: " << *note << "\n";
  }
  s.profiler = std::make_unique<StepProfiler>(c.profiling, c.job.dump_folder, s.world.rank(), s.log);
  // Replicas start identical whatever each rank initialised or loaded.
  if (s.data_parallel) s.data_parallel->broadcast_parameters();
}

Trainer::~Trainer() = default;

TrainResult Trainer::train() {
  State& s = *state_;
  const JobConfig& c = s.cfg;
  TrainResult result;
  result.steps_run = result.resumed_from = s.start_step;
  CpuAllocator::instance().reset_peak();
  const int64_t accum = s.plan.gradient_accumulation_steps;
  // Per device, as TorchTitan counts them: the ranks (or graph mode's devices) that split one model
  // (its pipeline stages, tensor slices and sequence chunks) share its tokens, so that tps and MFU
  // stay per device.
  const int64_t model_parallel = s.mesh->degree("pp") * s.mesh->degree("tp") * s.mesh->degree("cp") * s.graph_mesh.tp;
  const int64_t tokens_per_step = c.training.local_batch_size * c.training.seq_len * accum / model_parallel;
  // Steps and validation multiply in the configured precision (core/autocast.h).
  const AutocastGuard precision(matmul_dtype(c.training));
  for (int64_t step = s.start_step + 1; step <= c.training.steps; ++step) {
    s.profiler->begin_step(step);
    auto t0 = std::chrono::steady_clock::now();
    double lr = s.optimizer->lr();
    GradientSync sync;
    if (s.data_parallel)
      sync = {.before_backward = [&](bool last) { s.data_parallel->set_gradient_sync(last); },
              .reduce = [&] { s.data_parallel->average_gradients(); }};
    if (s.fsdp)
      sync = {.before_backward = [&](bool last) { s.fsdp->set_gradient_sync(last); },
              .reduce = [&] { s.fsdp->reduce_gradients(); },
              .sum_norm_partials = [&](double partial) { return s.fsdp->sum_over_shards(partial); }};
    if (s.cp) {
      // Each cp rank's gradients come from its own tokens: averaged over cp after dp's reduction.
      sync.reduce = [&, dp_reduce = sync.reduce] {
        if (dp_reduce) dp_reduce();
        s.cp->average_gradients(s.params);
      };
    }
    if (s.tp) {
      // Data parallelism first (its reductions average over dp), then the tp sums.
      sync.reduce = [&, dp_reduce = sync.reduce] {
        if (dp_reduce) dp_reduce();
        s.tp->reduce_partial_gradients(s.named_params);
      };
      sync.sum_norm_partials = [&, dp_sum = sync.sum_norm_partials](double partial) {
        return s.tp->group().all_reduce(dp_sum ? dp_sum(partial) : partial, dist::ReduceOp::sum);
      };
      sync.norm_params = s.tp->norm_params(s.named_params);
      sync.loss = [&](const Tensor& logits, const Tensor& labels) { return s.tp->loss(logits, labels); };
    }
    if (s.ep) {
      // After data parallelism's reduction: the experts' gradients scaled, the others averaged over ep.
      sync.reduce = [&, dp_reduce = sync.reduce] {
        if (dp_reduce) dp_reduce();
        s.ep->reduce_gradients(s.named_params);
      };
      sync.sum_norm_partials = [&, dp_sum = sync.sum_norm_partials](double partial) {
        return s.ep->sum_norm_partials(dp_sum ? dp_sum(partial) : partial);
      };
      sync.norm_params = s.ep->norm_params(s.named_params);
    }
    if (s.pp) {
      // Each rank holds its stages' parameters: their norms add up over pp.
      sync.sum_norm_partials = [&, inner = sync.sum_norm_partials](double partial) {
        return s.pp->group().all_reduce(inner ? inner(partial) : partial, dist::ReduceOp::sum);
      };
      sync.forward_backward = [&](int64_t batches, const std::function<data::Batch()>& next) {
        return s.run_pipeline(batches, next, sync);
      };
    }
    StepStats stats = s.memory_snapshots->run_step(step, [&] {
      if (s.graph) {
        std::vector<data::Batch> batches;
        for (int64_t i = 0; i < accum; ++i) batches.push_back(s.next_batch());
        const GraphStep::Result r = s.graph->run(batches);
        StepStats stats{.loss = r.loss, .grad_norm = r.grad_norm, .extra = {}};
        if (r.aux_loss) stats.extra.emplace_back("aux_loss", *r.aux_loss);
        for (auto& scalar : s.model->end_step()) stats.extra.push_back(std::move(scalar));
        return stats;
      }
      return train_step(
          *s.model, *s.optimizer, s.params, c.training.max_norm, accum, [&] { return s.next_batch(); }, sync);
    });
    s.scheduler->step();
    double loss_mean = stats.loss, grad_norm = stats.grad_norm;
    // The loss and the model's figures of the global batch: every data-parallel and
    // expert-parallel rank saw an equal share of it. Extremes ("..._min", "..._max") combine as
    // such, the rest as means. So did every cp rank of its tokens. Pipeline stages hold the figures
    // of their own layers (the loss is already the step's on every stage).
    for (const std::string dim : {"batch", "cp", "pp"}) {
      dist::ProcessGroup& group = (*s.mesh)[dim];
      if (group.size() == 1) continue;
      if (dim != "pp") loss_mean = group.all_reduce(loss_mean, dist::ReduceOp::avg);
      for (auto& [name, value] : stats.extra) {
        if (name.ends_with("_max"))
          value = group.all_reduce(value, dist::ReduceOp::max);
        else if (name.ends_with("_min"))
          value = -group.all_reduce(-value, dist::ReduceOp::max);
        else
          value = group.all_reduce(value, dist::ReduceOp::avg);
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    TITAN_CHECK(std::isfinite(loss_mean), "training: loss became ", loss_mean, " at step ", step,
                "; lower optimizer.lr or raise lr_scheduler.warmup_steps");
    result.losses.push_back(loss_mean);
    result.grad_norms.push_back(grad_norm);
    result.steps_run = step;
    std::optional<LoggedMetrics> logged = s.metrics->record({.step = step,
                                                             .loss = loss_mean,
                                                             .grad_norm = grad_norm,
                                                             .lr = lr,
                                                             .tokens = tokens_per_step,
                                                             .step_seconds = seconds,
                                                             .flops_per_token = s.summary.flops_per_token,
                                                             .extra = stats.extra});
    if (logged && logged->mfu_percent > 100.0 && !s.warned_peak) {
      // A peak measured while the machine was busy is too low, and stays cached.
      s.warn("MFU above 100% means the peak FLOP/s figure (" + s.peak.source +
             ") is too low, probably measured while the machine was busy; delete that cache file or set "
             "metrics.peak_flops");
      s.warned_peak = true;
    }
    // Graph mode keeps the weights on the device: the host's copies are brought up to date for
    // what reads them.
    const bool validates = s.validator && s.validator->should_validate(step, c.training.steps);
    if (s.graph && validates) s.graph->to_host();
    if (validates) {
      result.validations.push_back(s.validator->validate(step, *s.model, s.fsdp.get(), s.tp.get()));
      s.metrics->record_validation(result.validations.back());
    }
    // A signal may reach some ranks a step before others; all stop after the same step.
    bool stop = StopOnSignal::requested();
    if (s.world.size() > 1) stop = s.world.all_reduce(stop ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
    s.memory_snapshots->after_step(step);
    // Rank 0 alone writes a graph run's whole tensors, but over several processes gathering them
    // is collective: every rank gathers when a save is due.
    if (s.graph && !validates && s.checkpointer->due_after(step, stop)) s.graph->to_host();
    s.checkpointer->after_step(step, stop);
    s.profiler->end_step([&] { s.checkpointer->wait(); });
    if (stop && step < c.training.steps) {
      s.log << "titan: stop requested; stopped cleanly after step " << step << "\n";
      result.interrupted = true;
      break;
    }
  }
  if (s.graph) s.graph->to_host();
  s.checkpointer->wait();
  // Rank 0 alone writes checkpoints: no rank returns before they are on disk, so that a run
  // started next (a resume) finds them on every rank.
  if (s.world.size() > 1) s.world.barrier().wait();
  return result;
}

DryRunReport dry_run(const JobConfig& cfg, int world_size, int rank, std::ostream& log) {
  validate(cfg);
  CpuAllocator::instance().reset_peak();
  const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
  Trainer::State s(cfg, log, dist::ProcessGroup::simulated(rank, world_size));
  const JobConfig& c = s.cfg;
  s.mesh = dist::DeviceMesh::from_config(s.world, c.parallelism, c.comm);
  s.dp_style = parallel::data_parallel_style(*s.mesh);
  s.plan = plan_batches(c.training, (*s.mesh)["batch"].size());
  // The byte tokenizer: the model's vocabulary is the config's, and no data is read.
  s.build_model(*data::load_tokenizer(""));
  s.build_optimizer();
  DryRunReport r{.world_size = world_size, .rank = rank};
  r.peak_bytes = CpuAllocator::instance().stats().peak_allocated_bytes - before;
  for (const Tensor& p : s.params) r.param_bytes += static_cast<int64_t>(p.nbytes());
  r.training_bytes = 4 * r.param_bytes;  // parameters, gradients and two moments of the same size
  const double gb = 1.0 / (1 << 30);
  std::string layout;
  for (const char* dim : dist::DeviceMesh::kDims)
    layout += (layout.empty() ? "" : " x ") + std::string(dim) + " " + std::to_string(s.mesh->degree(dim));
  log << "titan: dry run of rank " << rank << " of " << world_size << " (" << layout << "), model "
      << c.model.name << "/" << c.model.flavor << ": " << s.summary.num_params / 1e9 << " B parameters\n"
      << "titan: this rank holds " << r.param_bytes * gb << " GiB of parameters; training keeps "
      << r.training_bytes * gb << " GiB (parameters, gradients, AdamW moments)\n"
      << "titan: start-up peak " << r.peak_bytes * gb
      << " GiB = " << static_cast<double>(r.peak_bytes) / static_cast<double>(r.training_bytes)
      << " of what training keeps (the whole model would be " << 4.0 * s.summary.num_params * gb << " GiB)\n";
  return r;
}

void print_pipeline_schedule(const JobConfig& cfg, std::ostream& out) {
  validate(cfg);
  const dist::ParallelismConfig& p = cfg.parallelism;
  const parallel::PipelineSchedule schedule = parallel::make_schedule(
      p.pipeline_parallel_schedule, p.pipeline_parallel_degree,
      cfg.training.local_batch_size / p.pipeline_parallel_microbatch_size,
      parallel::stages_per_rank(p.pipeline_parallel_schedule, p.pipeline_parallel_degree,
                                split_list(p.pipeline_parallel_split_points).size()));
  out << "titan: " << parallel::describe_schedule(schedule) << "\n" << parallel::format_schedule(schedule);
}

StopOnSignal::StopOnSignal() {
  reset();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
StopOnSignal::~StopOnSignal() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  reset();
}
bool StopOnSignal::requested() {
  return g_stop.load();
}
void StopOnSignal::request() {
  g_stop.store(true);
}
void StopOnSignal::reset() {
  g_stop.store(false);
  g_signals.store(0);
}

}  // namespace titan::train
