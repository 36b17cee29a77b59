#include "support/graph_harness.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "titan/train/graph_mode/captured_function.h"
#include "titan/train/graph_mode/custom_kernels.h"

namespace titan::test {

namespace {

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
                               bool custom_kernels, graph::ScanSaves scan_saves, int64_t max_documents) {
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
    // The loss both runs differentiate: sum_i sum(out_i * r_i) (r_i undefined for a non-float output).
    train::vjp_objective(outs, weights).backward();
    for (const Tensor& l : leaves)
      if (l.requires_grad()) result.eager.push_back(l.grad());
  }

  // Captured: the inputs and weights are parameters of the program.
  std::vector<Tensor> captured;
  for (const Tensor& t : inputs) {
    Tensor in = t.clone().detach();
    if (with_grads && is_floating(t.dtype())) in.requires_grad_();
    captured.push_back(in);
  }
  train::CapturedFunction f(test_runner(), [&] { return fn(captured); }, captured,
                            with_grads ? weights : std::vector<Tensor>{},
                            {.scan_layers = scan_layers,
                             .scan_saves = scan_saves,
                             .custom_kernels = custom_kernels,
                             .max_documents = max_documents});
  result.module = f.module();
  result.graph = f.run_to_host();
  return result;
}

}  // namespace titan::test
