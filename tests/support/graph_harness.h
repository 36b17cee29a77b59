#pragma once
// Runs one function both ways — eagerly, and captured as a StableHLO program run through the PJRT
// plugin of graph mode — so that a test compares each lowering with its eager kernel, forward and
// backward.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"
#include "titan/graph/runner.h"

namespace titan::test {

struct GraphEager {
  std::vector<Tensor> eager, graph;  // fn's outputs, then (with grads) the inputs' gradients
  std::string module = {};           // the captured program's text
};

// With grads, every floating input requires grad, the loss is sum_i sum(out_i * r_i) with fixed
// random r_i, and the floating inputs' gradients follow the outputs in both vectors. scan_layers:
// the captured program lowers autograd::scan_blocks as a loop, whose forward keeps `scan_saves` for
// its backward. custom_kernels: titan's kernels run as custom calls where the test runner's plugin
// can (train/graph_mode/custom_kernels.h); off, XLA's lowerings. max_documents: the bound on
// packed documents a row holds that the program is captured with (Program::max_documents).
GraphEager run_eager_and_graph(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs, bool with_grads = true, bool scan_layers = false,
                               bool custom_kernels = false, graph::ScanSaves scan_saves = graph::ScanSaves::all,
                               int64_t max_documents = 0);
// The three ScanSaves, with their names for SCOPED_TRACE.
inline const std::vector<std::pair<graph::ScanSaves, const char*>> kAllScanSaves = {
    {graph::ScanSaves::inputs, "loop keeping inputs"},
    {graph::ScanSaves::products, "loop keeping products"},
    {graph::ScanSaves::all, "loop keeping all"}};

// The runner the graph tests share: the plugin named by $TITAN_GRAPH_PLUGIN, else "cpu".
graph::Runner& test_runner();
// What test_runner is made from: $TITAN_GRAPH_PLUGIN and $TITAN_GRAPH_PLUGIN_OPTIONS, for tests
// that make runners of their own (a GraphStep's).
graph::RuntimeOptions test_runtime_options();

// How many times `what` occurs in `text` (a module's ops, a log's lines).
size_t occurrences(const std::string& text, const std::string& what);

// max |a - b| / max(max |b|, 1e-12) over the elements of two host tensors of one shape.
double max_relative_error(const Tensor& a, const Tensor& b);

}  // namespace titan::test
