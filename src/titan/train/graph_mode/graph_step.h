#pragma once
// Graph mode's training step ([compile] enable = true): forward, backward,
// gradient clipping and AdamW captured once as one StableHLO program (graph/), compiled by a PJRT
// plugin and replayed every step. The parameters and AdamW's moments live on the device between
// steps, donated to each run and replaced by its results (input/output aliasing); the host copies
// (the model's tensors, the optimizer's state) are brought up to date only when something reads
// them: a checkpoint save, validation, the end of the run.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "titan/data/loader.h"
#include "titan/dist/process_group.h"
#include "titan/graph/collectives.h"
#include "titan/graph/runner.h"
#include "titan/models/causal_lm.h"
#include "titan/nn/module.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/activation_checkpoint_config.h"
#include "titan/train/graph_mode/custom_kernels.h"
#include "titan/train/graph_mode/graph_sharding.h"
#include "titan/train/graph_mode/stacked_state.h"

namespace titan::train {

struct GraphStepOptions {
  graph::RuntimeOptions runtime = {};
  double max_norm = 1.0;
  bool scan_layers = true;  // compile.scan_layers
  // What the layer loop keeps for backward (scan_saves_for).
  graph::ScanSaves scan_saves = graph::ScanSaves::all;
  // compile.custom_kernels: titan's CPU kernels as custom calls where the plugin can run them
  // (train/graph_mode/custom_kernels.h). GraphStep narrows it to what its plugin allows; capture_train_step
  // emits the calls as it is given, so a caller that compiles elsewhere registers them first.
  bool custom_kernels = true;
  // compile.cudnn_attention, and the platform the step is compiled for (GraphStep sets it from its
  // plugin): attention on a CUDA plugin as cuDNN's custom calls (attention/attention_choice.h).
  bool cudnn_attention = true;
  graph::Program::Platform platform = graph::Program::Platform::cpu;
  // The most packed documents a row of the batches holds (Program::max_documents): GraphStep sets
  // it from the batches where cuDNN's attention can take them; 0: no bound.
  int64_t max_documents = 0;
  // The devices the step is split over ([parallelism] degrees; train/graph_mode/graph_sharding.h), and the
  // dim of each parameter the tensor-parallel plan splits (parallel::TpLayout::splits).
  GraphMesh mesh = GraphMesh();
  std::map<std::string, int64_t> tp_splits = {};
  // The tensor-parallel layout's sequence parallelism (parallel::TpLayout's options): the residual
  // stream between blocks splits along the sequence over tp too (carry_sharding).
  bool sequence_parallel = false;
  // The model's hidden size, for the tensor-parallel traffic on paper (planned_traffic); 0: not
  // estimated.
  int64_t model_dim = 0;
  // Over several processes (train/graph_mode/graph_processes.h): all of them, one per rank, whose plugin
  // joined them into one client; each holds its own devices' pieces. Null: one process.
  dist::ProcessGroup* processes = nullptr;
  // The module lists whose blocks a loop runs: parameters "<list>.<i>.<rest>" are stacked per
  // list and rest (stacked_state.h) when scan_layers.
  std::vector<std::string> layer_lists = {"layers"};
};

// The model family's side of the step: a micro-batch is a list of tensors (the program's inputs),
// and this says what the loss of one is. A language model's is CausalLmLoss; FLUX's flow matching
// is train/flux/flux_step.cpp's.
class StepLoss {
 public:
  virtual ~StepLoss() = default;
  struct Terms {
    Tensor loss;  // what the backward starts from, without `aux`
    Tensor aux;   // the model's auxiliary loss, added to `loss` for the backward; undefined: none
  };
  // Micro-batch `batch`'s loss, computed from its tensors (the program's values while capturing).
  virtual Terms loss(const std::vector<Tensor>& batch) = 0;
  virtual nn::Module& module() = 0;  // for its persistent buffers
  // The model's step records (CausalLM::take_step_records), after the micro-batches' forwards, and
  // their values handed back after each run.
  virtual std::vector<Tensor> take_step_records() { return {}; }
  virtual void put_step_records(std::vector<Tensor>) {}
  // For the layout's traffic on paper (planned_traffic): the blocks, and a micro-batch's tokens.
  virtual int64_t num_layers() const = 0;
  virtual int64_t tokens(const std::vector<Tensor>& batch) const = 0;
  // The most packed documents a row of `batch` holds, numbered as the loader numbers them
  // (attention::packed_documents_per_row); 0 without document ids, nullopt for ids of another form.
  virtual std::optional<int64_t> documents_per_row(const std::vector<Tensor>& batch) const {
    (void)batch;
    return 0;
  }
};

// A language model's step loss: cross-entropy of the logits of inputs (document-masked where the
// batch has document ids) against labels, and the model's auxiliary loss.
class CausalLmLoss : public StepLoss {
 public:
  explicit CausalLmLoss(models::CausalLM& model) : model_(model) {}
  // inputs, labels, then the document ids where `b` has them.
  static std::vector<Tensor> tensors(const data::Batch& b);
  Terms loss(const std::vector<Tensor>& batch) override;
  nn::Module& module() override { return model_; }
  std::vector<Tensor> take_step_records() override { return model_.take_step_records(); }
  void put_step_records(std::vector<Tensor> records) override { model_.put_step_records(std::move(records)); }
  int64_t num_layers() const override { return model_.num_layers(); }
  int64_t tokens(const std::vector<Tensor>& batch) const override { return batch.front().numel(); }
  std::optional<int64_t> documents_per_row(const std::vector<Tensor>& batch) const override;

 private:
  models::CausalLM& model_;
};

// [activation_checkpoint] for graph mode's layer loop: mode none keeps every result the backward
// reads (all), full only each block's input (the backward computes the block again), selective
// "op" the products (matrix products, attention, custom calls). A layer interval (selective "k")
// is an error: the loop does the same for every layer.
graph::ScanSaves scan_saves_for(const parallel::ActivationCheckpointConfig& ac);

// What feeds one parameter of the captured step.
struct StepInput {
  enum class Source : uint8_t { state, batch, scalar, host, buffer };
  Source source = Source::state;
  // into the state (plan_state's slots: parameters, then moments), the batch tensors, the scalars,
  // `host` or `buffers`
  size_t index = 0;
};

// The training step recorded as one program, before anything runs: what GraphStep compiles, and
// what bench_graph_compile compiles for models too large to hold.
struct CapturedStep {
  std::string text;           // the StableHLO module
  int64_t ops = 0;            // ops recorded (a loop's body counted once)
  double seconds = 0;         // capture time
  std::vector<std::string> notes;  // the lowerings' choices, for the log (Program::notes)
  std::vector<StepInput> inputs;
  std::vector<int> donated;   // the state's parameters, replaced by the results of the same index
  std::vector<Tensor> host;   // tables read from the host (RoPE's), for StepInput::Source::host
  // The model's persistent buffers (MoE's expert bias), which the host updates between steps: read
  // for every run, for StepInput::Source::buffer.
  std::vector<Tensor> buffers;
  // The results after the state, the loss and the gradient norm: the auxiliary loss (if the model
  // adds one), then the model's step records (CausalLM::take_step_records) that are values of the
  // step, in its order. A record the capture already knew on the host (a dispatcher that drops
  // nothing gives a 0) is kept here, in its place; the others are undefined here.
  bool aux = false;
  std::vector<Tensor> records;
  // Over several devices (options.mesh): each input's and result's sharding, in program order.
  std::vector<graph::Sharding> input_shardings;
  std::vector<graph::Sharding> result_shardings;
};
// Captures forward, backward, clipping and AdamW over micro-batches shaped as `batches` (their
// values are not read; each micro-batch's tensors as `loss` reads them). The parameters may be
// meta tensors.
CapturedStep capture_train_step(StepLoss& loss, const optim::AdamW& optimizer,
                                const std::vector<std::pair<std::string, Tensor>>& params,
                                const std::vector<std::vector<Tensor>>& batches, const GraphStepOptions& options);
// A language model's step (CausalLmLoss).
CapturedStep capture_train_step(models::CausalLM& model, const optim::AdamW& optimizer,
                                const std::vector<std::pair<std::string, Tensor>>& params,
                                const std::vector<data::Batch>& batches, const GraphStepOptions& options);

class GraphStep {
 public:
  // Uploads the parameters and the optimizer's state as they are now (after any checkpoint load).
  GraphStep(models::CausalLM& model, optim::AdamW& optimizer, std::vector<std::pair<std::string, Tensor>> named_params,
            GraphStepOptions options, std::ostream& log);
  // On a runner made already (options.runtime is then not read): the trainer's, which sized the
  // mesh by its devices.
  GraphStep(models::CausalLM& model, optim::AdamW& optimizer, std::vector<std::pair<std::string, Tensor>> named_params,
            graph::Runner runner, GraphStepOptions options, std::ostream& log);
  // Another family's step: `loss` over micro-batches of its own tensors.
  GraphStep(std::unique_ptr<StepLoss> loss, optim::AdamW& optimizer,
            std::vector<std::pair<std::string, Tensor>> named_params, graph::Runner runner, GraphStepOptions options,
            std::ostream& log);

  struct Result {
    double loss = 0;       // mean over the micro-batches, the auxiliary loss included
    double grad_norm = 0;  // before clipping
    std::optional<double> aux_loss = std::nullopt;  // its mean, for a model that adds one
  };
  // One optimizer step over `batches` (the micro-batches of gradient accumulation). Captured and
  // compiled on the first step and again whenever the batches' shapes or the precision change;
  // a program compiled before is taken from the cache. The model's step records reach it
  // (put_step_records) for its end_step.
  Result run(const std::vector<data::Batch>& batches);
  // The same over micro-batches of StepLoss tensors.
  Result run(const std::vector<std::vector<Tensor>>& batches);

  // Copies the device's parameters and optimizer state into the model and the optimizer.
  void to_host();

  int64_t compiles() const { return runner_.compiles(); }
  double last_compile_seconds() const { return last_compile_seconds_; }
  const graph::Runner& runner() const { return runner_; }
  // Over several devices, of the program compiled last: the collectives the partitioner inserted,
  // per step, and what the layout should send on paper.
  const graph::CollectiveCount& collectives() const { return collectives_; }
  const PlannedTraffic& planned_traffic() const { return planned_; }
  // The bytes of the parameters and moments that this process's device `device` holds (its shards).
  int64_t state_bytes(int device = 0) const;
  const GraphMesh& mesh() const { return options_.mesh; }
  // Whether titan's kernels run as custom calls, and the log's line about it.
  const CustomKernels& custom_kernels() const { return custom_kernels_; }

 private:
  // The program's key: the batches' shapes and the precision; equal keys replay one program.
  std::string key_of(const std::vector<std::vector<Tensor>>& batches) const;

  std::unique_ptr<StepLoss> loss_;
  optim::AdamW& optimizer_;
  std::vector<std::pair<std::string, Tensor>> params_;
  GraphStepOptions options_;
  std::ostream& log_;
  graph::Runner runner_;
  CustomKernels custom_kernels_;
  int64_t steps_taken_ = 0;  // AdamW's step count, the same for every parameter
  std::vector<StateSlot> slots_;  // how the parameters are laid out in state_
  // The partition each of this process's devices runs (local_partitions), in its client's order.
  std::vector<int64_t> partitions_;
  // Per device of this process: the slots' parameters, then first moments, then second moments
  // (its shards).
  std::vector<std::vector<graph::pjrt::Buffer>> state_;
  std::vector<graph::Sharding> state_shardings_;  // one per buffer of a device's state_
  std::string key_;
  // The bound on packed documents a row of any batch so far held, a power of two (options_'s
  // max_documents for batches of the loader's form); it only grows, so a batch with fewer
  // documents replays the program compiled for more.
  int64_t documents_bound_ = 0;
  double last_compile_seconds_ = 0.0;
  graph::CollectiveCount collectives_;
  PlannedTraffic planned_;
  // Counts the collectives of a fresh compile over several devices and logs them beside the plan.
  void log_collectives(const std::string& optimized_text, const std::vector<std::vector<Tensor>>& batches);
  graph::pjrt::Executable* executable_ = nullptr;
  CapturedStep captured_;
  // Per device of this process: captured_.host, uploaded at capture.
  std::vector<std::vector<graph::pjrt::Buffer>> host_buffers_;
  // This process's device d's piece of `host` under `sharding` (partitions_[d]'s), uploaded to it.
  graph::pjrt::Buffer upload(const Tensor& host, const graph::Sharding& sharding, int device) const;
  // The whole tensor whose pieces are state_[d][i] for every device d, every process's.
  Tensor download_state(size_t i) const;
};

}  // namespace titan::train
