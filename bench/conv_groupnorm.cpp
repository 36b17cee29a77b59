// The autoencoder's ops (FLUX's AE at 256x256: 3x3 convolutions and GroupNorm(32, eps 1e-6) at
// 128ch 256x256, 256ch 128x128, 512ch 64x64 and 512ch 32x32, batch 1), forward and backward, for
// titan and PyTorch 2 (eager and torch.compile) on the same shapes and threads:
//   - conv2d in f32 (GFLOP/s), with titan's two paths: oneDNN's primitives, which ops::conv2d
//     runs, and the im2col + GEMM reference (kernels/cpu/conv2d.h), timed on the kernels alone;
//   - conv2d under bf16 autocast on both sides, against every PyTorch variant;
//   - GroupNorm in f32 (GB/s).
// Forward records no graph (titan NoGradGuard, torch no_grad); backward builds the graph once,
// untimed, and times the gradients of x, weight and bias with the graph retained.
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "support/torch_reference.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/core/rng.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/conv2d.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/group_norm.h"

namespace {

using nlohmann::json;
using titan::Shape;
using titan::Tensor;
namespace bench = titan::bench;
namespace ops = titan::ops;
namespace k = titan::kernels::cpu;

struct Layer {
  int64_t channels, size;
};
// The AE's resolutions at a 256x256 image.
const std::vector<Layer> kLayers = {{128, 256}, {256, 128}, {512, 64}, {512, 32}};
constexpr int64_t kGroups = 32;
constexpr double kEps = 1e-6;

const bench::Plan kPlan{.reps = 3, .min_time = 0.2, .warmup = 0.1};

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  titan::Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen, {}, 0.0, scale);
  t.requires_grad_();
  return t;
}

struct Inputs {
  Tensor x, w, b, dy;
};

std::string layer_key(const Layer& l) {
  return std::to_string(l.channels) + "x" + std::to_string(l.size) + "x" + std::to_string(l.size);
}

// One 3x3 stride-1 pad-1 convolution, channels in = channels out.
k::Conv2dGeometry geometry(const Layer& l) {
  return {1, l.channels, l.size, l.size, l.channels, 3, 3, 1, 1, 1, 1, 1};
}
double conv_flops(const Layer& l) {
  const double n = double(l.channels) * double(l.size);
  return 2.0 * n * n * 9.0;
}
const ops::Conv2dOptions kPad1{.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1};

Inputs& conv_inputs(const Layer& l) {
  return bench::cached_inputs<Inputs>("conv/" + layer_key(l), [&] {
    const double scale = 1.0 / std::sqrt(double(l.channels) * 9.0);
    Tensor dy = randn({1, l.channels, l.size, l.size}, 4).detach();
    return Inputs{randn({1, l.channels, l.size, l.size}, 1), randn({l.channels, l.channels, 3, 3}, 2, scale),
                  randn({l.channels}, 3), dy};
  });
}

Inputs& norm_inputs(const Layer& l) {
  return bench::cached_inputs<Inputs>("norm/" + layer_key(l), [&] {
    Tensor dy = randn({1, l.channels, l.size, l.size}, 8).detach();
    return Inputs{randn({1, l.channels, l.size, l.size}, 5), randn({l.channels}, 6), randn({l.channels}, 7),
                  dy};
  });
}

void time_backward(benchmark::State& s, const Tensor& out, const Inputs& in) {
  bench::PeakMemory peak;
  for (auto _ : s) {
    std::vector<Tensor> grads =
        titan::autograd::grad({out}, {in.dy}, {in.x, in.w, in.b}, /*retain_graph=*/true);
    benchmark::DoNotOptimize(grads.front().data_ptr());
  }
  peak.report(s);
}

template <typename F>
void time_forward(benchmark::State& s, F&& forward) {
  titan::autograd::NoGradGuard no_grad;
  bench::PeakMemory peak;
  for (auto _ : s) {
    Tensor y = forward();
    benchmark::DoNotOptimize(y.data_ptr());
  }
  peak.report(s);
}

// ops::conv2d forward and backward, in f32 or under bf16 autocast.
void add_conv(const Layer& l, bool bf16) {
  const std::string key = "conv3x3/" + layer_key(l) + (bf16 ? "/bf16" : "");
  bench::add_benchmark(key + "/fwd", kPlan, [=](benchmark::State& s) {
    Inputs& in = conv_inputs(l);
    const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
    time_forward(s, [&] { return ops::conv2d(in.x, in.w, in.b, kPad1); });
  });
  bench::add_benchmark(key + "/bwd", kPlan, [=](benchmark::State& s) {
    Inputs& in = conv_inputs(l);
    Tensor out;
    {
      const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
      out = ops::conv2d(in.x, in.w, in.b, kPad1);
    }
    time_backward(s, out, in);
  });
}

// The im2col reference path on the same inputs, kernels alone (no autograd): forward, and the
// data and weight gradients of backward (the bias gradient, a sum, is left out on both paths'
// account here and is in the ops' figures above).
void add_im2col(const Layer& l) {
  const std::string key = "conv3x3/" + layer_key(l) + "/im2col";
  bench::add_benchmark(key + "/fwd", kPlan, [=](benchmark::State& s) {
    Inputs& in = conv_inputs(l);
    const k::Conv2dGeometry g = geometry(l);
    Tensor y = Tensor::empty({1, l.channels, l.size, l.size});
    for (auto _ : s)
      k::conv2d_fwd_im2col<float>(g, in.x.data<float>(), in.w.data<float>(), in.b.data<float>(),
                                  y.data<float>());
  });
  bench::add_benchmark(key + "/bwd", kPlan, [=](benchmark::State& s) {
    Inputs& in = conv_inputs(l);
    const k::Conv2dGeometry g = geometry(l);
    Tensor dx = Tensor::empty(in.x.sizes()), dw = Tensor::empty(in.w.sizes());
    for (auto _ : s) {
      k::conv2d_bwd_data_im2col<float>(g, in.dy.data<float>(), in.w.data<float>(), dx.data<float>());
      k::conv2d_bwd_weight_im2col<float>(g, in.dy.data<float>(), in.x.data<float>(), dw.data<float>(),
                                         nullptr);
    }
  });
}

void add_group_norm(const Layer& l) {
  const std::string key = "group_norm/" + layer_key(l);
  bench::add_benchmark(key + "/fwd", kPlan, [=](benchmark::State& s) {
    Inputs& in = norm_inputs(l);
    time_forward(s, [&] { return ops::group_norm(in.x, kGroups, in.w, in.b, kEps); });
  });
  bench::add_benchmark(key + "/bwd", kPlan, [=](benchmark::State& s) {
    Inputs& in = norm_inputs(l);
    time_backward(s, ops::group_norm(in.x, kGroups, in.w, in.b, kEps), in);
  });
}

json conv_spec(const Layer& l, const std::string& mode) {
  return {{"op", "conv2d"},
          {"batch", 1},
          {"channels", l.channels},
          {"out_channels", l.channels},
          {"height", l.size},
          {"width", l.size},
          {"kernel", 3},
          {"stride", 1},
          {"padding", 1},
          {"mode", mode}};
}
json norm_spec(const Layer& l, const std::string& mode) {
  return {{"op", "group_norm"}, {"batch", 1},      {"channels", l.channels},
          {"height", l.size},   {"width", l.size}, {"groups", kGroups},
          {"eps", kEps},        {"mode", mode}};
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  const bool bf16 = !k::onednn_bf16_isa().empty();
  for (const Layer& l : kLayers) {
    add_conv(l, false);
    add_im2col(l);
    if (bf16) add_conv(l, true);
    add_group_norm(l);
  }
  // Rounds alternate titan and PyTorch, so that other processes' load (the figures' main noise on
  // a shared machine) falls on both sides alike.
  const bench::Interleaved timed = bench::run_interleaved(argc, argv, 2, [&](const auto& ran) {
    std::vector<bench::TorchCase> torch_cases;
    for (const Layer& l : kLayers)
      for (const std::string mode : {"fwd", "bwd"}) {
        const std::string conv = "conv3x3/" + layer_key(l) + "/" + mode;
        if (ran.count(conv)) torch_cases.push_back({.name = conv, .plan = kPlan, .spec = conv_spec(l, mode)});
        const std::string conv_bf16 = "conv3x3/" + layer_key(l) + "/bf16/" + mode;
        if (ran.count(conv_bf16))
          torch_cases.push_back({.name = conv_bf16,
                                 .plan = kPlan,
                                 .spec = conv_spec(l, mode),
                                 .variants = {"eager bf16", "compile bf16"}});
        const std::string norm = "group_norm/" + layer_key(l) + "/" + mode;
        if (ran.count(norm)) torch_cases.push_back({.name = norm, .plan = kPlan, .spec = norm_spec(l, mode)});
      }
    return torch_cases;
  });
  std::map<std::string, bench::Measurement> titan_runs = timed.titan;
  const bench::TorchResults& torch = timed.torch;

  auto seconds = [&](const std::string& name) -> std::optional<double> {
    auto it = titan_runs.find(name);
    if (it == titan_runs.end()) return std::nullopt;
    return it->second.seconds;
  };
  auto ms = [](std::optional<double> s) { return s ? bench::fixed(*s * 1e3, 2) : std::string("n/a"); };

  bench::Table conv{
      .title = "conv2d 3x3 pad 1, f32 (GFLOP/s; backward: data and weight gradients, 2x forward's)",
      .unit = "GFLOP/s",
      .extra_headers = {"titan ms", "im2col ms", "oneDNN / im2col", "titan peak"},
      .rows = {},
      .notes = {}};
  bench::Table conv_bf16{.title = "conv2d 3x3 pad 1 under bf16 autocast (GFLOP/s)",
                         .unit = "GFLOP/s",
                         .variants = {"eager bf16", "compile bf16"},
                         .titan_bf16 = true,
                         .extra_headers = {"titan ms", "titan peak"},
                         .rows = {},
                         .notes = {}};
  bench::Table norm{.title = "GroupNorm(32, eps 1e-6), f32 (GB/s = bytes counted / median seconds)",
                    .unit = "GB/s",
                    .extra_headers = {"titan ms", "titan peak"},
                    .rows = {},
                    .notes = {}};
  for (const Layer& l : kLayers)
    for (const std::string mode : {"fwd", "bwd"}) {
      const double gflop = conv_flops(l) * (mode == "bwd" ? 2 : 1) / 1e9;
      const std::string name = "conv3x3/" + layer_key(l) + "/" + mode;
      if (auto s = seconds(name)) {
        const auto im2col = seconds("conv3x3/" + layer_key(l) + "/im2col/" + mode);
        conv.rows.push_back(
            {.name = name,
             .titan = gflop / *s,
             .torch = torch.rates(name, gflop),
             .extra = {ms(s), ms(im2col), im2col ? bench::fixed(*im2col / *s, 2) + "x" : "n/a",
                       bench::mib(titan_runs[name].peak_bytes)}});
      }
      const std::string name_bf16 = "conv3x3/" + layer_key(l) + "/bf16/" + mode;
      if (auto s = seconds(name_bf16))
        conv_bf16.rows.push_back({.name = name_bf16,
                                  .titan = gflop / *s,
                                  .torch = torch.rates(name_bf16, gflop),
                                  .extra = {ms(s), bench::mib(titan_runs[name_bf16].peak_bytes)}});
      const std::string norm_name = "group_norm/" + layer_key(l) + "/" + mode;
      // f32 bytes: forward reads x and writes y; backward reads x and dy and writes dx.
      const double gb = 4.0 * double(l.channels * l.size * l.size) * (mode == "bwd" ? 3 : 2) / 1e9;
      if (auto s = seconds(norm_name))
        norm.rows.push_back({.name = norm_name,
                             .titan = gb / *s,
                             .torch = torch.rates(norm_name, gb),
                             .extra = {ms(s), bench::mib(titan_runs[norm_name].peak_bytes)}});
    }
  conv.notes = {"titan: ops::conv2d, which runs oneDNN " + k::onednn_version() +
                    "'s convolution primitives (blocked layouts, reordered inside the call); im2col: "
                    "kernels/cpu/conv2d.h's im2col + OpenBLAS GEMM on the same inputs, kernels alone, "
                    "without the bias gradient.",
                "torch: F.conv2d(x, w, b, padding=1); compile: torch.compile(fn, dynamic=False), inductor."};
  conv_bf16.notes = {
      "titan: ops::conv2d under AutocastGuard(kBF16): bf16 operands through oneDNN (" +
      (bf16 ? k::onednn_bf16_isa() : std::string("none")) +
      "), f32 accumulation and result; torch: the same under torch.autocast(\"cpu\", bfloat16)."};
  norm.notes = {"bytes: forward 4*2NCHW (read x, write y), backward 4*3NCHW (read x, dy; write dx).",
                "torch: F.group_norm(x, 32, w, b, 1e-6)."};
  bench::print_table(conv, torch);
  if (!conv_bf16.rows.empty()) bench::print_table(conv_bf16, torch);
  bench::print_table(norm, torch);
  return 0;
}
