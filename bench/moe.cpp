// The mixture-of-experts layer, forward + backward in f32, on the same shapes and threads:
// titan's nn::moe::MoE (softmax router, top-k, tokens sorted by expert, one GEMM per expert and
// projection, unpermute weighted by the routing scores) against Hugging Face's
// Qwen3MoeSparseMoeBlock in PyTorch 2 (bench/torch_reference.py "moe"), with transformers' two
// experts implementations, each eager and under torch.compile: "eager" (per expert that got
// tokens, its tokens gathered, its SwiGLU applied, the result index_add_-ed back) and
// "grouped_mm" (tokens sorted by expert, torch._grouped_mm). 4096 tokens of dim 512, experts of
// hidden size 256, 8 and 64 experts, top-2 and top-8.
//
// A call is out = moe(x), then the gradients of x, the router and the three expert weights for a
// random dout. GFLOP/s counts what a token goes through: 6 x (k experts x 3 x dim x hidden + the
// router's dim x experts), forward and backward, so ratios are ratios of time. Also timed: titan's
// dispatch alone (sort by expert, permute, unpermute, forward and backward, on the same routing
// sizes), and its share of the layer's time; and the layer's expert GEMMs alone (the nine grouped
// GEMMs of forward and backward, on balanced routing sizes), the floor that no dispatch or fusion
// work gets titan below while its GEMMs are OpenBLAS's: torch ms / GEMMs ms is the highest ratio
// titan could reach.
//
// bf16 (moe_bf16/...): titan's layer under training.mixed_precision_param = "bfloat16"'s autocast
// (bf16 expert GEMMs through oneDNN, router in float32) against the same torch variants under
// torch.autocast("cpu", bfloat16), at 8 and 64 experts, top-2.
//
// graph (moe_graph/..., moe_graph_bf16/...): the same layer, forward + backward, captured once as
// one program and run through the CPU PJRT plugin, as graph-mode training runs it: tokens sorted
// by expert inside the program, the grouped products as titan's kernels (custom calls). Against
// it, the same layer in plain JAX, jitted whole (bench/moe_jax.py: jax.lax.ragged_dot, JAX's
// dropless grouped product), on the top-2 shapes, once after the interleaved rounds.
#include "titan/nn/moe/moe.h"

#include <cstdint>
#include <memory>
#include <algorithm>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/core/rng.h"
#include "titan/kernels/cpu/grouped_gemm.h"
#include "titan/ops/moe.h"
#include "titan/train/graph_mode/captured_function.h"

namespace {

using nlohmann::json;
using titan::Tensor;
namespace bench = titan::bench;
namespace moe = titan::nn::moe;

constexpr int64_t kTokens = 4096, kDim = 512, kHidden = 256;
// f32 all: transformers' two experts implementations, eager and compiled.
const std::vector<std::string> kMoeVariants = {"eager", "compile", "eager grouped_mm", "compile grouped_mm"};
const std::vector<std::string> kMoeBf16Variants = {"eager bf16", "compile bf16", "eager grouped_mm bf16",
                                                   "compile grouped_mm bf16"};

struct Shape {
  int64_t experts, top_k;
  std::string name() const {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on a chain of string + here.
    std::string n = "e";
    n += std::to_string(experts);
    n += "/k";
    n += std::to_string(top_k);
    return n;
  }
  double flops() const { return 6.0 * double(kTokens) * double(top_k * 3 * kDim * kHidden + kDim * experts); }
  // One warm-up call on each side (the torch script always makes one; Google Benchmark makes none
  // at warmup 0, which would time titan's cold first call against torch's warm ones), then single
  // calls: a torch call takes up to 5 s at 64 experts.
  bench::Plan plan() const { return {.reps = 5, .min_time = 1e-3, .warmup = 1e-3}; }
};

struct LayerIn {
  std::shared_ptr<moe::MoE> layer;
  Tensor x, dout;
};

LayerIn make_layer(const Shape& s) {
  titan::Generator gen(5);
  moe::MoEArgs args;
  args.num_experts = s.experts;
  args.top_k = s.top_k;
  args.hidden_dim = kHidden;
  LayerIn in{std::make_shared<moe::MoE>(0, kDim, args, 0.02),
             Tensor::randn({kTokens, kDim}, gen).requires_grad_(), Tensor::randn({kTokens, kDim}, gen)};
  in.layer->init_weights(gen);
  return in;
}

// The layer's forward + backward as one captured program, the gradients of x, the router and the
// experts for dout as its results. Its own layer (the benchmarks' inputs are cached one key at a
// time), made as the eager one is.
struct GraphLayer {
  LayerIn in;
  std::unique_ptr<titan::train::CapturedFunction> step;
};

GraphLayer capture_layer(const Shape& s, titan::DType precision) {
  static titan::graph::Runner runner({.plugin = "cpu"});
  const titan::AutocastGuard autocast(precision);
  GraphLayer g{make_layer(s), nullptr};
  LayerIn& in = g.in;
  std::vector<Tensor> inputs = {in.x};
  for (const auto& [name, p] : in.layer->named_parameters()) inputs.push_back(p);
  for (const auto& [name, b] : in.layer->named_buffers(/*persistent_only=*/true)) inputs.push_back(b);
  g.step = std::make_unique<titan::train::CapturedFunction>(
      runner, [&] { return std::vector<Tensor>{(*in.layer)(in.x, std::make_shared<moe::MoEPass>())}; }, inputs,
      std::vector<Tensor>{in.dout}, titan::train::CaptureOptions{.custom_kernels = true});
  TITAN_CHECK(g.step->custom_kernels(), "bench_moe: the CPU plugin cannot run titan's kernels as custom calls, "
              "which graph mode's dropless MoE layer needs");
  return g;
}

struct DispatchIn {
  Tensor ids, x, rows, weights, d_rows, d_out;
};

// Routes as the layer's router would give them (each token's k distinct experts), with stand-ins
// for the experts' output and the incoming gradients.
DispatchIn make_dispatch(const Shape& s) {
  titan::Generator gen(6);
  DispatchIn in;
  in.ids = titan::ops::topk_experts(Tensor::rand({kTokens, s.experts}, gen), s.top_k).ids;
  in.x = Tensor::randn({kTokens, kDim}, gen).requires_grad_();
  in.rows = Tensor::randn({kTokens * s.top_k, kDim}, gen).requires_grad_();
  in.weights = Tensor::rand({kTokens, s.top_k}, gen).requires_grad_();
  in.d_rows = Tensor::randn({kTokens * s.top_k, kDim}, gen);
  in.d_out = Tensor::randn({kTokens, kDim}, gen);
  return in;
}

// The expert GEMMs of one forward + backward, as ops::grouped_swiglu (w1, w3) and
// ops::grouped_linear (w2) run them, with every expert given the same number of rows.
struct GemmsIn {
  std::vector<int64_t> rows_per_expert;
  std::vector<float> x, w1, w3, w2, gate, up, hidden, out, d_hidden, dx, dw1, dw3, dw2;
};

GemmsIn make_gemms(const Shape& s) {
  const int64_t rows = kTokens * s.top_k, per_expert = kDim * kHidden * s.experts;
  auto filled = [](int64_t n, float v) { return std::vector<float>(static_cast<size_t>(n), v); };
  GemmsIn in;
  in.rows_per_expert.assign(static_cast<size_t>(s.experts), rows / s.experts);
  in.x = filled(rows * kDim, 0.01f);
  in.w1 = filled(per_expert, 0.02f);
  in.w3 = filled(per_expert, 0.02f);
  in.w2 = filled(per_expert, 0.02f);
  for (auto* v : {&in.gate, &in.up, &in.hidden, &in.d_hidden}) *v = filled(rows * kHidden, 0.0f);
  for (auto* v : {&in.out, &in.dx}) *v = filled(rows * kDim, 0.0f);
  for (auto* v : {&in.dw1, &in.dw3, &in.dw2}) *v = filled(per_expert, 0.0f);
  return in;
}

void expert_gemms(GemmsIn& in) {
  namespace k = titan::kernels::cpu;
  const int64_t* rows = in.rows_per_expert.data();
  const auto e = static_cast<int64_t>(in.rows_per_expert.size());
  k::grouped_gemm<float>(rows, e, kHidden, kDim, in.x.data(), in.w1.data(), true, in.gate.data());
  k::grouped_gemm<float>(rows, e, kHidden, kDim, in.x.data(), in.w3.data(), true, in.up.data());
  k::grouped_gemm<float>(rows, e, kDim, kHidden, in.hidden.data(), in.w2.data(), true, in.out.data());
  // Backward; out stands in for d_out, gate and up for their gradients.
  k::grouped_gemm<float>(rows, e, kHidden, kDim, in.out.data(), in.w2.data(), false, in.d_hidden.data());
  k::grouped_gemm_tn<float>(rows, e, kDim, kHidden, in.out.data(), in.hidden.data(), in.dw2.data());
  k::grouped_gemm<float>(rows, e, kDim, kHidden, in.gate.data(), in.w1.data(), false, in.dx.data());
  k::grouped_gemm<float>(rows, e, kDim, kHidden, in.up.data(), in.w3.data(), false, in.dx.data(), true);
  k::grouped_gemm_tn<float>(rows, e, kHidden, kDim, in.gate.data(), in.x.data(), in.dw1.data());
  k::grouped_gemm_tn<float>(rows, e, kHidden, kDim, in.up.data(), in.x.data(), in.dw3.data());
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  const std::vector<Shape> shapes = {{8, 2}, {8, 8}, {64, 2}, {64, 8}};
  const std::vector<Shape> bf16_shapes = {{8, 2}, {64, 2}};
  // The layer's forward + backward, in `precision` (bf16: under autocast, as bf16 training runs it).
  auto add_layer = [](const std::string& name, const Shape& s, titan::DType precision) {
    bench::add_benchmark(name, s.plan(), [s, precision](benchmark::State& state) {
      LayerIn& in = bench::cached_inputs<LayerIn>("moe/" + s.name(), [&] { return make_layer(s); });
      const titan::AutocastGuard autocast(precision);
      bench::PeakMemory peak;
      const std::vector<Tensor> wrt = {in.x, in.layer->router->gate->weight, in.layer->experts->w1,
                                       in.layer->experts->w2, in.layer->experts->w3};
      for (auto _ : state) {
        Tensor out = (*in.layer)(in.x, std::make_shared<moe::MoEPass>());
        std::vector<Tensor> grads = titan::autograd::grad({out}, {in.dout}, wrt);
        benchmark::DoNotOptimize(grads.front().data_ptr());
      }
      peak.report(state);
    });
  };
  auto add_graph_layer = [](const std::string& name, const Shape& s, titan::DType precision) {
    bench::add_benchmark(name, s.plan(), [name, s, precision](benchmark::State& state) {
      GraphLayer& g = bench::cached_inputs<GraphLayer>(name, [&] { return capture_layer(s, precision); });
      for (auto _ : state) benchmark::DoNotOptimize(g.step->run().size());
    });
  };
  for (const Shape& s : bf16_shapes) {
    add_layer("moe_bf16/" + s.name(), s, titan::kBF16);
    add_graph_layer("moe_graph_bf16/" + s.name(), s, titan::kBF16);
  }
  for (const Shape& s : shapes) {
    add_layer("moe/" + s.name(), s, titan::kF32);
    add_graph_layer("moe_graph/" + s.name(), s, titan::kF32);
    bench::add_benchmark(
        "dispatch/" + s.name(), {.reps = 5, .min_time = 0.2, .warmup = 0.1}, [s](benchmark::State& state) {
          DispatchIn& in =
              bench::cached_inputs<DispatchIn>("dispatch/" + s.name(), [&] { return make_dispatch(s); });
          for (auto _ : state) {
            titan::ops::TokenPermutation p = titan::ops::sort_by_expert(in.ids, s.experts);
            Tensor permuted = titan::ops::permute_tokens(in.x, p);
            Tensor out = titan::ops::unpermute_tokens(in.rows, in.weights, p);
            std::vector<Tensor> grads =
                titan::autograd::grad({permuted, out}, {in.d_rows, in.d_out}, {in.x, in.rows, in.weights});
            benchmark::DoNotOptimize(grads.front().data_ptr());
          }
        });
    bench::add_benchmark("gemms/" + s.name(), s.plan(), [s](benchmark::State& state) {
      GemmsIn& in = bench::cached_inputs<GemmsIn>("gemms/" + s.name(), [&] { return make_gemms(s); });
      for (auto _ : state) expert_gemms(in);
    });
  }
  // Three rounds: one 64-expert torch call takes seconds, so more would run for many minutes.
  const bench::Interleaved timed = bench::run_interleaved(argc, argv, 3, [&](const auto& ran) {
    std::vector<bench::TorchCase> cases;
    auto add = [&](const std::string& prefix, const std::vector<Shape>& which,
                   const std::vector<std::string>& variants) {
      for (const Shape& s : which)
        if (ran.count(prefix + s.name()))
          cases.push_back({prefix + s.name(), s.plan(),
                           json{{"op", "moe"},
                                {"mode", "fwd_bwd"},
                                {"tokens", kTokens},
                                {"dim", kDim},
                                {"hidden", kHidden},
                                {"experts", s.experts},
                                {"top_k", s.top_k}},
                           variants});
    };
    add("moe/", shapes, kMoeVariants);
    add("moe_bf16/", bf16_shapes, kMoeBf16Variants);
    return cases;
  });
  const auto& ran = timed.titan;
  const bench::TorchResults& torch = timed.torch;
  // The JAX reference, on the top-2 cases that ran.
  json jax_cases = json::array();
  for (const auto& [prefix, variant, which] :
       {std::tuple{std::string("moe/"), "f32", &shapes}, {std::string("moe_bf16/"), "bf16", &bf16_shapes}})
    for (const Shape& s : *which)
      if (s.top_k == 2 && ran.count(prefix + s.name()))
        jax_cases.push_back({{"name", prefix + s.name()},
                             {"tokens", kTokens},
                             {"dim", kDim},
                             {"hidden", kHidden},
                             {"experts", s.experts},
                             {"top_k", s.top_k},
                             {"variant", variant}});
  const bench::JaxReply jax = bench::run_jax_cases("moe_jax.py", jax_cases, titan::num_threads(), 3);
  const std::string jax_about = jax.about();
  auto jax_cells = [&](const std::string& prefix, const Shape& s, std::vector<std::string>& notes) {
    const std::optional<double> j = jax.median_seconds(prefix + s.name());
    auto g = ran.find((prefix == "moe/" ? "moe_graph/" : "moe_graph_bf16/") + s.name());
    if (!j || g == ran.end()) return std::vector<std::string>{"n/a", "n/a"};
    const double r = *j / g->second.seconds;
    notes.push_back("target " + s.name() + ": graph >= JAX: " + bench::fixed(r, 2) + "x " + (r >= 1 ? "MET" : "MISSED"));
    return std::vector<std::string>{bench::fixed(*j * 1e3, 1), bench::fixed(r, 2) + "x"};
  };
  auto graph_ms = [&](const std::string& prefix, const Shape& s) -> std::string {
    auto g = ran.find(prefix + s.name());
    return g == ran.end() ? "n/a" : bench::fixed(g->second.seconds * 1e3, 1);
  };
  // graph mode's speed as a share of eager's, with issue 20's target for it in the notes.
  auto graph_ratio = [&](const std::string& prefix, const Shape& s, const bench::Measurement& eager,
                         std::vector<std::string>& notes) -> std::optional<double> {
    auto g = ran.find(prefix + s.name());
    if (g == ran.end()) return std::nullopt;
    const double r = eager.seconds / g->second.seconds;
    if (s.top_k == 2)
      notes.push_back("target " + s.name() + ": graph >= 0.9x titan eager: " + bench::fixed(r, 2) + "x " +
                      (r >= 0.9 ? "MET" : "MISSED"));
    return r;
  };

  bench::Table table{.title =
                         "MoE layer forward + backward, f32, 4096 tokens, dim 512, expert hidden 256 "
                         "(GFLOP/s = 6 x (k x 3 x dim x hidden + dim x experts) x tokens / median s; "
                         "medians of " +
                         std::to_string(timed.rounds) + " interleaved rounds per side)",
                     .unit = "GFLOP/s",
                     .titan_label = "titan",
                     .variants = kMoeVariants,
                     .extra_headers = {"titan ms", "torch best ms", "graph ms", "graph/titan", "JAX ms", "graph/JAX",
                                       "dispatch ms",
                                       "dispatch share", "GEMMs ms", "torch/GEMMs", "titan peak"},
                     .rows = {},
                     .notes = {}};
  for (const Shape& s : shapes) {
    auto it = ran.find("moe/" + s.name());
    if (it == ran.end()) continue;
    const bench::Measurement& m = it->second;
    auto d = ran.find("dispatch/" + s.name());
    const bool has_dispatch = d != ran.end();
    auto gm = ran.find("gemms/" + s.name());
    const bool has_gemms = gm != ran.end();
    bench::Row row{.name = s.name(),
                   .titan = s.flops() / m.seconds / 1e9,
                   .torch = torch.rates("moe/" + s.name(), s.flops() / 1e9),
                   .extra = {}};
    const auto best = bench::best_f32(row);
    // The best f32 variant's seconds per call.
    const double t = best ? s.flops() / 1e9 / best->second : 0.0;
    const std::optional<double> graph = graph_ratio("moe_graph/", s, m, table.notes);
    const std::vector<std::string> j = jax_cells("moe/", s, table.notes);
    row.extra = {bench::fixed(m.seconds * 1e3, 1),
                 best ? bench::fixed(t * 1e3, 1) : "n/a",
                 graph_ms("moe_graph/", s),
                 graph ? bench::fixed(*graph, 2) + "x" : "n/a",
                 j[0],
                 j[1],
                 has_dispatch ? bench::fixed(d->second.seconds * 1e3, 2) : "n/a",
                 has_dispatch ? bench::fixed(100 * d->second.seconds / m.seconds, 1) + "%" : "n/a",
                 has_gemms ? bench::fixed(gm->second.seconds * 1e3, 1) : "n/a",
                 has_gemms && best ? bench::fixed(t / gm->second.seconds, 2) + "x" : "n/a",
                 bench::mib(m.peak_bytes)};
    table.rows.push_back(std::move(row));
  }
  table.notes.push_back(
      "dispatch: titan's sort by expert + permute + unpermute, forward and backward, timed alone on the "
      "same routing sizes; share = dispatch ms / titan ms.");
  table.notes.push_back(
      "GEMMs: the layer's nine grouped expert GEMMs alone (forward w1, w3, w2; backward the input and "
      "weight gradients of each), every expert given tokens x k / experts rows, through "
      "kernels::cpu::grouped_gemm; torch/GEMMs = torch ms / GEMMs ms, the highest titan/torch these "
      "GEMMs leave room for.");
  table.notes.push_back(
      "titan peak: allocator high-water mark while timing (inputs, saved tensors, outputs).");
  table.notes.push_back(
      "graph: the layer's forward + backward as one program through the CPU PJRT plugin (tokens sorted by "
      "expert in the program, titan's grouped kernels as custom calls); graph/titan = titan ms / graph ms.");
  table.notes.push_back(jax_about);
  table.notes.push_back(
      "JAX: jax.lax.ragged_dot's CPU lowering computes every expert over every row and masks (experts x the "
      "dropless products); that is what a JAX user gets on the CPU, and why graph/JAX grows with the experts.");
  table.notes.push_back("target: titan >= 1.5x the best torch f32 figure (titan/best f32).");
  bench::print_table(table, torch);

  bench::Table bf16{.title =
                        "MoE layer forward + backward, bf16 (autocast on both sides), same shapes and "
                        "GFLOP/s as above",
                    .unit = "GFLOP/s",
                    .titan_label = "titan",
                    .variants = kMoeBf16Variants,
                    .titan_bf16 = true,
                    .extra_headers = {"titan ms", "torch best ms", "graph ms", "graph/titan", "JAX ms", "graph/JAX",
                                      "titan peak"},
                    .rows = {},
                    .notes = {}};
  for (const Shape& s : bf16_shapes) {
    auto it = ran.find("moe_bf16/" + s.name());
    if (it == ran.end()) continue;
    bench::Row row{.name = s.name(),
                   .titan = s.flops() / it->second.seconds / 1e9,
                   .torch = torch.rates("moe_bf16/" + s.name(), s.flops() / 1e9),
                   .extra = {}};
    const auto best = bench::best_any(row);
    const std::optional<double> graph = graph_ratio("moe_graph_bf16/", s, it->second, bf16.notes);
    const std::vector<std::string> j = jax_cells("moe_bf16/", s, bf16.notes);
    row.extra = {bench::fixed(it->second.seconds * 1e3, 1),
                 best ? bench::fixed(s.flops() / 1e9 / best->second * 1e3, 1) : "n/a",
                 graph_ms("moe_graph_bf16/", s),
                 graph ? bench::fixed(*graph, 2) + "x" : "n/a",
                 j[0],
                 j[1],
                 bench::mib(it->second.peak_bytes)};
    if (s.experts == 8 && best)
      bf16.notes.push_back("target e8: titan bf16 >= 1.3x the best torch bf16 figure: " +
                           bench::fixed(*row.titan / best->second, 2) + "x " +
                           (*row.titan >= 1.3 * best->second ? "MET" : "MISSED"));
    bf16.rows.push_back(std::move(row));
  }
  bf16.notes.push_back(jax_about);
  if (!bf16.rows.empty()) bench::print_table(bf16, torch);
  return 0;
}
