// Graph mode's compile time: the Llama 3 training step (forward, backward, clipping, AdamW)
// captured and compiled by the PJRT CPU plugin for the debug model and 1B- and 8B-shaped models,
// with identical blocks lowered once as a loop (compile.scan_layers, the default) and, for
// comparison, every block recorded. Nothing is run: the models are built on meta tensors, so the
// 8B step compiles on a machine that could not hold its weights.
//
//   bench_graph_compile [--flavors=debugmodel,1B,8B] [--seq=N] [--batch=N] [--unrolled=debugmodel,1B]
#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/core/meta.h"
#include "titan/graph/runner.h"
#include "titan/models/llama3/model.h"
#include "titan/train/graph_mode/graph_step.h"

namespace {

using titan::Tensor;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Figures {
  double capture_s = 0, compile_s = 0;
  int64_t ops = 0;
  size_t bytes = 0;
};

Figures compile_step(titan::graph::Runner& runner, const std::string& flavor, int64_t batch, int64_t seq, bool scan) {
  titan::models::llama3::ModelArgs args = titan::models::llama3::flavor(flavor);
  args.max_seq_len = std::max<int64_t>(args.max_seq_len, seq);
  const titan::MetaScope meta;
  titan::models::llama3::Transformer model(args);
  const auto params = model.named_parameters();
  titan::optim::AdamW optimizer(params);
  titan::data::Batch b{Tensor::zeros({batch, seq}, {.dtype = titan::kI64}),
                       Tensor::zeros({batch, seq}, {.dtype = titan::kI64})};
  const titan::train::CapturedStep step =
      titan::train::capture_train_step(
          model, optimizer, params, {b},
          {.scan_layers = scan, .custom_kernels = titan::train::enable_custom_kernels(runner, true).on});
  const titan::graph::Runner::Compiled compiled = runner.compile(step.text);
  return {.capture_s = step.seconds, .compile_s = compiled.seconds, .ops = step.ops, .bytes = step.text.size()};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> flavors{"debugmodel", "1B", "8B"}, unrolled{"debugmodel", "1B"};
  int64_t seq = 2048, batch = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--flavors=", 0) == 0) flavors = split(a.substr(10));
    if (a.rfind("--unrolled=", 0) == 0) unrolled = split(a.substr(11));
    if (a.rfind("--seq=", 0) == 0) seq = std::stoll(a.substr(6));
    if (a.rfind("--batch=", 0) == 0) batch = std::stoll(a.substr(8));
  }
  titan::graph::Runner runner({.plugin = "cpu"});
  std::cout << titan::bench::machine_summary() << "\nPJRT: " << runner.describe() << "\n"
            << "Llama 3 training step (forward, backward, clip, AdamW), batch " << batch << " x seq " << seq
            << ", compiled, not run\n\n";
  std::cout << "flavor       layers  lowering   ops   StableHLO  capture s  compile s\n";
  for (const std::string& f : flavors) {
    for (bool scan : {true, false}) {
      if (!scan && std::find(unrolled.begin(), unrolled.end(), f) == unrolled.end()) continue;
      const Figures r = compile_step(runner, f, batch, seq, scan);
      std::printf("%-12s %6lld  %-8s %6lld  %7.0f KiB  %9.2f  %9.2f\n", f.c_str(),
                  static_cast<long long>(titan::models::llama3::flavor(f).n_layers), scan ? "loop" : "unrolled",
                  static_cast<long long>(r.ops), static_cast<double>(r.bytes) / 1024.0, r.capture_s, r.compile_s);
      std::cout << std::flush;
    }
  }
  std::cout << "\nloop: identical blocks lowered once inside a stablehlo.while (compile.scan_layers = true, "
               "the default); unrolled: every block recorded.\n";
  return 0;
}
