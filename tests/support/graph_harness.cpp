#include "support/graph_harness.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "titan/autograd/grad_mode.h"
#include "titan/graph/lazy.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/train/custom_kernels.h"

namespace titan::test {

namespace {

// The loss both runs differentiate: sum_i sum(out_i * r_i).
Tensor weighted_sum(const std::vector<Tensor>& outs, const std::vector<Tensor>& weights) {
  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!is_floating(outs[i].dtype())) continue;
    Tensor term = ops::sum(ops::mul(outs[i], weights[i])).to(kF32);
    loss = loss.defined() ? ops::add(loss, term) : term;
  }
  return loss;
}

std::vector<Tensor> weights_for(const std::vector<Tensor>& outs) {
  Generator gen(1234);
  std::vector<Tensor> weights;
  for (const Tensor& o : outs)
    weights.push_back(is_floating(o.dtype()) ? Tensor::randn(o.sizes(), gen, {.dtype = o.dtype()})
                                             : Tensor());
  return weights;
}

}  // namespace

graph::RuntimeOptions test_runtime_options() {
  const char* plugin = std::getenv("TITAN_GRAPH_PLUGIN");
  const char* options = std::getenv("TITAN_GRAPH_PLUGIN_OPTIONS");
  return graph::parse_runtime_options(plugin && *plugin ? plugin : "cpu", options ? options : "",
                                      "TITAN_GRAPH_PLUGIN_OPTIONS");
}

graph::Runner& test_runner() {
  static graph::Runner runner(test_runtime_options());
  return runner;
}

double max_relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(kF64).to_vector<double>(), y = b.to(kF64).to_vector<double>();
  TITAN_CHECK(x.size() == y.size(), "max_relative_error: ", a.desc(), " vs ", b.desc());
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / scale;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

GraphEager run_eager_and_graph(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs, bool with_grads, bool scan_layers,
                               bool custom_kernels, graph::ScanSaves scan_saves) {
  GraphEager result;
  // Eager.
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.clone().detach();
    if (with_grads && is_floating(t.dtype())) leaf.requires_grad_();
    leaves.push_back(leaf);
  }
  std::vector<Tensor> outs = fn(leaves);
  std::vector<Tensor> weights = weights_for(outs);
  for (const Tensor& o : outs) result.eager.push_back(o.detach());
  if (with_grads) {
    weighted_sum(outs, weights).backward();
    for (const Tensor& l : leaves)
      if (l.requires_grad()) result.eager.push_back(l.grad());
  }

  // Captured: the inputs and weights are parameters of the program, and so are tables an op reads
  // from the host (RoPE's), declared when the op runs: between the inputs and the weights.
  graph::Program program;
  program.set_scan_layers(scan_layers);
  program.set_scan_saves(scan_saves);
  program.set_custom_kernels(custom_kernels && train::enable_custom_kernels(test_runner(), true).on);
  std::vector<graph::Value> results;
  std::vector<std::pair<int64_t, Tensor>> feeds;  // (parameter's value id, its data) of inputs and weights
  {
    graph::CaptureScope scope(program);
    std::vector<Tensor> lazy;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const graph::Value v = program.parameter(inputs[i].sizes(), inputs[i].dtype(),
                                               "input" + std::to_string(i), graph::InputKind::batch);
      feeds.emplace_back(v.id, inputs[i]);
      Tensor t = graph::tensor_of(v);
      if (with_grads && is_floating(inputs[i].dtype())) t.requires_grad_();
      lazy.push_back(t);
    }
    std::vector<Tensor> louts = fn(lazy);
    for (const Tensor& o : louts) results.push_back(graph::value_of(o, "output"));
    if (with_grads) {
      std::vector<Tensor> lweights;
      for (size_t i = 0; i < weights.size(); ++i) {
        if (!weights[i].defined()) {
          lweights.emplace_back();
          continue;
        }
        const graph::Value v = program.parameter(weights[i].sizes(), weights[i].dtype(),
                                                 "weight" + std::to_string(i), graph::InputKind::batch);
        feeds.emplace_back(v.id, weights[i]);
        lweights.push_back(graph::tensor_of(v));
      }
      weighted_sum(louts, lweights).backward();
      for (const Tensor& l : lazy)
        if (l.requires_grad()) results.push_back(graph::value_of(l.grad(), "gradient"));
    }
  }
  std::vector<Tensor> fed;
  for (const graph::Parameter& p : program.parameters()) {
    if (p.kind == graph::InputKind::host) fed.push_back(p.host);
    for (const auto& [id, t] : feeds)
      if (id == p.value.id) fed.push_back(t);
  }
  graph::Runner& runner = test_runner();
  result.module = program.module_text(results);
  graph::pjrt::Executable* exe = runner.compile(result.module).executable;
  std::vector<graph::pjrt::Buffer> buffers;
  buffers.reserve(fed.size());
  std::vector<graph::pjrt::Buffer*> args;
  for (const Tensor& t : fed) {
    buffers.push_back(runner.upload(t));
    args.push_back(&buffers.back());
  }
  for (const graph::pjrt::Buffer& b : exe->execute(args)) result.graph.push_back(runner.download(b));
  return result;
}

}  // namespace titan::test
