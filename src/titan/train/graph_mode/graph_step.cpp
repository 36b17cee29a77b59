#include "titan/train/graph_mode/graph_step.h"

#include <bit>
#include <chrono>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>

#include "titan/attention/cudnn_attention.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/optim/clip.h"
#include "titan/train/graph_mode/graph_processes.h"
#include "titan/train/graph_mode/stacked_state.h"

namespace titan::train {

namespace {

// The tensors of a step's micro-batches, in the order the program takes them.
std::vector<Tensor> batch_tensors(const std::vector<std::vector<Tensor>>& batches) {
  std::vector<Tensor> out;
  for (const std::vector<Tensor>& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<std::vector<Tensor>> lm_tensors(const std::vector<data::Batch>& batches) {
  std::vector<std::vector<Tensor>> out;
  for (const data::Batch& b : batches) out.push_back(CausalLmLoss::tensors(b));
  return out;
}

// "0.123": seconds for the log.
std::string seconds_text(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << s;
  return out.str();
}

// Runs one phase of the capture; an error in it (an op without a lowering, most likely) says which.
void in_phase(const std::string& phase, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    throw Error("graph mode: while capturing " + phase + " of the training step: " + e.message());
  }
}

// Each slot's buffer's sharding over the step's devices (graph_sharding.h); a stack's members
// share their plan.
std::vector<graph::Sharding> slot_shardings(const std::vector<StateSlot>& slots,
                                            const std::vector<std::pair<std::string, Tensor>>& params,
                                            const GraphStepOptions& options) {
  std::vector<graph::Sharding> out;
  for (const StateSlot& slot : slots) {
    const auto it = options.tp_splits.find(params[slot.members[0]].first);
    const std::optional<int64_t> tp_dim = it == options.tp_splits.end() ? std::nullopt : std::optional(it->second);
    out.push_back(parameter_sharding(options.mesh, slot.shape, slot.stacked, tp_dim));
  }
  return out;
}

}  // namespace

std::vector<Tensor> CausalLmLoss::tensors(const data::Batch& b) {
  std::vector<Tensor> out{b.inputs, b.labels};
  if (b.document_ids.defined()) out.push_back(b.document_ids);
  return out;
}

std::optional<int64_t> CausalLmLoss::documents_per_row(const std::vector<Tensor>& batch) const {
  if (batch.size() < 3) return 0;
  return attention::packed_documents_per_row(batch[2]);
}

StepLoss::Terms CausalLmLoss::loss(const std::vector<Tensor>& batch) {
  const Tensor doc = batch.size() > 2 ? batch[2] : Tensor();
  Terms terms{.loss = ops::cross_entropy(model_(batch[0], doc), batch[1]), .aux = Tensor()};
  if (const Tensor aux = model_.auxiliary_loss(); aux.defined()) terms.aux = aux;
  return terms;
}

graph::ScanSaves scan_saves_for(const parallel::ActivationCheckpointConfig& ac) {
  if (ac.mode == "none") return graph::ScanSaves::all;
  if (ac.mode == "full") return graph::ScanSaves::inputs;
  TITAN_CHECK(ac.per_op(), "activation_checkpoint.selective_ac_option = \"", ac.selective_ac_option,
              "\": graph mode's layer loop keeps the same for every layer, so it cannot checkpoint every k-th one; "
              "use selective_ac_option = \"op\" (keep matrix products and attention), mode = \"full\" or \"none\", "
              "or compile.scan_layers = false (every layer recorded, checkpointed as in eager mode)");
  return graph::ScanSaves::products;
}

CapturedStep capture_train_step(models::CausalLM& model, const optim::AdamW& optimizer,
                                const std::vector<std::pair<std::string, Tensor>>& params,
                                const std::vector<data::Batch>& batches, const GraphStepOptions& options) {
  CausalLmLoss loss(model);
  return capture_train_step(loss, optimizer, params, lm_tensors(batches), options);
}

CapturedStep capture_train_step(StepLoss& step_loss, const optim::AdamW& optimizer,
                                const std::vector<std::pair<std::string, Tensor>>& params,
                                const std::vector<std::vector<Tensor>>& batches, const GraphStepOptions& options) {
  namespace hlo = graph::hlo;
  using Source = StepInput::Source;
  TITAN_CHECK(!batches.empty(), "graph mode: a step needs at least one micro-batch");
  const auto t0 = std::chrono::steady_clock::now();
  CapturedStep out;
  graph::Program program;
  const int64_t devices = options.mesh.size();
  program.set_partitions(devices);
  program.set_scan_layers(options.scan_layers);
  // Between blocks the residual stream stays split along the batch as the batch is (FSDP's data
  // parallelism), and along the sequence under sequence parallelism.
  if (devices > 1) {
    program.set_carry_sharding(carry_sharding(options.mesh, options.sequence_parallel));
    program.set_activation_layout([mesh = options.mesh](const Shape& shape, std::optional<int64_t> split_dim) {
      return activation_sharding(mesh, shape, split_dim);
    });
  }
  program.set_scan_saves(options.scan_saves);
  program.set_custom_kernels(options.custom_kernels);
  program.set_platform(options.platform);
  program.set_cudnn_attention(options.cudnn_attention);
  program.set_max_documents(options.max_documents);
  graph::CaptureScope scope(program);
  const std::vector<StateSlot> slots = plan_state(params, optimizer, options.scan_layers, options.layer_lists);
  const size_t n = slots.size();
  const std::vector<graph::Sharding> slot_sharding = slot_shardings(slots, params, options);
  // Each input's sharding, in the order of out.inputs.
  const auto shard = [&](const graph::Value& v, const graph::Sharding& sharding) {
    if (devices > 1) program.shard(v, sharding);
    out.input_shardings.push_back(sharding);
  };

  // The state: a buffer per slot for the parameters, then for the moments, each donated to the
  // result that replaces it. A stacked slot's members name its rows.
  std::vector<graph::Value> state;
  for (const char* which : {"", ".exp_avg", ".exp_avg_sq"})
    for (size_t k = 0; k < n; ++k) {
      state.push_back(program.parameter(slots[k].shape, params[slots[k].members[0]].second.dtype(),
                                        slots[k].name + which, graph::InputKind::state));
      shard(state.back(), slot_sharding[k]);
    }
  graph::BoundTensors bound;
  for (size_t k = 0; k < n; ++k)
    for (size_t i = 0; i < slots[k].members.size(); ++i) {
      const Tensor& p = params[slots[k].members[i]].second;
      bound.bind(p, slots[k].stacked ? program.row(state[k], static_cast<int64_t>(i)) : state[k]);
      p.set_grad(Tensor());
    }
  for (size_t i = 0; i < 3 * n; ++i) {
    out.inputs.push_back({.source = Source::state, .index = i});
    out.donated.push_back(static_cast<int>(i));
  }
  // The update's per-step scalars (AdamW::step_scalars), so that one program serves every step.
  std::vector<graph::Value> scalars;
  for (const char* name : {"adamw.decay", "adamw.neg_step_size", "adamw.bc2_sqrt"}) {
    out.inputs.push_back({.source = Source::scalar, .index = scalars.size()});
    scalars.push_back(program.parameter({}, kF64, name, graph::InputKind::batch));
    shard(scalars.back(), {});
  }
  std::vector<std::vector<Tensor>> batch;
  size_t k = 0;
  for (const std::vector<Tensor>& micro_batch : batches) {
    batch.emplace_back();
    for (const Tensor& t : micro_batch) {
      out.inputs.push_back({.source = Source::batch, .index = k});
      const graph::Value v = program.parameter(t.sizes(), t.dtype(), "batch." + std::to_string(k++),
                                               graph::InputKind::batch);
      shard(v, batch_sharding(options.mesh, t.dim()));
      batch.back().push_back(graph::tensor_of(v));
    }
  }
  for (const auto& [name, b] : step_loss.module().named_buffers(/*persistent_only=*/true)) {
    out.inputs.push_back({.source = Source::buffer, .index = out.buffers.size()});
    out.buffers.push_back(b);
    bound.bind(b, program.parameter(b.sizes(), b.dtype(), "buffer." + name, graph::InputKind::batch));
    out.input_shardings.emplace_back();
  }

  // Forward and backward of each micro-batch, as eager's train_step runs them.
  const double micro = static_cast<double>(batches.size());
  Tensor loss_sum, aux_sum;
  for (size_t b = 0; b < batches.size(); ++b) {
    Tensor loss;
    in_phase("the forward and loss of micro-batch " + std::to_string(b), [&] {
      const StepLoss::Terms terms = step_loss.loss(batch[b]);
      loss = terms.loss;
      if (terms.aux.defined()) {
        aux_sum = aux_sum.defined() ? ops::add(aux_sum, terms.aux.detach()) : terms.aux.detach();
        loss = ops::add(loss, terms.aux);
      }
    });
    loss_sum = loss_sum.defined() ? ops::add(loss_sum, loss.detach()) : loss.detach();
    in_phase("the backward of micro-batch " + std::to_string(b),
             [&] { (batches.size() == 1 ? loss : ops::scale(loss, 1.0 / micro)).backward(); });
  }

  // Clipping and AdamW, once per slot (every parameter has a gradient: the model uses all of them).
  std::vector<graph::Value> grads;
  for (const StateSlot& slot : slots) grads.push_back(slot_gradient(slot, params));
  const graph::Value norm = optim::grad_norm_lowered(grads);
  const graph::Value coef = optim::clip_coefficient_lowered(norm, options.max_norm);
  std::vector<graph::Value> results(3 * n);
  for (size_t k = 0; k < n; ++k) {
    // A stack's members share their decay (plan_state).
    const graph::Value decay = optimizer.decays(params[slots[k].members[0]].first) ? scalars[0] : hlo::scalar(1.0, kF64);
    const optim::LoweredAdamW u = optim::adamw_update_lowered(state[k], grads[k], state[n + k], state[2 * n + k], decay,
                                                              scalars[1], scalars[2], coef, optimizer.options());
    results[k] = u.param;
    results[n + k] = u.exp_avg;
    results[2 * n + k] = u.exp_avg_sq;
  }
  results.push_back(hlo::mul(graph::value_of(loss_sum, "loss"), 1.0 / micro));
  results.push_back(norm);
  out.aux = aux_sum.defined();
  if (out.aux) results.push_back(hlo::mul(graph::value_of(aux_sum, "auxiliary loss"), 1.0 / micro));
  for (const Tensor& r : step_loss.take_step_records()) {
    if (r.is_lazy()) results.push_back(graph::value_of(r, "the model's step records"));
    out.records.push_back(r.is_lazy() ? Tensor() : r);
  }
  std::vector<std::pair<int, int>> aliases;
  for (size_t i = 0; i < 3 * n; ++i) aliases.emplace_back(static_cast<int>(i), static_cast<int>(i));

  // Tables the model read from the host (RoPE's).
  for (size_t i = out.inputs.size(); i < program.parameters().size(); ++i) {
    const graph::Parameter& p = program.parameters()[i];
    TITAN_CHECK(p.kind == graph::InputKind::host, "graph mode: unexpected input '", p.name, "' in the captured step");
    out.inputs.push_back({.source = Source::host, .index = out.host.size()});
    out.host.push_back(p.host);
    out.input_shardings.emplace_back();
  }
  out.result_shardings.assign(results.size(), graph::Sharding{});
  for (size_t i = 0; i < 3 * n; ++i) out.result_shardings[i] = slot_sharding[i % n];
  out.text = program.module_text(results, aliases, devices > 1 ? out.result_shardings : std::vector<graph::Sharding>{});
  out.ops = program.num_ops();
  out.notes = program.notes();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

GraphStep::GraphStep(models::CausalLM& model, optim::AdamW& optimizer,
                     std::vector<std::pair<std::string, Tensor>> named_params, GraphStepOptions options,
                     std::ostream& log)
    : GraphStep(model, optimizer, std::move(named_params), graph::Runner(options.runtime), options, log) {}

GraphStep::GraphStep(models::CausalLM& model, optim::AdamW& optimizer,
                     std::vector<std::pair<std::string, Tensor>> named_params, graph::Runner runner,
                     GraphStepOptions options, std::ostream& log)
    : GraphStep(std::make_unique<CausalLmLoss>(model), optimizer, std::move(named_params), std::move(runner),
                std::move(options), log) {}

GraphStep::GraphStep(std::unique_ptr<StepLoss> loss, optim::AdamW& optimizer,
                     std::vector<std::pair<std::string, Tensor>> named_params, graph::Runner runner,
                     GraphStepOptions options, std::ostream& log)
    : loss_(std::move(loss)),
      optimizer_(optimizer),
      params_(std::move(named_params)),
      options_(std::move(options)),
      log_(log),
      runner_(std::move(runner)),
      custom_kernels_(enable_custom_kernels(runner_, options_.custom_kernels, options_.mesh.size())) {
  options_.custom_kernels = custom_kernels_.on;
  options_.platform = runner_.platform();
  TITAN_CHECK(!params_.empty(), "graph mode: the model has no parameters to train");
  const int64_t devices = options_.mesh.size();
  partitions_ = local_partitions(runner_.client(), devices, options_.processes);
  steps_taken_ = optimizer_.state(params_.front().first).step;
  for (const auto& [name, p] : params_) {
    TITAN_CHECK(optimizer_.state(name).step == steps_taken_, "graph mode: parameter '", name, "' has taken ",
                optimizer_.state(name).step, " optimizer steps and '", params_.front().first, "' ", steps_taken_,
                "; the compiled update takes one step count for all parameters");
    TITAN_CHECK(p.dtype() == kF32, "graph mode: parameter '", name, "' is ", p.desc(),
                "; graph mode trains float32 master weights (training.mixed_precision_param sets the "
                "precision of the products)");
  }
  slots_ = plan_state(params_, optimizer_, options_.scan_layers, options_.layer_lists);
  const std::vector<graph::Sharding> per_slot = slot_shardings(slots_, params_, options_);
  state_.resize(partitions_.size());
  for (int which = 0; which < 3; ++which)
    for (size_t k = 0; k < slots_.size(); ++k) {
      const Tensor whole = gather_slot(slots_[k], [&](size_t m) {
        const auto& [name, p] = params_[m];
        return which == 0 ? p : which == 1 ? optimizer_.state(name).exp_avg : optimizer_.state(name).exp_avg_sq;
      });
      state_shardings_.push_back(per_slot[k]);
      for (size_t d = 0; d < state_.size(); ++d) state_[d].push_back(upload(whole, per_slot[k], static_cast<int>(d)));
    }
  log_ << "titan: graph mode on " << runner_.describe() << "\n";
  if (devices > 1) log_ << "titan: graph mode: the step split over " << options_.mesh.describe() << "\n";
  if (options_.processes != nullptr && options_.processes->size() > 1)
    log_ << "titan: graph mode: " << options_.processes->size() << " processes, this one (" << options_.processes->rank()
         << ") runs partitions " << shape_str(partitions_) << "\n";
  log_ << "titan: graph mode: titan's kernels as custom calls: " << custom_kernels_.note << "\n";
}

graph::pjrt::Buffer GraphStep::upload(const Tensor& host, const graph::Sharding& sharding, int device) const {
  return runner_.upload(graph::shard_of(host, sharding, partitions_[static_cast<size_t>(device)]), device);
}

int64_t GraphStep::state_bytes(int device) const {
  int64_t total = 0;
  for (const graph::pjrt::Buffer& b : state_.at(device)) total += numel_of(b.dims()) * static_cast<int64_t>(dtype_size(b.dtype()));
  return total;
}

Tensor GraphStep::download_state(size_t i) const {
  if (options_.mesh.size() == 1) return runner_.download(state_[0][i]);
  std::vector<Tensor> pieces;
  for (const auto& device : state_) pieces.push_back(runner_.download(device[i]));
  if (options_.processes != nullptr && options_.processes->size() > 1)
    return gather_whole(pieces, partitions_, state_shardings_[i], options_.mesh.size(), *options_.processes);
  return graph::unshard(pieces, state_shardings_[i]);
}

std::string GraphStep::key_of(const std::vector<std::vector<Tensor>>& batches) const {
  std::string key = std::string(dtype_name(autocast_dtype()));
  for (const Tensor& t : batch_tensors(batches)) {
    key += ' ';
    key += t.desc();
  }
  if (options_.max_documents > 0) key += " documents<=" + std::to_string(options_.max_documents);
  return key;
}

GraphStep::Result GraphStep::run(const std::vector<data::Batch>& batches) { return run(lm_tensors(batches)); }

GraphStep::Result GraphStep::run(const std::vector<std::vector<Tensor>>& batches) {
  // cuDNN's attention over packed documents takes a static bound on the documents a row holds: a
  // batch with more than the program was captured for makes a new program, bound by the next
  // power of two at or above its most, and ids of another form one that leaves documents to XLA.
  if (options_.platform == graph::Program::Platform::cuda && options_.cudnn_attention && options_.mesh.size() == 1) {
    std::optional<int64_t> most = 0;
    for (const std::vector<Tensor>& b : batches) {
      const std::optional<int64_t> n = loss_->documents_per_row(b);
      most = n && most ? std::optional(std::max(*most, *n)) : std::nullopt;
    }
    if (most && *most > documents_bound_) documents_bound_ = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(*most)));
    options_.max_documents = most ? documents_bound_ : 0;
  }
  const std::string key = key_of(batches);
  // This process's devices, and the program's partitions: more where other processes hold some.
  const int devices = static_cast<int>(state_.size());
  const int64_t partitions = options_.mesh.size();
  if (key != key_ || executable_ == nullptr) {
    captured_ = capture_train_step(*loss_, optimizer_, params_, batches, options_);
    host_buffers_.clear();
    host_buffers_.resize(devices);
    for (size_t i = 0; i < captured_.host.size(); ++i)
      for (int d = 0; d < devices; ++d) host_buffers_[d].push_back(runner_.upload(captured_.host[i], d));
    const graph::Runner::Compiled compiled =
        runner_.compile(captured_.text, partitions, /*keep_optimized_text=*/partitions > 1);
    executable_ = compiled.executable;
    if (compiled.fresh) last_compile_seconds_ = compiled.seconds;
    log_ << "titan: graph mode: captured the step (" << captured_.ops << " ops, " << captured_.text.size() / 1024
         << " KiB of StableHLO) in " << seconds_text(captured_.seconds) << " s; "
         << (compiled.fresh ? "compiled in " + seconds_text(compiled.seconds) + " s" : std::string("compiled before"))
         << " (" << key << ")\n";
    for (const std::string& note : captured_.notes) log_ << "titan: graph mode: " << note << "\n";
    if (compiled.fresh && partitions > 1) log_collectives(compiled.optimized_text, batches);
    key_ = key;
  }
  const int64_t step = steps_taken_ + 1;
  const std::string& first = params_.front().first;
  const kernels::cpu::AdamWScalars s = optimizer_.step_scalars(first, step);
  const std::vector<Tensor> batch = batch_tensors(batches);
  const std::vector<double> scalars{s.decay, s.neg_step_size, s.bc2_sqrt};
  // What each device's run reads: its own state and tables, and its piece of what is uploaded.
  std::vector<std::vector<graph::pjrt::Buffer>> uploaded(devices);
  std::vector<std::vector<graph::pjrt::Buffer*>> args(devices);
  using Source = StepInput::Source;
  for (int d = 0; d < devices; ++d) {
    uploaded[d].reserve(captured_.inputs.size());
    for (size_t i = 0; i < captured_.inputs.size(); ++i) {
      const StepInput& in = captured_.inputs[i];
      const graph::Sharding& sharding = captured_.input_shardings[i];
      switch (in.source) {
        case Source::state: args[d].push_back(&state_[d][in.index]); break;
        case Source::host: args[d].push_back(&host_buffers_[d][in.index]); break;
        case Source::buffer:
          uploaded[d].push_back(upload(captured_.buffers[in.index], sharding, d));
          args[d].push_back(&uploaded[d].back());
          break;
        case Source::batch:
          uploaded[d].push_back(upload(batch[in.index], sharding, d));
          args[d].push_back(&uploaded[d].back());
          break;
        case Source::scalar:
          uploaded[d].push_back(upload(Tensor::scalar<double>(scalars[in.index]), sharding, d));
          args[d].push_back(&uploaded[d].back());
          break;
      }
    }
  }
  std::vector<std::vector<graph::pjrt::Buffer>> out;
  if (partitions == 1)
    out.push_back(executable_->execute(args[0], captured_.donated));
  else
    out = executable_->execute_partitioned(args, captured_.donated);
  for (int d = 0; d < devices; ++d)
    for (size_t i = 0; i < state_[d].size(); ++i) state_[d][i] = std::move(out[d][i]);
  ++steps_taken_;
  // The loss, the norm and the records are replicated: device 0's are everyone's.
  const std::vector<graph::pjrt::Buffer>& first_out = out[0];
  size_t at = state_[0].size();
  Result r{.loss = runner_.download(first_out[at]).item(), .grad_norm = runner_.download(first_out[at + 1]).item()};
  at += 2;
  if (captured_.aux) r.aux_loss = runner_.download(first_out[at++]).item();
  std::vector<Tensor> records;
  for (const Tensor& known : captured_.records)
    records.push_back(known.defined() ? known : runner_.download(first_out[at++]));
  loss_->put_step_records(std::move(records));
  return r;
}

void GraphStep::log_collectives(const std::string& optimized_text,
                                const std::vector<std::vector<Tensor>>& batches) {
  if (optimized_text.empty()) {
    log_ << "titan: graph mode: the plugin wrote no optimized program, so its collectives are not counted\n";
    return;
  }
  const GraphMesh& mesh = options_.mesh;
  collectives_ = graph::count_collectives(optimized_text, mesh.size());
  double param_bytes = 0;
  for (const auto& [name, p] : params_) param_bytes += static_cast<double>(p.nbytes());
  const double tokens =
      static_cast<double>(loss_->tokens(batches.front())) / static_cast<double>(mesh.degree(MeshAxis::dp));
  planned_ = train::planned_traffic(mesh, param_bytes, static_cast<int64_t>(batches.size()), loss_->num_layers(),
                                    tokens * static_cast<double>(options_.model_dim) * 4.0);
  // Formatted apart: the log is the console, whose later figures (the final loss) keep its own precision.
  const auto mib = [](double bytes) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(2) << bytes / (1 << 20) << " MiB";
    return out.str();
  };
  const auto ratio = [](double r) {
    std::ostringstream out;
    out << std::setprecision(3) << r << "x";
    return out.str();
  };
  log_ << "titan: graph mode: collectives per step, from the compiled program:";
  if (collectives_.kinds.empty()) log_ << " none";
  for (const graph::CollectiveTally& k : collectives_.kinds)
    log_ << " " << k.kind << " x" << k.count << " (" << mib(k.result_bytes) << ")";
  log_ << (collectives_.unknown_trips ? " (a loop of unknown trip count counted once)" : "") << "; each device sends about "
       << mib(collectives_.traffic_bytes()) << ", the layout needs " << mib(planned_.total()) << " on paper (FSDP "
       << mib(planned_.fsdp) << ", HSDP " << mib(planned_.hsdp) << ", TP "
       << (options_.model_dim > 0 ? mib(planned_.tp) : std::string("not estimated")) << ")";
  if (planned_.total() > 0) log_ << ": " << ratio(collectives_.traffic_bytes() / planned_.total());
  log_ << "\n";
}

void GraphStep::to_host() {
  const size_t n = slots_.size();
  std::map<std::string, Tensor> optimizer_state;
  for (size_t k = 0; k < n; ++k) {
    const StateSlot& slot = slots_[k];
    const Tensor param = download_state(k), exp_avg = download_state(n + k), exp_avg_sq = download_state(2 * n + k);
    for (size_t i = 0; i < slot.members.size(); ++i) {
      const auto& [name, p] = params_[slot.members[i]];
      p.detach().copy_(member_of(slot, param, i));
      optimizer_state[name + ".exp_avg"] = member_of(slot, exp_avg, i);
      optimizer_state[name + ".exp_avg_sq"] = member_of(slot, exp_avg_sq, i);
      optimizer_state[name + ".step"] = Tensor::scalar<int64_t>(steps_taken_);
    }
  }
  optimizer_.load_state_dict(optimizer_state);
}

}  // namespace titan::train
