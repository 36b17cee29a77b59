#include "titan/train/graph_mode/captured_function.h"

#include <utility>

#include "titan/graph/lazy.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/train/graph_mode/custom_kernels.h"

namespace titan::train {

Tensor vjp_objective(const std::vector<Tensor>& outs, const std::vector<Tensor>& douts) {
  Tensor objective;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!douts[i].defined()) continue;
    const Tensor term = ops::sum(ops::mul(outs[i], douts[i])).to(kF32);
    objective = objective.defined() ? ops::add(objective, term) : term;
  }
  return objective;
}

FunctionCapture capture_function(graph::Program& program, const std::function<std::vector<Tensor>()>& fn,
                                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& douts) {
  FunctionCapture out;
  std::vector<graph::Value> results;
  // The inputs' gradients from before (an eager run's) stay theirs: the capture's are its own.
  std::vector<Tensor> earlier_grads;
  for (const Tensor& in : inputs) {
    earlier_grads.push_back(in.grad());
    in.set_grad(Tensor());
  }
  {
    graph::CaptureScope scope(program);
    graph::BoundTensors bound;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const graph::Value v = program.parameter(inputs[i].sizes(), inputs[i].dtype(), "input" + std::to_string(i),
                                               graph::InputKind::batch);
      out.feeds.emplace_back(v.id, inputs[i].contiguous());
      bound.bind(inputs[i], v);
    }
    const std::vector<Tensor> outs = fn();
    for (const Tensor& o : outs) results.push_back(graph::value_of(o, "an output of the captured function"));
    if (!douts.empty()) {
      TITAN_CHECK(douts.size() == outs.size(), "CapturedFunction: ", douts.size(), " douts for ", outs.size(),
                  " outputs; give one per output (undefined for one without a gradient)");
      std::vector<Tensor> lazy_douts;
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!douts[i].defined()) {
          lazy_douts.emplace_back();
          continue;
        }
        const graph::Value v = program.parameter(douts[i].sizes(), douts[i].dtype(), "dout" + std::to_string(i),
                                                 graph::InputKind::batch);
        out.feeds.emplace_back(v.id, douts[i].contiguous());
        lazy_douts.push_back(graph::tensor_of(v));
      }
      const Tensor objective = vjp_objective(outs, lazy_douts);
      TITAN_CHECK(objective.defined(), "CapturedFunction: douts were given, but all undefined");
      objective.backward();
      for (const Tensor& in : inputs)
        if (in.requires_grad()) results.push_back(graph::value_of(in.grad(), "a gradient of the captured function"));
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i].set_grad(earlier_grads[i]);
  out.module = program.module_text(results);
  return out;
}

CapturedFunction::CapturedFunction(graph::Runner& runner, const std::function<std::vector<Tensor>()>& fn,
                                   const std::vector<Tensor>& inputs, const std::vector<Tensor>& douts,
                                   const CaptureOptions& options)
    : runner_(runner) {
  graph::Program program;
  program.set_scan_layers(options.scan_layers);
  program.set_scan_saves(options.scan_saves);
  custom_kernels_ = options.custom_kernels && enable_custom_kernels(runner, true).on;
  program.set_custom_kernels(custom_kernels_);
  program.set_platform(runner.platform());
  program.set_cudnn_attention(options.cudnn_attention);
  program.set_max_documents(options.max_documents);
  FunctionCapture capture = capture_function(program, fn, inputs, douts);
  module_ = std::move(capture.module);
  const graph::Runner::Compiled compiled = runner.compile(module_);
  executable_ = compiled.executable;
  compile_seconds_ = compiled.seconds;
  for (const graph::Parameter& p : program.parameters()) {
    if (p.kind == graph::InputKind::host) args_.push_back(runner.upload(p.host));
    for (const auto& [id, t] : capture.feeds)
      if (id == p.value.id) args_.push_back(runner.upload(t));
  }
}

std::vector<graph::pjrt::Buffer> CapturedFunction::run() {
  std::vector<graph::pjrt::Buffer*> args;
  args.reserve(args_.size());
  for (graph::pjrt::Buffer& b : args_) args.push_back(&b);
  return executable_->execute(args);
}

std::vector<Tensor> CapturedFunction::run_to_host() {
  std::vector<Tensor> out;
  for (const graph::pjrt::Buffer& b : run()) out.push_back(runner_.download(b));
  return out;
}

}  // namespace titan::train
