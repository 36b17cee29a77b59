// Memory-bound kernels, in GB/s = bytes a minimal algorithm reads and writes / median seconds
// (each case states its count), for titan and PyTorch 2 (eager and torch.compile, f32) on the
// same shapes and threads, forward and backward separately.
//
// Forward records no graph on either side (titan: NoGradGuard; torch: no_grad). Backward builds
// the graph once, untimed, and times the gradient computation alone with the graph retained:
// titan autograd::grad(..., retain_graph=true), torch torch.autograd.grad(..., retain_graph=True)
// (under torch.compile, through inductor's backward).
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "support/torch_reference.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/parallel.h"
#include "titan/core/rng.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/adamw.h"
#include "titan/ops/activation.h"
#include "titan/ops/loss.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"
#include "titan/ops/softmax.h"

namespace {

using nlohmann::json;
using titan::Shape;
using titan::Tensor;
namespace bench = titan::bench;
namespace ops = titan::ops;

struct KernelCase {
  std::string name;  // benchmark name and table row, "<op>/<shape>/<fwd|bwd|step>"
  double bytes;      // per call, by `formula`
  std::string formula;
  bench::Plan plan;
  json torch;  // bench/torch_reference.py's spec, timed eager and compiled
  std::function<void(benchmark::State&)> run;
};

constexpr double kF32 = 4.0;

Tensor randn(const Shape& shape, uint64_t seed, bool requires_grad = true) {
  titan::Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen);
  if (requires_grad) t.requires_grad_();
  return t;
}

void report_bytes(benchmark::State& s, double bytes) {
  s.counters["bytes/s"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

template <typename F>
void time_forward(benchmark::State& s, double bytes, F&& forward) {
  titan::autograd::NoGradGuard no_grad;
  bench::PeakMemory peak;
  for (auto _ : s) {
    Tensor y = forward();
    benchmark::DoNotOptimize(y.data_ptr());
  }
  peak.report(s);
  report_bytes(s, bytes);
}

void time_backward(benchmark::State& s, double bytes, const Tensor& out, const Tensor& grad_out,
                   const std::vector<Tensor>& inputs) {
  bench::PeakMemory peak;
  for (auto _ : s) {
    std::vector<Tensor> grads = titan::autograd::grad({out}, {grad_out}, inputs, /*retain_graph=*/true);
    benchmark::DoNotOptimize(grads.front().data_ptr());
  }
  peak.report(s);
  report_bytes(s, bytes);
}

// The cotangent of a backward benchmark: random, or 1 for a scalar loss.
Tensor grad_for(const Tensor& out) {
  return out.dim() == 0 ? Tensor::ones({}) : randn(out.sizes(), 99, /*requires_grad=*/false);
}

std::string dims(std::initializer_list<int64_t> sizes) {
  std::string s;
  for (int64_t d : sizes) {
    if (!s.empty()) s += "x";
    s += std::to_string(d);
  }
  return s;
}

struct RmsIn {
  Tensor x, w;
};
struct SwigluIn {
  Tensor g, u;
};
struct RopeIn {
  Tensor x;
  ops::RopeTable table;
};
struct OneIn {
  Tensor x;
};
struct CrossEntropyIn {
  Tensor logits, targets;
};
struct AdamWIn {
  Tensor p, g, m, v;
};

// Adds "<key>/fwd" and "<key>/bwd": `make()` builds the inputs (requiring grad) once for both,
// `forward(in)` runs the op, `wrt(in)` lists what backward differentiates.
template <typename In, typename Make, typename Forward, typename Wrt>
void add_fwd_bwd(std::vector<KernelCase>& cases, const std::string& key, const json& spec,
                 const bench::Plan& plan, std::pair<double, std::string> fwd,
                 std::pair<double, std::string> bwd, Make make, Forward forward, Wrt wrt) {
  json f = spec, b = spec;
  f["mode"] = "fwd";
  b["mode"] = "bwd";
  cases.push_back({key + "/fwd", fwd.first, fwd.second, plan, f, [=, bytes = fwd.first](benchmark::State& s) {
                     In& in = bench::cached_inputs<In>(key, make);
                     time_forward(s, bytes, [&] { return forward(in); });
                   }});
  cases.push_back({key + "/bwd", bwd.first, bwd.second, plan, b, [=, bytes = bwd.first](benchmark::State& s) {
                     In& in = bench::cached_inputs<In>(key, make);
                     Tensor out = forward(in);
                     time_backward(s, bytes, out, grad_for(out), wrt(in));
                   }});
}

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  const bench::Plan plan{.reps = 5, .min_time = 0.3, .warmup = 0.2};

  {  // Llama 3 8B's hidden size over 8192 tokens.
    const int64_t n = 8192, d = 4096;
    const double eps = 1e-6, nd = double(n * d);
    add_fwd_bwd<RmsIn>(
        cases, "rms_norm/" + dims({n, d}), {{"op", "rms_norm"}, {"rows", n}, {"dim", d}, {"eps", eps}}, plan,
        {kF32 * (2 * nd + d), "4(2ND + D): read x, w; write y"},
        {kF32 * (3 * nd + 2 * d), "4(3ND + 2D): read x, w, dy; write dx, dw"},
        [=] {
          return RmsIn{randn({n, d}, 1), randn({d}, 2)};
        },
        [=](const RmsIn& in) { return ops::rms_norm(in.x, in.w, eps); },
        [](const RmsIn& in) {
          return std::vector<Tensor>{in.x, in.w};
        });
  }
  {  // Llama 2 7B's feed-forward width over 8192 tokens (~360 MiB per tensor).
    const int64_t n = 8192, h = 11008;
    const double nh = double(n * h);
    add_fwd_bwd<SwigluIn>(
        cases, "swiglu/" + dims({n, h}), {{"op", "swiglu"}, {"rows", n}, {"dim", h}}, plan,
        {kF32 * 3 * nh, "4*3NH: read g, u; write y"}, {kF32 * 5 * nh, "4*5NH: read g, u, dy; write dg, du"},
        [=] {
          return SwigluIn{randn({n, h}, 3), randn({n, h}, 4)};
        },
        [](const SwigluIn& in) { return ops::swiglu(in.g, in.u); },
        [](const SwigluIn& in) {
          return std::vector<Tensor>{in.g, in.u};
        });
  }
  {  // Llama 3 8B's queries: 32 heads of 128 over 8 sequences of 2048.
    const int64_t b = 8, t = 2048, h = 32, d = 128;
    const double theta = 500000.0, x = double(b * t * h * d), table = double(t * d);
    add_fwd_bwd<RopeIn>(
        cases, "rope/" + dims({b, t, h, d}),
        {{"op", "rope"}, {"batch", b}, {"seq", t}, {"heads", h}, {"head_dim", d}, {"theta", theta}}, plan,
        {kF32 * (2 * x + table), "4(2BTHD + TD): read x, cos and sin [T, D/2]; write y"},
        {kF32 * (2 * x + table), "4(2BTHD + TD): read dy, cos and sin; write dx"},
        [=] {
          return RopeIn{randn({b, t, h, d}, 5), ops::RopeTable::build(d, t, theta)};
        },
        [](const RopeIn& in) { return ops::rope(in.x, in.table, ops::RopeLayout::rotate_half); },
        [](const RopeIn& in) { return std::vector<Tensor>{in.x}; });
  }
  {  // Attention-sized rows: 4096 queries over 32768 keys.
    const int64_t n = 4096, v = 32768;
    const double nv = double(n * v);
    add_fwd_bwd<OneIn>(
        cases, "softmax/" + dims({n, v}), {{"op", "softmax"}, {"rows", n}, {"cols", v}}, plan,
        {kF32 * 2 * nv, "4*2NV: read x; write y"}, {kF32 * 3 * nv, "4*3NV: read y, dy; write dx"},
        [=] {
          return OneIn{randn({n, v}, 6)};
        },
        [](const OneIn& in) { return ops::softmax(in.x, -1); },
        [](const OneIn& in) { return std::vector<Tensor>{in.x}; });
  }
  // Llama 2's and Llama 3's vocabularies; 128k logits are 2 GiB per tensor.
  for (int64_t v : {int64_t{32000}, int64_t{128256}}) {
    const int64_t n = 4096;
    const double nv = double(n * v);
    add_fwd_bwd<CrossEntropyIn>(
        cases, "cross_entropy/" + dims({n, v}), {{"op", "cross_entropy"}, {"rows", n}, {"vocab", v}},
        v > 100000 ? bench::Plan{.reps = 3, .min_time = 0.3, .warmup = 0.2} : plan,
        {kF32 * nv + 8.0 * n, "4NV + 8N: read logits, i64 targets"},
        {kF32 * 2 * nv + 12.0 * n, "4*2NV + 12N: read logits, targets, row logsumexp; write dlogits"},
        [=] {
          std::vector<int64_t> targets(n);
          for (int64_t i = 0; i < n; ++i)
            targets[i] =
                static_cast<int64_t>(titan::philox_uniform(7, static_cast<uint64_t>(i)) * float(v)) % v;
          return CrossEntropyIn{randn({n, v}, 8), Tensor::from_vector(targets, {n})};
        },
        [](const CrossEntropyIn& in) { return ops::cross_entropy(in.logits, in.targets); },
        [](const CrossEntropyIn& in) { return std::vector<Tensor>{in.logits}; });
  }
  {  // One flat 64M-parameter buffer (256 MiB per state tensor).
    const int64_t n = int64_t{64} << 20;
    titan::kernels::cpu::AdamWHyper hyper{
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = 0};
    json spec = {{"op", "adamw"},        {"mode", "step"},
                 {"numel", n},           {"lr", hyper.lr},
                 {"beta1", hyper.beta1}, {"beta2", hyper.beta2},
                 {"eps", hyper.eps},     {"weight_decay", hyper.weight_decay}};
    std::string key = "adamw/" + std::to_string(n >> 20) + "M";
    cases.push_back({key + "/step", kF32 * 7 * double(n), "4*7P: read p, g, m, v; write p, m, v", plan, spec,
                     [=](benchmark::State& s) mutable {
                       AdamWIn& in = bench::cached_inputs<AdamWIn>(key, [&] {
                         return AdamWIn{randn({n}, 9, false), randn({n}, 10, false), Tensor::zeros({n}),
                                        Tensor::zeros({n})};
                       });
                       bench::PeakMemory peak;
                       for (auto _ : s) {
                         ++hyper.step;
                         titan::kernels::cpu::adamw_step<float>(in.p.data<float>(), in.g.data<float>(),
                                                                in.m.data<float>(), in.v.data<float>(), n,
                                                                hyper);
                         benchmark::ClobberMemory();
                       }
                       peak.report(s);
                       report_bytes(s, kF32 * 7 * double(n));
                     }});
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  std::vector<KernelCase> cases = kernel_cases();
  for (const KernelCase& c : cases) bench::add_benchmark(c.name, c.plan, c.run);
  auto titan_runs = bench::run_benchmarks(argc, argv);

  std::vector<bench::TorchCase> torch_cases;
  for (const KernelCase& c : cases)
    if (titan_runs.count(c.name)) torch_cases.push_back({.name = c.name, .plan = c.plan, .spec = c.torch});
  bench::TorchResults torch = bench::run_torch_reference(torch_cases, titan::num_threads());

  bench::Table table{
      .title = "Memory-bound kernels, f32 (GB/s = bytes counted / median seconds, 1 GB = 1e9 B)",
      .unit = "GB/s",
      .extra_headers = {"titan ms", "torch best f32 ms", "MB counted", "titan peak"},
      .rows = {},
      .notes = {}};
  for (const KernelCase& c : cases) {
    auto it = titan_runs.find(c.name);
    if (it == titan_runs.end()) continue;
    const bench::Measurement& m = it->second;
    bench::Row row{.name = c.name,
                   .titan = c.bytes / m.seconds / 1e9,
                   .torch = torch.rates(c.name, c.bytes / 1e9),
                   .extra = {}};
    const auto best = bench::best_f32(row);
    row.extra = {bench::fixed(m.seconds * 1e3, 2),
                 best ? bench::fixed(c.bytes / 1e9 / best->second * 1e3, 2) : "n/a",
                 bench::fixed(c.bytes / 1e6, 0), bench::mib(m.peak_bytes)};
    table.rows.push_back(std::move(row));
    table.notes.push_back("bytes " + c.name + ": " + c.formula);
  }
  table.notes.push_back(
      "fwd: no graph recorded on either side. bwd: graph built once (untimed), then the gradients "
      "alone with the graph retained (titan autograd::grad, torch torch.autograd.grad, "
      "retain_graph). torch: RMSNorm F.rms_norm, SwiGLU F.silu(g)*u, RoPE rotate-half (x*cos + "
      "rotate_half(x)*sin; torch has no RoPE op), softmax torch.softmax, cross-entropy "
      "F.cross_entropy, AdamW torch.optim.AdamW(fused=True) eager and torch.compile(opt.step) of the "
      "default (foreach) AdamW; compile: torch.compile(fn, dynamic=False), inductor.");
  table.notes.push_back(
      "titan peak: allocator high-water mark while timing (inputs, saved tensors, outputs).");
  bench::print_table(table, torch);
  return 0;
}
