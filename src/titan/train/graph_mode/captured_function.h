#pragma once
// Graph mode for one function of tensors (a layer, an op) rather than a training step: its forward,
// and optionally its backward, captured once into one program, compiled through a PJRT plugin,
// and run as often as wanted on inputs uploaded once. The benchmarks time a layer this way beside
// its eager run; the tests compare each lowering with its eager kernel through it.
#include <functional>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"
#include "titan/graph/runner.h"

namespace titan::train {

struct CaptureOptions {
  bool scan_layers = false;  // lower autograd::scan_blocks as a loop
  graph::ScanSaves scan_saves = graph::ScanSaves::all;
  bool custom_kernels = false;  // titan's kernels as custom calls where the runner's plugin allows
  bool cudnn_attention = true;  // on a CUDA plugin, attention as cuDNN's custom calls where it can
  int64_t max_documents = 0;    // Program::max_documents: packed documents a row of the inputs holds
};

// sum_i sum(outs[i] * douts[i]) in float32, over the outputs whose dout is defined: the objective
// whose gradients are the vector-Jacobian products for douts, in eager mode or in a capture alike.
// Undefined when no dout is.
Tensor vjp_objective(const std::vector<Tensor>& outs, const std::vector<Tensor>& douts);

// The capture alone, into `program` as its caller set it up (platform, custom kernels, loops): see
// CapturedFunction for `fn`, `inputs` and `douts`. The module's text, and for each parameter that an
// input or a dout became (by value id), its data.
struct FunctionCapture {
  std::string module = {};
  std::vector<std::pair<int64_t, Tensor>> feeds = {};
};
FunctionCapture capture_function(graph::Program& program, const std::function<std::vector<Tensor>()>& fn,
                                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& douts);

class CapturedFunction {
 public:
  // `fn` computes its outputs from `inputs`, which it reads itself (a module's parameters among
  // them): during the capture each input names a parameter of the program. `douts`, one per output
  // (undefined for one that takes no part), ask for the backward too: the program then also gives
  // the gradient of sum_i sum(out_i * dout_i) (in float32) w.r.t. each input that requires grad, in
  // the order of `inputs`. Empty `douts`: the forward only. The inputs' and douts' values are
  // uploaded once, here.
  CapturedFunction(graph::Runner& runner, const std::function<std::vector<Tensor>()>& fn,
                   const std::vector<Tensor>& inputs, const std::vector<Tensor>& douts,
                   const CaptureOptions& options);

  // One run of the compiled program: its results, on the device.
  std::vector<graph::pjrt::Buffer> run();
  // One run, its results on the host: fn's outputs, then the gradients.
  std::vector<Tensor> run_to_host();

  const std::string& module() const { return module_; }
  double compile_seconds() const { return compile_seconds_; }
  // Whether titan's kernels run as custom calls in this program (asked for, and the plugin can).
  bool custom_kernels() const { return custom_kernels_; }

 private:
  graph::Runner& runner_;
  std::string module_;
  graph::pjrt::Executable* executable_ = nullptr;
  double compile_seconds_ = 0;
  bool custom_kernels_ = false;
  std::vector<graph::pjrt::Buffer> args_;
};

}  // namespace titan::train
