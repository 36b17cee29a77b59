// GEMM throughput, GFLOP/s = 2·m·n·k·batch / seconds, on four paths with the same shapes and
// threads: titan's kernel (kernels::cpu::gemm, a thin wrapper over BLAS), the raw cblas_sgemm it
// wraps, the full op ops::matmul (checks, dispatch, output allocation) and torch.matmul. What
// titan adds on top of BLAS should stay under 3%. Where the CPU has bf16 instructions, a second
// table times titan's bf16 kernel (oneDNN, bf16 operands, f32 sums) against torch.matmul on bf16
// tensors at the shapes of the models' products, and names oneDNN's implementation of each: the
// GEMM rate under everything bf16 titan runs, and where it falls behind PyTorch's own oneDNN.
#include "titan/kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/ops/linalg.h"

namespace {

using titan::Tensor;
namespace bench = titan::bench;

struct GemmCase {
  int64_t batch, m, n, k;
  bool ta, tb;
  bench::Plan plan;

  std::string layout() const { return std::string(ta ? "T" : "N") + (tb ? "T" : "N"); }
  std::string id() const {
    std::string s;
    if (batch > 1) s.append("b").append(std::to_string(batch)).append("_");
    s += std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    return s + "_" + layout();
  }
  double flops() const { return 2.0 * static_cast<double>(batch * m * n * k); }
  // Row strides of A and B as stored (see Operands).
  int64_t lda() const { return ta ? m : k; }
  int64_t ldb() const { return tb ? k : n; }
};

// A transposed operand is stored in the other layout ([k, m] for A, [n, k] for B) and handed to
// BLAS with its transpose flag, as a model's weight is.
struct Operands {
  Tensor a, b, c;
};

Operands make_operands(const GemmCase& g) {
  titan::Generator gen(42);
  auto shape = [&](int64_t rows, int64_t cols) {
    return g.batch > 1 ? titan::Shape{g.batch, rows, cols} : titan::Shape{rows, cols};
  };
  Operands o;
  o.a = Tensor::randn(g.ta ? shape(g.k, g.m) : shape(g.m, g.k), gen);
  o.b = Tensor::randn(g.tb ? shape(g.n, g.k) : shape(g.k, g.n), gen);
  o.c = Tensor::zeros(shape(g.m, g.n));
  return o;
}

// bf16 copies of A and B, C in f32: what a product under bf16 autocast multiplies.
struct Bf16Operands {
  Tensor a, b, c;
};

Bf16Operands make_bf16_operands(const GemmCase& g) {
  Operands o = make_operands(g);
  return {o.a.to(titan::kBF16), o.b.to(titan::kBF16), o.c};
}

void run_bf16(const GemmCase& g, Bf16Operands& o) {
  titan::kernels::cpu::gemm<titan::bf16>(g.ta, g.tb, g.m, g.n, g.k, 1.f, o.a.data<titan::bf16>(), g.lda(),
                                         o.b.data<titan::bf16>(), g.ldb(), 0.f, o.c.data<float>(), g.n);
  benchmark::ClobberMemory();
}

// The products of bf16 training and the encoders, one at a time: a square one, a linear layer's
// forward (weight stored [out, in], so B is transposed) and its input gradient at a Llama width.
std::vector<GemmCase> bf16_cases() {
  return {
      {1, 2048, 2048, 2048, false, false, {.reps = 3, .min_time = 0.3, .warmup = 0.1}},
      {1, 2048, 1536, 512, false, true, {}},
      {1, 2048, 512, 1536, false, true, {}},
      {1, 2048, 2048, 512, false, false, {}},
  };
}

void run_kernel(const GemmCase& g, Operands& o) {
  const float* a = o.a.data<float>();
  const float* b = o.b.data<float>();
  float* c = o.c.data<float>();
  if (g.batch == 1)
    titan::kernels::cpu::gemm<float>(g.ta, g.tb, g.m, g.n, g.k, 1.f, a, g.lda(), b, g.ldb(), 0.f, c, g.n);
  else
    titan::kernels::cpu::gemm_strided_batched<float>(g.ta, g.tb, g.m, g.n, g.k, 1.f, a, g.lda(), g.m * g.k, b,
                                                     g.ldb(), g.k * g.n, 0.f, c, g.n, g.m * g.n, g.batch);
  benchmark::ClobberMemory();
}

void run_cblas(const GemmCase& g, Operands& o) {
  const float* a = o.a.data<float>();
  const float* b = o.b.data<float>();
  float* c = o.c.data<float>();
  for (int64_t i = 0; i < g.batch; ++i)
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k), 1.f,
                a + i * g.m * g.k, static_cast<blasint>(g.lda()), b + i * g.k * g.n,
                static_cast<blasint>(g.ldb()), 0.f, c + i * g.m * g.n, static_cast<blasint>(g.n));
  benchmark::ClobberMemory();
}

void run_matmul(const GemmCase& g, Operands& o) {
  Tensor c = titan::ops::matmul(g.ta ? o.a.transpose(-1, -2) : o.a, g.tb ? o.b.transpose(-1, -2) : o.b);
  benchmark::DoNotOptimize(c.data_ptr());
}

using Path = void (*)(const GemmCase&, Operands&);
constexpr std::pair<const char*, Path> kPaths[] = {
    {"kernel", run_kernel}, {"cblas", run_cblas}, {"matmul", run_matmul}};

void bm_path(benchmark::State& s, const GemmCase& g, Path path) {
  Operands& o = bench::cached_inputs<Operands>(g.id(), [&] { return make_operands(g); });
  bench::PeakMemory peak;
  for (auto _ : s) path(g, o);
  peak.report(s);
  s.counters["FLOP/s"] = benchmark::Counter(g.flops(), benchmark::Counter::kIsIterationInvariantRate);
}

// Titan's cost over raw cblas as the median, over rounds, of (titan call time / cblas call time)
// - 1, the three paths called back to back in a rotating order. Other work on a shared machine
// comes and goes over seconds and would swamp a 3% difference between benchmarks timed a minute
// apart; it hits neighbouring calls alike. Runs for about `seconds`, at least 3 rounds.
struct Overhead {
  double kernel = 0, matmul = 0;
};

Overhead paired_overhead(const GemmCase& g, double seconds) {
  using clock = std::chrono::steady_clock;
  Operands o = make_operands(g);
  for (const auto& [name, path] : kPaths) path(g, o);
  std::vector<double> kernel, matmul;
  clock::time_point end =
      clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  for (size_t round = 0; round < 3 || clock::now() < end; ++round) {
    double t[3];
    for (size_t j = 0; j < 3; ++j) {
      size_t p = (round + j) % 3;
      clock::time_point start = clock::now();
      kPaths[p].second(g, o);
      t[p] = std::chrono::duration<double>(clock::now() - start).count();
    }
    kernel.push_back(t[0] / t[1] - 1.0);
    matmul.push_back(t[2] / t[1] - 1.0);
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(kernel), median(matmul)};
}

std::vector<GemmCase> gemm_cases() {
  // 4096 costs over half a second a call on 2 cores: a tiny min_time and warm-up mean one call each.
  std::vector<GemmCase> cases = {
      {1, 256, 256, 256, false, false, {.reps = 5, .min_time = 0.1, .warmup = 0.05}},
      {1, 512, 512, 512, false, false, {.reps = 5, .min_time = 0.2, .warmup = 0.1}},
      {1, 1024, 1024, 1024, false, false, {}},
      {1, 2048, 2048, 2048, false, false, {.reps = 3, .min_time = 0.3, .warmup = 0.1}},
      {1, 4096, 4096, 4096, false, false, {.reps = 3, .min_time = 0.01, .warmup = 0.01}},
  };
  for (auto [ta, tb] : {std::pair{false, true}, {true, false}, {true, true}})
    cases.push_back({1, 1024, 1024, 1024, ta, tb, {}});
  // Attention's scores, Q [T, d] @ K[T, d]^T per (batch, head): many mid-sized GEMMs.
  cases.push_back({32, 512, 512, 128, false, true, {}});
  return cases;
}

// The reference's torch.matmul on `g`'s operands in `dtype` (f32 or bf16), eager only: torch.compile
// of one matmul calls the same GEMM.
bench::TorchCase torch_matmul(const std::string& prefix, const GemmCase& g, const std::string& dtype) {
  return {prefix + g.id(),
          g.plan,
          {{"op", "matmul"},
           {"mode", "fwd"},
           {"dtype", dtype},
           {"batch", g.batch},
           {"m", g.m},
           {"n", g.n},
           {"k", g.k},
           {"trans_a", g.ta},
           {"trans_b", g.tb}},
          {"eager"}};
}

std::string signed_percent(double fraction) {
  std::string s = fraction >= 0 ? "+" : "";
  return s + bench::fixed(100.0 * fraction, 1) + "%";
}

std::string largest(const std::optional<double>& worst) {
  return worst ? signed_percent(*worst) : std::string("n/a");
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  std::vector<GemmCase> cases = gemm_cases();
  for (const GemmCase& g : cases) {
    for (const auto& [name, path] : kPaths)
      bench::add_benchmark("gemm/" + g.id() + "/" + name, g.plan,
                           [g, path](benchmark::State& s) { bm_path(s, g, path); });
  }
  const bool bf16 = !titan::kernels::cpu::onednn_bf16_isa().empty();
  if (bf16)
    for (const GemmCase& g : bf16_cases())
      bench::add_benchmark("gemm_bf16/" + g.id(), g.plan, [g](benchmark::State& s) {
        Bf16Operands& o = bench::cached_inputs<Bf16Operands>("bf16/" + g.id(), [&] { return make_bf16_operands(g); });
        for (auto _ : s) run_bf16(g, o);
        s.counters["FLOP/s"] = benchmark::Counter(g.flops(), benchmark::Counter::kIsIterationInvariantRate);
      });
  auto titan_runs = bench::run_benchmarks(argc, argv);
  auto measured = [&](const GemmCase& g, const char* path) -> const bench::Measurement* {
    auto it = titan_runs.find("gemm/" + g.id() + "/" + path);
    return it == titan_runs.end() ? nullptr : &it->second;
  };

  std::vector<bench::TorchCase> torch_cases;
  std::map<std::string, Overhead> overheads;
  for (const GemmCase& g : cases) {
    if (!measured(g, "kernel") && !measured(g, "cblas") && !measured(g, "matmul")) continue;
    torch_cases.push_back(torch_matmul("gemm/", g, "f32"));
    if (measured(g, "kernel") && measured(g, "cblas") && measured(g, "matmul")) {
      overheads[g.id()] = paired_overhead(g, 1.0);
      titan::CpuAllocator::instance().empty_cache();
    }
  }
  for (const GemmCase& g : bf16_cases()) {
    if (!titan_runs.contains("gemm_bf16/" + g.id())) continue;
    torch_cases.push_back(torch_matmul("gemm_bf16/", g, "bf16"));
  }
  bench::TorchResults torch = bench::run_torch_reference(torch_cases, titan::num_threads());

  bench::Table table{.title = "GEMM, f32 (GFLOP/s = 2*m*n*k*batch / median seconds)",
                     .unit = "GFLOP/s",
                     .titan_label = "ops::matmul",
                     .reference_label = "torch.matmul",
                     .variants = {"eager"},
                     .extra_headers = {"kernel GFLOP/s", "cblas GFLOP/s", "kernel vs cblas",
                                       "matmul vs cblas", "kernel/torch", "matmul peak"},
                     .rows = {},
                     .notes = {}};
  std::optional<double> worst_kernel, worst_matmul;
  for (const GemmCase& g : cases) {
    const bench::Measurement *kernel = measured(g, "kernel"), *cblas = measured(g, "cblas"),
                             *op = measured(g, "matmul");
    std::optional<double> ref = torch.get("gemm/" + g.id(), "eager");
    if (!kernel && !cblas && !op) continue;
    auto gflops = [&](double seconds) { return g.flops() / seconds / 1e9; };
    auto figure = [&](const bench::Measurement* m) {
      return m ? bench::fixed(gflops(m->seconds), 1) : std::string("n/a");
    };
    bench::Row row;
    row.name = (g.batch > 1 ? std::to_string(g.batch) + " x " : "") + std::to_string(g.m) + "x" +
               std::to_string(g.n) + "x" + std::to_string(g.k) + " " + g.layout();
    if (op) row.titan = gflops(op->seconds);
    if (ref) row.torch["eager"] = gflops(*ref);
    auto paired = overheads.find(g.id());
    std::string vs_kernel = "n/a", vs_matmul = "n/a";
    if (paired != overheads.end()) {
      const Overhead& oh = paired->second;
      worst_kernel = std::max(worst_kernel.value_or(oh.kernel), oh.kernel);
      worst_matmul = std::max(worst_matmul.value_or(oh.matmul), oh.matmul);
      vs_kernel = signed_percent(oh.kernel);
      vs_matmul = signed_percent(oh.matmul);
    }
    row.extra = {figure(kernel),
                 figure(cblas),
                 vs_kernel,
                 vs_matmul,
                 kernel && ref ? bench::fixed(*ref / kernel->seconds, 2) + "x" : "n/a",
                 op ? bench::mib(op->peak_bytes) : "n/a"};
    table.rows.push_back(std::move(row));
  }
  table.notes = {
      "m x n x k: C[m, n] = op(A)[m, k] @ op(B)[k, n]; layout NT = A as stored, B transposed (stored [n, "
      "k]).",
      "vs cblas = titan time / raw cblas_sgemm time - 1, median over ~1 s of rounds calling kernel, cblas "
      "and "
      "matmul back to back (paired, so load from other processes cancels); target < 3%. Largest: kernel " +
          largest(worst_kernel) + ", ops::matmul " + largest(worst_matmul) + ".",
      "matmul peak: titan allocator high-water mark while timing ops::matmul (inputs + output)."};
  if (!table.rows.empty()) bench::print_table(table, torch);

  bench::Table b16{.title = "GEMM, bf16 operands (GFLOP/s = 2*m*n*k / median seconds)",
                   .unit = "GFLOP/s",
                   .titan_label = "kernels::cpu::gemm<bf16>",
                   .reference_label = "torch.matmul bf16",
                   .variants = {"eager"},
                   .extra_headers = {"oneDNN implementation"},
                   .rows = {},
                   .notes = {}};
  for (const GemmCase& g : bf16_cases()) {
    auto it = titan_runs.find("gemm_bf16/" + g.id());
    if (it == titan_runs.end()) continue;
    bench::Row row;
    row.name = std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + " " + g.layout();
    row.titan = g.flops() / it->second.seconds / 1e9;
    if (std::optional<double> ref = torch.get("gemm_bf16/" + g.id(), "eager")) row.torch["eager"] = g.flops() / *ref / 1e9;
    row.extra = {titan::kernels::cpu::onednn_gemm_bf16_impl(g.ta, g.tb, g.m, g.n, g.k)};
    b16.rows.push_back(std::move(row));
  }
  if (!b16.rows.empty()) {
    b16.notes = {"titan: oneDNN " + titan::kernels::cpu::onednn_version() + " on " +
                     titan::kernels::cpu::onednn_bf16_isa() +
                     ", f32 C; torch.matmul on bf16 tensors (its own oneDNN; a bf16 C). Operands as in the f32 table.",
                 "Every bf16 product titan runs (linear layers, attention's tiles aside) goes through this kernel: "
                 "where it falls behind torch's, so does a bf16 model."};
    bench::print_table(b16, torch);
  }
  return 0;
}
