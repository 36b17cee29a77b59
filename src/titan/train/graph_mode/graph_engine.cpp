#include "titan/train/graph_mode/graph_engine.h"

#include <map>
#include <optional>
#include <string>

#include "titan/dist/tcp_store.h"
#include "titan/parallel/tp_layout.h"
#include "titan/train/graph_mode/graph_moe.h"
#include "titan/train/graph_mode/graph_processes.h"
#include "titan/train/graph_mode/graph_step.h"

namespace titan::train {

namespace {

// The hidden size: the width of the token embedding's rows, 0 for a model without one.
int64_t model_dim(const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const auto& [name, p] : params)
    if (name.ends_with("tok_embeddings.weight") && p.dim() == 2) return p.size(1);
  return 0;
}

// What [compile] and [training] set of the step, whatever the model.
GraphStepOptions step_options(const JobConfig& c, const GraphMesh& mesh) {
  return {.max_norm = c.training.max_norm,
          .scan_layers = c.compile.scan_layers,
          .scan_saves = c.compile.scan_layers ? scan_saves_for(c.activation_checkpoint) : graph::ScanSaves::all,
          .custom_kernels = c.compile.custom_kernels,
          .cudnn_attention = c.compile.cudnn_attention,
          .mesh = mesh};
}

class GraphEngine : public StepEngine {
 public:
  GraphEngine(const StepParts& parts, graph::Runner runner, const GraphMesh& mesh) : model_(parts.model) {
    const JobConfig& c = parts.cfg;
    if (mesh.degree(MeshAxis::tp) > 1) {
      tp_ = std::make_unique<parallel::TpLayout>(
          mesh.degree(MeshAxis::tp),
          parallel::TensorParallelOptions{.sequence_parallel = c.parallelism.enable_sequence_parallel,
                                          .loss_parallel = !c.parallelism.disable_loss_parallel});
      parts.spec.plan_tp(parts.model, *tp_);
    }
    GraphStepOptions options = step_options(c, mesh);
    if (tp_) options.tp_splits = tp_->splits();
    options.sequence_parallel = tp_ && tp_->options().sequence_parallel;
    options.model_dim = model_dim(parts.named_params);
    options.processes = parts.world.size() > 1 ? &parts.world : nullptr;
    step_ = std::make_unique<GraphStep>(parts.model, parts.optimizer, parts.named_params, std::move(runner),
                                        std::move(options), parts.log);
    moe_ = std::make_unique<GraphMoeLayout>(parts.model, step_->custom_kernels().on);
    if (const auto& note = moe_->note()) parts.log << "titan: " << *note << "\n";
  }

  StepStats step(int64_t micro_batches, const NextBatch& next_batch) override {
    std::vector<data::Batch> batches;
    for (int64_t i = 0; i < micro_batches; ++i) batches.push_back(next_batch());
    const GraphStep::Result r = step_->run(batches);
    StepStats stats{.loss = r.loss, .grad_norm = r.grad_norm, .extra = {}};
    if (r.aux_loss) stats.extra.emplace_back("aux_loss", *r.aux_loss);
    for (auto& scalar : model_.end_step()) stats.extra.push_back(std::move(scalar));
    return stats;
  }
  void to_host() override { step_->to_host(); }
  std::string describe() const override { return "graph, " + step_->runner().describe(); }
  std::optional<int64_t> device_peak_bytes() const override { return graph_peak_bytes(*step_); }

 private:
  models::CausalLM& model_;
  // Its hooks on the model are read while the step is captured.
  std::unique_ptr<parallel::TpLayout> tp_;
  std::unique_ptr<GraphStep> step_;
  std::unique_ptr<GraphMoeLayout> moe_;
};

class GraphMode : public ExecutionMode {
 public:
  Layout lay_out(const dist::MeshDegrees& degrees, dist::ProcessGroup world, const JobConfig& c) override {
    graph::RuntimeOptions runtime =
        graph::parse_runtime_options(c.compile.plugin, c.compile.plugin_options, "compile.plugin_options");
    runtime.xla_options = graph::parse_xla_options(c.compile.xla_options, "compile.xla_options");
    // On the CPU plugin without a device count, as many devices as the degrees name, where the
    // plugin's own default would be one per core.
    bool counted = false;
    for (const auto& option : runtime.client_options) counted = counted || option.name == "cpu_device_count";
    if (runtime.plugin == "cpu" && !counted) runtime.client_options.push_back({"cpu_device_count", degrees.named_size()});
    // Over several ranks the plugin joins the processes into one client, through a key-value
    // store that rank 0 serves.
    const bool joined = world.size() > 1;
    if (joined) {
      add_process_options(runtime, world.rank(), world.size());
      runtime.store = dist::start_kv_store(world);
    }
    runner_.emplace(runtime);
    plugin_ = c.compile.plugin;
    const graph::pjrt::Client& client = runner_->client();
    Layout layout{.dims = dist::ParallelDims(degrees, joined ? client.global_device_count() : client.device_count(),
                                             dist::MeshUnits::devices),
                  .mesh = nullptr};
    // A plugin that did not join the processes is named before the model is built.
    if (joined) local_partitions(client, layout.dims.size(), &world);
    // Each process loads every device's rows and keeps whole tensors on the host; the plugin
    // splits the step, so the eager side is one rank.
    dist::ProcessGroup single = dist::ProcessGroup::single("world");
    single.set_timeout_seconds(world.timeout_seconds());
    layout.mesh = std::make_unique<dist::DeviceMesh>(std::move(single), dist::ParallelDims());
    mesh_ = layout.dims;
    return layout;
  }

  Checkpointing checkpointing(const JobConfig& c) const override {
    if (!c.compile.scan_layers) return ExecutionMode::checkpointing(c);
    // The layer loop checkpoints by itself (GraphStepOptions::scan_saves): no block is wrapped.
    switch (scan_saves_for(c.activation_checkpoint)) {
      case graph::ScanSaves::all: return {.summary = "off (the layer loop keeps every result its backward reads)"};
      case graph::ScanSaves::inputs:
        return {.summary = "full (the layer loop keeps each block's input and computes it again in backward)"};
      case graph::ScanSaves::products:
        return {.summary = "selective op (the layer loop keeps matrix products and attention, and recomputes the rest "
                           "in backward)"};
    }
    return {};
  }

  std::string label() const override { return "graph on " + plugin_; }

  // The process keeps the whole model on the host and the plugin lays out each device's share of
  // the step itself: the plan is one device's micro-batch with the whole model's state.
  std::string memory_plan_scope(int, int) const override {
    return "graph mode, one device of the layout: its micro-batch's activations, with the parameters, "
           "gradients and moments counted whole as this process keeps them on the host; the plugin's device "
           "buffers are not counted";
  }

  std::unique_ptr<StepEngine> make_engine(const StepParts& parts) override {
    return std::make_unique<GraphEngine>(parts, take_runner(), mesh_);
  }

  // The runner lay_out made, for the one engine or step made on it.
  graph::Runner take_runner() {
    TITAN_CHECK(runner_.has_value(), "graph mode: an engine made before lay_out, or twice");
    graph::Runner runner = std::move(*runner_);
    runner_.reset();
    return runner;
  }
  const GraphMesh& mesh() const { return mesh_; }

 private:
  std::optional<graph::Runner> runner_;  // made by lay_out, until the engine takes it
  GraphMesh mesh_;
  std::string plugin_;
};

}  // namespace

std::unique_ptr<ExecutionMode> make_graph_mode() {
  return std::make_unique<GraphMode>();
}

std::optional<int64_t> graph_peak_bytes(const GraphStep& step) {
  const auto stats = step.runner().client().memory_stats();
  return stats ? stats->peak_bytes_in_use : std::nullopt;
}

std::unique_ptr<GraphStep> make_graph_step(ExecutionMode& mode, std::unique_ptr<StepLoss> loss, const JobConfig& cfg,
                                           optim::AdamW& optimizer,
                                           const std::vector<std::pair<std::string, Tensor>>& named_params,
                                           std::vector<std::string> layer_lists, dist::ProcessGroup& world,
                                           std::ostream& log) {
  auto* graph_mode = dynamic_cast<GraphMode*>(&mode);
  TITAN_CHECK(graph_mode != nullptr, "make_graph_step: the execution mode is not graph mode (compile.enable = false)");
  const GraphMesh& mesh = graph_mode->mesh();
  TITAN_CHECK(mesh.model_parallel() == 1 && mesh.degree(MeshAxis::ep) == 1,
              "graph mode: this model's step splits only its data over devices; the layout names ", mesh.describe(),
              "; set parallelism.tensor_parallel_degree, context_parallel_degree, pipeline_parallel_degree and "
              "expert_parallel_degree to 1, or compile.enable = false");
  GraphStepOptions options = step_options(cfg, mesh);
  options.layer_lists = std::move(layer_lists);
  options.processes = world.size() > 1 ? &world : nullptr;
  return std::make_unique<GraphStep>(std::move(loss), optimizer, named_params, graph_mode->take_runner(),
                                     std::move(options), log);
}

}  // namespace titan::train
