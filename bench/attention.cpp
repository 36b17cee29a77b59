// Attention, forward + backward in f32, three ways on the same shapes and threads: splash
// attention (block-sparse, tile by tile, never materialising the scores), titan's reference path
// (each head's [S, S] probabilities materialised; causal only, skipping the key blocks above the
// diagonal) and PyTorch 2's F.scaled_dot_product_attention (bench/attention_torch.py: is_causal
// for causal, a boolean mask otherwise), eager and under torch.compile, in f32 and (for
// information) under bf16 autocast. Batch 1,
// 8 heads, seq 512..8k, head_dim 64 and 128; masks causal, sliding window of 256 keys, and 8
// packed documents of equal length (document ids, causal within each).
//
// A call is out = attention(q, k, v), then the gradients of q, k and v for a random dout. Every
// path's GFLOP/s uses one count, splash's: 14 x (query, key) pairs in the tiles it computes
// (full and partial) x head_dim x heads, i.e. 4 for the forward's two GEMMs and 10 for the
// backward's five, so ratios are ratios of time. The BlockMask is built once per case, outside
// the timed calls (a model builds it once per batch for all layers); its build time is a column.
// Peak memory: titan's allocator high-water mark during the calls, PyTorch's resident growth
// (both include the inputs; torch's: of its best f32 variant).
//
// `bench_attention --sweep` times splash alone over block sizes instead (how the defaults in
// attention/block_mask.h were chosen). `bench_attention --bf16` times splash under bf16 autocast
// (bf16 tile products, float32 sums and softmax statistics) against itself in f32 and against
// PyTorch's SDPA on bf16 inputs, eager and under torch.compile, forward alone and forward +
// backward, at seq 4k and 8k, head_dim 64. `bench_attention --graph` times graph mode's attention
// (splash forward + backward captured as one program, run through the CPU PJRT plugin with
// splash's tiles as custom calls) against splash eager and against the same attention in plain
// JAX (bench/attention_jax.py, jitted whole), in f32 and bf16, at seq 2k and 4k, head_dim 64.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/allocator.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/core/rng.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/train/graph_mode/captured_function.h"

namespace {

using nlohmann::json;
using titan::Tensor;
using titan::attention::BlockMask;
using titan::attention::Mask;
namespace bench = titan::bench;

constexpr int64_t kBatch = 1, kHeads = 8;

struct MaskKind {
  std::string name;
  std::function<Mask(int64_t seq)> make;
  json torch;  // bench/attention_torch.py's "mask"
};

// Document d holds positions [d S / 8, (d + 1) S / 8): the ids attention_torch.py computes.
Tensor eight_document_ids(int64_t seq) {
  std::vector<int64_t> ids(static_cast<size_t>(seq));
  for (int64_t s = 0; s < seq; ++s) ids[s] = s * 8 / seq;
  return Tensor::from_vector(ids, {kBatch, seq});
}

Mask eight_documents(int64_t seq) {
  return Mask::document(eight_document_ids(seq));
}

const std::vector<MaskKind>& mask_kinds() {
  static const std::vector<MaskKind> kinds = {
      {"causal", [](int64_t) { return Mask::causal(); }, {{"kind", "causal"}}},
      {"window256", [](int64_t) { return Mask::sliding_window(256); }, {{"kind", "window"}, {"left", 256}}},
      {"document8", eight_documents, {{"kind", "document"}, {"docs", 8}}},
  };
  return kinds;
}

struct Inputs {
  Tensor q, k, v, dout;
};

Inputs make_inputs(int64_t seq, int64_t head_dim) {
  titan::Generator gen(7);
  auto leaf = [&] { return Tensor::randn({kBatch, seq, kHeads, head_dim}, gen).requires_grad_(); };
  Inputs in{leaf(), leaf(), leaf(), Tensor()};
  in.dout = Tensor::randn({kBatch, seq, kHeads, head_dim}, gen);
  return in;
}

// Long sequences: one warm-up call (as the torch script always makes), then single calls.
bench::Plan plan_for(int64_t seq) {
  if (seq <= 1024) return {.reps = 5, .min_time = 0.2, .warmup = 0.1};
  if (seq <= 4096) return {.reps = 3, .min_time = 1e-3, .warmup = 1e-3};
  return {.reps = 2, .min_time = 1e-3, .warmup = 1e-3};
}

// (query, key) pairs in the tiles splash computes, per batch row and head.
double tile_pairs(const BlockMask& bm) {
  double pairs = 0;
  for (int64_t qb = 0; qb < bm.num_q_blocks(); ++qb) {
    const int64_t rows = std::min(bm.block_q(), bm.seq() - qb * bm.block_q());
    for (auto list : {bm.full_kv(0, qb), bm.partial_kv(0, qb)})
      for (int32_t kb : list) pairs += double(rows * std::min(bm.block_kv(), bm.seq() - kb * bm.block_kv()));
  }
  return pairs;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Median seconds of BlockMask::build over at least 5 builds and 0.1 s.
double build_seconds(const Mask& mask, int64_t seq, int64_t block_q, int64_t block_kv) {
  std::vector<double> times;
  const auto start = std::chrono::steady_clock::now();
  while (times.size() < 5 || seconds_since(start) < 0.1) {
    const auto t = std::chrono::steady_clock::now();
    BlockMask::build(mask, kBatch, seq, block_q, block_kv);
    times.push_back(seconds_since(t));
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// One timed forward + backward per iteration.
void time_fwd_bwd(benchmark::State& s, const Inputs& in, const std::function<Tensor()>& forward) {
  bench::PeakMemory peak;
  for (auto _ : s) {
    Tensor out = forward();
    std::vector<Tensor> grads = titan::autograd::grad({out}, {in.dout}, {in.q, in.k, in.v});
    benchmark::DoNotOptimize(grads.front().data_ptr());
  }
  peak.report(s);
}

// One timed forward per iteration, recording no graph.
void time_fwd(benchmark::State& s, const std::function<Tensor()>& forward) {
  bench::PeakMemory peak;
  const titan::autograd::NoGradGuard no_grad;
  for (auto _ : s) benchmark::DoNotOptimize(forward().data_ptr());
  peak.report(s);
}

// Splash timed forward + backward (or forward alone), its products in `products` (autocast).
void add_splash(const std::string& name, int64_t seq, int64_t head_dim, const MaskKind& kind, int64_t block_q,
                int64_t block_kv, titan::DType products = titan::kF32, bool backward = true) {
  bench::add_benchmark(name, plan_for(seq), [=](benchmark::State& s) {
    const Inputs& in =
        bench::cached_inputs<Inputs>("s" + std::to_string(seq) + "d" + std::to_string(head_dim),
                                     [=] { return make_inputs(seq, head_dim); });
    const BlockMask bm = BlockMask::build(kind.make(seq), kBatch, seq, block_q, block_kv);
    const titan::AutocastGuard autocast(products);
    auto forward = [&] { return titan::attention::splash_attention(in.q, in.k, in.v, bm); };
    if (backward)
      time_fwd_bwd(s, in, forward);
    else
      time_fwd(s, forward);
  });
}

// The machine's f32 GEMM rate on all of titan's threads: the median of 5 square 2048 GEMMs.
double gemm_gflops() {
  const int64_t n = 2048;
  titan::Generator gen(1);
  Tensor a = Tensor::randn({n, n}, gen), b = Tensor::randn({n, n}, gen), c = Tensor::zeros({n, n});
  std::vector<double> times;
  for (int i = 0; i < 6; ++i) {
    const auto t = std::chrono::steady_clock::now();
    titan::kernels::cpu::gemm<float>(false, false, n, n, n, 1.f, a.data<float>(), n, b.data<float>(), n, 0.f,
                                     c.data<float>(), n);
    if (i > 0) times.push_back(seconds_since(t));
  }
  std::sort(times.begin(), times.end());
  return 2.0 * double(n * n * n) / times[times.size() / 2] / 1e9;
}

struct Case {
  std::string name;  // "<mask>/s<seq>/d<head_dim>"
  int64_t seq, head_dim;
  const MaskKind* kind;
  double flops = 0, tile_fraction = 0, build_s = 0;
};

// PyTorch's figures, and its resident growth by case and variant.
struct TorchRun {
  bench::TorchResults results;
  std::map<std::string, std::map<std::string, double>> peak_bytes;
};

// A case for bench/attention_torch.py, timed by seq's plan.
json torch_case(const Case& c, const std::vector<std::string>& variants) {
  const bench::Plan p = plan_for(c.seq);
  return {{"name", c.name},         {"batch", kBatch},       {"seq", c.seq},         {"heads", kHeads},
          {"head_dim", c.head_dim}, {"mask", c.kind->torch}, {"variants", variants}, {"reps", p.reps},
          {"min_time", p.min_time}, {"warmup", p.warmup}};
}

TorchRun run_torch(const json& cases) {
  TorchRun out;
  const json request = {{"threads", titan::num_threads()}, {"cases", cases}};
  if (request["cases"].empty()) {
    out.results.about = "no cases ran, so none were timed in PyTorch";
    return out;
  }
  std::cout << "\nTiming PyTorch (" << request["cases"].size() << " cases)";
  const json reply = bench::run_torch_script("attention_torch.py", request);
  out.results = bench::read_torch_reply(reply, "bench/attention_torch.py");
  if (out.results.available)
    for (const auto& [name, variants] : reply["results"].items())
      for (const auto& [variant, r] : variants.items())
        if (r.contains("peak_bytes")) out.peak_bytes[name][variant] = r["peak_bytes"].get<double>();
  return out;
}

std::string ratio(double a, double b) {
  return bench::fixed(a / b, 2) + "x";
}

int run_comparison(int argc, char** argv) {
  std::vector<Case> cases;
  for (int64_t head_dim : {64, 128})
    for (int64_t seq : {512, 1024, 2048, 4096, 8192}) {
      for (const MaskKind& kind : mask_kinds()) {
        Case c{kind.name + "/s" + std::to_string(seq) + "/d" + std::to_string(head_dim), seq, head_dim,
               &kind};
        add_splash("splash/" + c.name, seq, head_dim, kind, titan::attention::kDefaultBlockQ,
                   titan::attention::kDefaultBlockKv);
        cases.push_back(c);
      }
      // The reference path is causal; other masks have no reference-path figure.
      bench::add_benchmark(
          "reference/causal/s" + std::to_string(seq) + "/d" + std::to_string(head_dim), plan_for(seq),
          [=](benchmark::State& s) {
            const Inputs& in =
                bench::cached_inputs<Inputs>("s" + std::to_string(seq) + "d" + std::to_string(head_dim),
                                             [=] { return make_inputs(seq, head_dim); });
            time_fwd_bwd(s, in, [&] { return titan::attention::attention_reference(in.q, in.k, in.v); });
          });
    }
  const auto ran = bench::run_benchmarks(argc, argv);
  const double gemm = gemm_gflops();

  for (Case& c : cases) {
    const Mask mask = c.kind->make(c.seq);
    const BlockMask bm = BlockMask::build(mask, kBatch, c.seq);
    const double pairs = tile_pairs(bm);
    c.flops = 14.0 * pairs * double(c.head_dim * kHeads * kBatch);
    c.tile_fraction = pairs / double(c.seq * c.seq);
    c.build_s = build_seconds(mask, c.seq, bm.block_q(), bm.block_kv());
  }
  json torch_cases = json::array();
  for (const Case& c : cases)
    if (ran.count("splash/" + c.name)) torch_cases.push_back(torch_case(c, bench::kTorchAll));
  TorchRun torch = run_torch(torch_cases);

  bench::Table table{
      .title =
          "Attention forward + backward, f32, batch 1, 8 heads (GFLOP/s = 14 x pairs in splash's "
          "tiles x head_dim x heads / median s, one count for every path)",
      .unit = "GFLOP/s",
      .titan_label = "splash",
      .variants = bench::kTorchAll,
      .extra_headers = {"splash ms", "ref ms", "torch f32 ms", "splash/ref", "splash peak", "ref peak",
                        "torch f32 peak", "tiles", "mask ms", "of GEMM"},
      .rows = {},
      .notes = {}};
  auto splash_of = [&](const std::string& name) -> const bench::Measurement* {
    auto it = ran.find("splash/" + name);
    return it == ran.end() ? nullptr : &it->second;
  };
  for (const Case& c : cases) {
    const bench::Measurement* s = splash_of(c.name);
    if (!s) continue;
    auto ref = ran.find(c.kind->name == "causal" ? "reference/" + c.name : std::string());
    const bool has_ref = ref != ran.end();
    bench::Row row{.name = c.name,
                   .titan = c.flops / s->seconds / 1e9,
                   .torch = torch.results.rates(c.name, c.flops / 1e9),
                   .extra = {}};
    const auto best = bench::best_f32(row);
    const bool has_torch = best.has_value();
    row.extra = {bench::fixed(s->seconds * 1e3, 1),
                 has_ref ? bench::fixed(ref->second.seconds * 1e3, 1) : "n/a",
                 has_torch ? bench::fixed(c.flops / 1e9 / best->second * 1e3, 1) : "n/a",
                 has_ref ? ratio(ref->second.seconds, s->seconds) : "n/a",
                 bench::mib(s->peak_bytes),
                 has_ref ? bench::mib(ref->second.peak_bytes) : "n/a",
                 has_torch ? bench::mib(torch.peak_bytes[c.name][best->first]) : "n/a",
                 bench::fixed(100 * c.tile_fraction, 1) + "%",
                 bench::fixed(c.build_s * 1e3, 2),
                 bench::fixed(100 * (c.flops / s->seconds / 1e9) / gemm, 0) + "%"};
    table.rows.push_back(std::move(row));
  }

  // The targets, from the rows above.
  table.notes.push_back("GEMM rate of this machine (f32 2048^3, " + std::to_string(titan::num_threads()) +
                        " threads): " + bench::fixed(gemm, 1) +
                        " GFLOP/s; 'of GEMM' = splash GFLOP/s / that.");
  table.notes.push_back(
      "ref: titan's reference path (causal only). splash/ref = ref ms / splash ms. tiles = share "
      "of the [S, S] pairs in the tiles splash computes.");
  for (int64_t d : {64, 128}) {
    const std::string dim = "/d" + std::to_string(d);
    auto seconds = [&](const std::string& name) -> std::optional<double> {
      const bench::Measurement* m = splash_of(name);
      return m ? std::optional(m->seconds) : std::nullopt;
    };
    if (auto c4 = seconds("causal/s4096" + dim); c4 && ran.count("reference/causal/s4096" + dim))
      table.notes.push_back("target causal s4096" + dim + ": splash " +
                            ratio(ran.at("reference/causal/s4096" + dim).seconds, *c4) +
                            " faster than the reference path (asked: >= 2x)");
    if (auto w8 = seconds("window256/s8192" + dim), c8 = seconds("causal/s8192" + dim); w8 && c8)
      table.notes.push_back("target window256 s8192" + dim + ": " + ratio(*c8, *w8) +
                            " faster than causal s8192 (asked: >= 8x)");
    for (const MaskKind& kind : mask_kinds()) {
      std::string growth;
      for (int64_t seq : {1024, 2048, 4096, 8192}) {
        const bench::Measurement* a = splash_of(kind.name + "/s" + std::to_string(seq / 2) + dim);
        const bench::Measurement* b = splash_of(kind.name + "/s" + std::to_string(seq) + dim);
        if (a && b) growth += " " + bench::fixed(b->peak_bytes / a->peak_bytes, 2);
      }
      if (!growth.empty())
        table.notes.push_back("target peak memory linear in seq, " + kind.name + dim +
                              ": splash peak(2S) / peak(S) for S = 512..4096:" + growth + " (linear: 2)");
    }
  }
  table.notes.push_back("target: splash GFLOP/s within 2x of the GEMM rate ('of GEMM' >= 50%)");
  bench::print_table(table, torch.results);
  return 0;
}

// Splash alone over block sizes, on the masks and lengths where they matter most.
int run_sweep(int argc, char** argv) {
  const std::vector<std::pair<int64_t, int64_t>> blocks = {
      {32, 64}, {64, 32}, {64, 64}, {64, 128}, {128, 64}, {128, 128}, {256, 64}, {64, 256}, {256, 128}};
  struct SweepCase {
    std::string name;
    double flops;
  };
  std::vector<SweepCase> cases;
  for (int64_t head_dim : {64, 128})
    for (const MaskKind& kind : mask_kinds())
      for (auto [bq, bk] : blocks) {
        const int64_t seq = 4096;
        const std::string name = kind.name + "/s" + std::to_string(seq) + "/d" + std::to_string(head_dim) +
                                 "/" + std::to_string(bq) + "x" + std::to_string(bk);
        add_splash(name, seq, head_dim, kind, bq, bk);
        const BlockMask bm = BlockMask::build(kind.make(seq), kBatch, seq, 64, 64);
        cases.push_back({name, 14.0 * tile_pairs(bm) * double(head_dim * kHeads * kBatch)});
      }
  const auto ran = bench::run_benchmarks(argc, argv);
  bench::Table table{.title =
                         "Splash block sizes, forward + backward, f32, batch 1, 8 heads (GFLOP/s counted on "
                         "64 x 64 tiles for every block size, so figures compare as times)",
                     .unit = "GFLOP/s",
                     .titan_label = "splash",
                     .reference_label = "none",
                     .variants = {""},
                     .extra_headers = {"ms", "peak"},
                     .rows = {},
                     .notes = {}};
  for (const SweepCase& c : cases) {
    auto it = ran.find(c.name);
    if (it == ran.end()) continue;
    table.rows.push_back(
        {.name = c.name,
         .titan = c.flops / it->second.seconds / 1e9,
         .torch = {},
         .extra = {bench::fixed(it->second.seconds * 1e3, 1), bench::mib(it->second.peak_bytes)}});
  }
  bench::print_table(table, bench::TorchResults{.available = false,
                                                .about = "block-size sweep: splash only",
                                                .seconds = {},
                                                .first_call_seconds = {},
                                                .impl = {},
                                                .errors = {}});
  return 0;
}

// Splash under bf16 autocast and in f32, and PyTorch's SDPA on bf16 inputs (the variants "eager
// bf16" and "compile bf16" of a case with "bf16": "inputs"), forward alone and forward + backward.
int run_bf16(int argc, char** argv) {
  const int64_t head_dim = 64;
  struct Bf16Case {
    Case c;
    bool backward;
  };
  std::vector<Bf16Case> cases;
  for (int64_t seq : {4096, 8192})
    for (const MaskKind& kind : mask_kinds())
      for (bool backward : {false, true}) {
        const std::string name = kind.name + "/s" + std::to_string(seq) + "/d" + std::to_string(head_dim) +
                                 (backward ? "/fwd+bwd" : "/fwd");
        for (titan::DType products : {titan::kBF16, titan::kF32})
          add_splash(std::string(titan::dtype_name(products)) + "/" + name, seq, head_dim, kind,
                     titan::attention::kDefaultBlockQ, titan::attention::kDefaultBlockKv, products, backward);
        const BlockMask bm = BlockMask::build(kind.make(seq), kBatch, seq);
        const double flops = (backward ? 14.0 : 4.0) * tile_pairs(bm) * double(head_dim * kHeads * kBatch);
        cases.push_back({Case{name, seq, head_dim, &kind, flops}, backward});
      }
  const auto ran = bench::run_benchmarks(argc, argv);

  const std::vector<std::string> variants = {"eager bf16", "compile bf16"};
  json torch_cases = json::array();
  for (const Bf16Case& b : cases)
    if (ran.count("bf16/" + b.c.name)) {
      json c = torch_case(b.c, variants);
      c["bf16"] = "inputs";
      c["mode"] = b.backward ? "fwd_bwd" : "fwd";
      torch_cases.push_back(c);
    }
  const TorchRun torch = run_torch(torch_cases);

  bench::Table table{
      .title =
          "Attention in bf16, batch 1, 8 heads: splash under bf16 autocast (bf16 tile products, float32 "
          "sums) vs PyTorch SDPA on bf16 inputs (GFLOP/s = 4 (fwd) or 14 (fwd+bwd) x pairs in splash's "
          "tiles x head_dim x heads / median s)",
      .unit = "GFLOP/s",
      .titan_label = "splash bf16",
      .variants = variants,
      .titan_bf16 = true,
      .extra_headers = {"splash f32 GFLOP/s", "bf16/f32", "splash bf16 ms", "splash f32 ms", "torch best ms"},
      .rows = {},
      .notes = {
          "splash bf16/best: the ratio to the faster of eager and compile. The torch bf16 columns here are "
          "SDPA on bf16 inputs, not autocast."}};
  for (const Bf16Case& b : cases) {
    auto bf = ran.find("bf16/" + b.c.name), f32 = ran.find("f32/" + b.c.name);
    if (bf == ran.end()) continue;
    bench::Row row{.name = b.c.name,
                   .titan = b.c.flops / bf->second.seconds / 1e9,
                   .torch = torch.results.rates(b.c.name, b.c.flops / 1e9),
                   .extra = {}};
    const bool has_f32 = f32 != ran.end();
    double best = 0;
    for (const auto& [variant, rate] : row.torch) best = std::max(best, rate);
    row.extra = {has_f32 ? bench::fixed(b.c.flops / f32->second.seconds / 1e9, 1) : "n/a",
                 has_f32 ? ratio(f32->second.seconds, bf->second.seconds) : "n/a",
                 bench::fixed(bf->second.seconds * 1e3, 1),
                 has_f32 ? bench::fixed(f32->second.seconds * 1e3, 1) : "n/a",
                 best > 0 ? bench::fixed(b.c.flops / 1e9 / best * 1e3, 1) : "n/a"};
    table.rows.push_back(std::move(row));
  }
  bench::print_table(table, torch.results);
  return 0;
}

// Splash's forward + backward as graph mode runs it: captured once with the document ids (when the
// mask has them) as an input of the program, the tiles as custom calls.
struct GraphAttention {
  Inputs in;
  Tensor ids;
  std::unique_ptr<titan::train::CapturedFunction> step;
};

GraphAttention capture_attention(int64_t seq, int64_t head_dim, const MaskKind& kind, titan::DType products) {
  static titan::graph::Runner runner({.plugin = "cpu"});
  GraphAttention g{make_inputs(seq, head_dim), Tensor(), nullptr};
  std::vector<Tensor> inputs = {g.in.q, g.in.k, g.in.v};
  if (kind.name == "document8") {
    g.ids = eight_document_ids(seq);
    inputs.push_back(g.ids);
  }
  const titan::AutocastGuard autocast(products);
  g.step = std::make_unique<titan::train::CapturedFunction>(
      runner,
      [&] {
        // Inside the capture, where the ids name the program's input.
        const Mask mask = g.ids.defined() ? Mask::document(g.ids) : kind.make(seq);
        const BlockMask bm = BlockMask::build(mask, kBatch, seq);
        return std::vector<Tensor>{titan::attention::splash_attention(g.in.q, g.in.k, g.in.v, bm)};
      },
      inputs, std::vector<Tensor>{g.in.dout}, titan::train::CaptureOptions{.custom_kernels = true});
  TITAN_CHECK(g.step->custom_kernels(), "bench_attention: the CPU plugin cannot run titan's kernels as custom calls");
  return g;
}

// Graph mode's attention against splash eager and JAX, f32 and bf16.
int run_graph(int argc, char** argv) {
  const int64_t head_dim = 64;
  std::vector<std::pair<Case, titan::DType>> cases;
  for (titan::DType products : {titan::kF32, titan::kBF16})
    for (int64_t seq : {2048, 4096})
      for (const MaskKind& kind : mask_kinds()) {
        const std::string name = std::string(titan::dtype_name(products)) + "/" + kind.name + "/s" +
                                 std::to_string(seq) + "/d" + std::to_string(head_dim);
        add_splash("eager/" + name, seq, head_dim, kind, titan::attention::kDefaultBlockQ,
                   titan::attention::kDefaultBlockKv, products);
        bench::add_benchmark("graph/" + name, plan_for(seq), [=](benchmark::State& s) {
          GraphAttention& g = bench::cached_inputs<GraphAttention>(
              "graph/" + name, [&] { return capture_attention(seq, head_dim, kind, products); });
          for (auto _ : s) benchmark::DoNotOptimize(g.step->run().size());
        });
        const BlockMask bm = BlockMask::build(kind.make(seq), kBatch, seq);
        cases.push_back({Case{name, seq, head_dim, &kind, 14.0 * tile_pairs(bm) * double(head_dim * kHeads * kBatch)},
                         products});
      }
  const auto ran = bench::run_benchmarks(argc, argv);

  json jax_cases = json::array();
  for (const auto& [c, products] : cases)
    if (ran.count("graph/" + c.name))
      jax_cases.push_back({{"name", c.name},
                           {"batch", kBatch},
                           {"seq", c.seq},
                           {"heads", kHeads},
                           {"head_dim", c.head_dim},
                           {"mask", c.kind->torch},
                           {"variant", products == titan::kBF16 ? "bf16" : "f32"}});
  const bench::JaxReply jax = bench::run_jax_cases("attention_jax.py", jax_cases, titan::num_threads(), 3);

  bench::Table table{
      .title = "Attention forward + backward in graph mode, batch 1, 8 heads, head_dim 64: splash captured as one "
               "program (tiles as custom calls) vs splash eager vs JAX jitted (GFLOP/s = 14 x pairs in splash's "
               "tiles x head_dim x heads / median s)",
      .unit = "GFLOP/s",
      .titan_label = "graph",
      .reference_label = "JAX",
      .variants = {""},
      .extra_headers = {"eager GFLOP/s", "graph ms", "eager ms", "JAX ms", "graph/eager"},
      .rows = {},
      .notes = {}};
  for (const auto& [c, products] : cases) {
    auto g = ran.find("graph/" + c.name), e = ran.find("eager/" + c.name);
    if (g == ran.end() || e == ran.end()) continue;
    const std::optional<double> j = jax.median_seconds(c.name);
    const double vs_eager = e->second.seconds / g->second.seconds;
    bench::Row row{.name = c.name, .titan = c.flops / g->second.seconds / 1e9, .torch = {}, .extra = {}};
    if (j) row.torch[""] = c.flops / *j / 1e9;
    row.extra = {bench::fixed(c.flops / e->second.seconds / 1e9, 1), bench::fixed(g->second.seconds * 1e3, 1),
                 bench::fixed(e->second.seconds * 1e3, 1), j ? bench::fixed(*j * 1e3, 1) : "n/a",
                 ratio(e->second.seconds, g->second.seconds)};
    table.rows.push_back(std::move(row));
    if (c.seq == 4096 && c.kind->name != "window256") {
      table.notes.push_back("target " + c.name + ": graph >= 0.9x splash eager: " + bench::fixed(vs_eager, 2) + "x " +
                            (vs_eager >= 0.9 ? "MET" : "MISSED"));
      if (j)
        table.notes.push_back("target " + c.name + ": graph >= JAX: " + ratio(*j, g->second.seconds) + " " +
                              (*j >= g->second.seconds ? "MET" : "MISSED"));
    }
  }
  table.notes.push_back(
      "bf16 rows: titan under bf16 autocast (bf16 tile products, float32 softmax statistics), JAX on bf16 inputs.");
  bench::print_table(table, bench::TorchResults{.available = !jax.reply.contains("error"),
                                                .about = jax.about(),
                                                .seconds = {},
                                                .first_call_seconds = {},
                                                .impl = {},
                                                .errors = {}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  std::vector<char*> args(argv, argv + argc);
  using Run = int (*)(int, char**);
  const std::pair<const char*, Run> modes[] = {{"--sweep", run_sweep}, {"--bf16", run_bf16}, {"--graph", run_graph}};
  for (const auto& [flag, run] : modes) {
    const auto it =
        std::find_if(args.begin(), args.end(), [&](char* a) { return std::strcmp(a, flag) == 0; });
    if (it == args.end()) continue;
    args.erase(it);
    return run(static_cast<int>(args.size()), args.data());
  }
  return run_comparison(argc, argv);
}
