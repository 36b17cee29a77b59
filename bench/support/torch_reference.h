#pragma once
// Shared by every bench/<name>.cpp. A benchmark binary registers titan's cases with a timing Plan,
// runs them under Google Benchmark, then has bench/torch_reference.py time the same cases in
// PyTorch 2 (eager and torch.compile, f32 and bf16 autocast) with the same plan and thread count,
// and prints one table: titan's figure, each PyTorch figure and titan's ratio to the best.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <typeindex>
#include <vector>

namespace titan::bench {

// How one case is timed, identically on both sides: calls for `warmup` seconds (at least one),
// then `reps` repetitions of as many calls as fill `min_time` seconds (at least one). The figure
// is the median repetition's wall time per call.
struct Plan {
  int reps = 5;
  double min_time = 0.2;
  double warmup = 0.2;
};

// Registers `fn` under `name`, timed by `plan` in wall time (the work runs on several threads,
// so the main thread's CPU time would undercount it).
void add_benchmark(const std::string& name, const Plan& plan, std::function<void(benchmark::State&)> fn);

struct Measurement {
  double seconds = 0;     // median wall time per call
  double peak_bytes = 0;  // titan's allocator high-water mark during the timed calls; 0: not tracked
};

// Runs the registered benchmarks that pass the command line's --benchmark_filter (Google
// Benchmark's flags apply; the command line is read on the first call) and returns each one's
// median, by name. Cached inputs are released and the allocator's cache emptied before
// returning, so the reference gets the memory back.
std::map<std::string, Measurement> run_benchmarks(int argc, char** argv);

// Scoped to a benchmark function: resets the allocator's high-water mark; report() records it
// as the counter run_benchmarks reads.
class PeakMemory {
 public:
  PeakMemory();
  void report(benchmark::State& state) const;
};

namespace detail {
// The one input slot; switching to another key frees the previous inputs first.
std::shared_ptr<void>& input_slot(const std::string& key, std::type_index type);
}  // namespace detail

// Inputs kept across calls of the benchmark functions that share `key` (Google Benchmark calls a
// function once per warm-up, calibration round and repetition, and filling a large tensor with
// random numbers costs more than most ops on it), freed when a benchmark with another key asks.
template <typename T, typename Make>
T& cached_inputs(const std::string& key, Make&& make) {
  std::shared_ptr<void>& slot = detail::input_slot(key, typeid(T));
  if (!slot) slot = std::make_shared<T>(make());
  return *static_cast<T*>(slot.get());
}

// PyTorch's ways of running a case (VARIANTS in bench/torch_reference.py): eager and torch.compile
// (default inductor backend), in f32 and under bf16 autocast. titan in f32 is measured against the
// best f32 figure, bf16 figures being information, with a second ratio; titan in bf16
// (Table::titan_bf16) against the best of every variant.
inline const std::vector<std::string> kTorchF32 = {"eager", "compile"};
inline const std::vector<std::string> kTorchAll = {"eager", "compile", "eager bf16", "compile bf16"};
bool is_f32(const std::string& variant);

// One case for bench/torch_reference.py: `spec` holds "op" and its parameters (see the script).
struct TorchCase {
  std::string name;
  Plan plan;
  nlohmann::json spec;
  std::vector<std::string> variants = kTorchF32;
};

struct TorchResults {
  bool available = false;
  std::string about;  // torch version, threads and kernels in use, or why there is no reference
  // By case name, then variant: median seconds per call; the first call's seconds (under
  // torch.compile: with the compilation, which the median leaves out; the largest over rounds);
  // which implementation torch picked, where it has several.
  std::map<std::string, std::map<std::string, double>> seconds, first_call_seconds;
  std::map<std::string, std::map<std::string, std::string>> impl;
  std::map<std::string, std::string> errors;  // "case [variant]": why the script could not run it
  std::optional<double> get(const std::string& name, const std::string& variant) const;
  // work / seconds of every variant that ran `name`.
  std::map<std::string, double> rates(const std::string& name, double work) const;
};

// The interpreter that runs PyTorch scripts: $TITAN_PYTHON, else the source tree's .venv.
std::string python_path();
// The interpreter that runs the JAX references: $TITAN_JAX_PYTHON, else the venv
// scripts/setup_jax.sh links (.venv-jax).
std::string jax_python_path();

// A JAX reference's reply (bench/jax_cases.py): bench/<script> run on `cases` ({"name", ...}
// each) with `threads` and `reps` timed calls; no cases: not run.
struct JaxReply {
  nlohmann::json reply;
  // The median seconds of the case `name`, if it ran.
  std::optional<double> median_seconds(const std::string& name) const;
  // "JAX 0.10.2, jaxlib 0.10.2, 2 threads; bench/<script>, ...", or why it did not run.
  std::string about() const;
  std::string script;
};
JaxReply run_jax_cases(const std::string& script, const nlohmann::json& cases, int threads, int reps);
std::string shell_quote(const std::string& s);
// `command` with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 in front, unless the caller set
// GLIBC_TUNABLES (see torch_reference.cpp for why the reference runs so).
std::string with_malloc_tunables(const std::string& command);
// Runs `command` through the shell (its stderr goes to ours, for progress) and returns the last
// line of its stdout that is a JSON object, or {"error": why} when there is none.
nlohmann::json run_for_json(const std::string& command);
// Runs bench/<script> with the interpreter `python` on `request` (passed as a temporary JSON
// file) and returns its reply, or {"error": why}.
nlohmann::json run_python_script(const std::string& python, const std::string& script,
                                 const nlohmann::json& request);
// run_python_script with python_path(), saying how to get one where it is missing.
nlohmann::json run_torch_script(const std::string& script, const nlohmann::json& request);
// One line on the PyTorch that replied: version, threads, BLAS, oneDNN, ATen's CPU capability.
std::string describe_torch(const nlohmann::json& reply);
// A reply of the form bench/torch_reference.py prints, read into TorchResults.
TorchResults read_torch_reply(const nlohmann::json& reply, const std::string& script);

// Runs bench/torch_reference.py with $TITAN_PYTHON (default: the source tree's .venv) on
// `cases`, with torch.set_num_threads(threads). Never throws: a missing interpreter or torch, or
// a failed script, gives available = false and says why in `about`.
TorchResults run_torch_reference(const std::vector<TorchCase>& cases, int threads);

// A comparison table. Figures are throughputs (higher is better); the ratios are titan over the
// best PyTorch f32 figure of the row and over the best of all, so above 1 means titan is faster.
struct Row {
  std::string name;
  std::optional<double> titan;
  std::map<std::string, double> torch;  // by variant
  std::vector<std::string> extra;       // one cell per Table::extra_headers
};
struct Table {
  std::string title;
  std::string unit;  // of every figure, e.g. "GFLOP/s"
  std::string titan_label = "titan";
  std::string reference_label = "torch";
  // The reference's columns, in this order, headed "<reference_label> <variant>"; {""}: one
  // column, headed by reference_label alone.
  std::vector<std::string> variants = kTorchF32;
  bool higher_is_better = true;  // false for memory: the best reference figure is then the lowest
  // titan's figures are bf16's (training.mixed_precision_param = "bfloat16"): its headline ratio
  // is titan/best, against every variant.
  bool titan_bf16 = false;
  std::vector<std::string> extra_headers;
  std::vector<Row> rows;
  std::vector<std::string> notes;  // printed under the table
};
// The best f32 variant of a row and its figure, if any ran.
std::optional<std::pair<std::string, double>> best_f32(const Row& row, bool higher_is_better = true);
// The best PyTorch variant of every precision: what titan bf16 is measured against.
std::optional<std::pair<std::string, double>> best_any(const Row& row, bool higher_is_better = true);
void print_table(const Table& table, const TorchResults& reference);

// Titan's cases and the reference's, timed in alternating rounds (titan, torch, titan, ...). Each
// side's figure is the median over rounds of its per-round medians (peak memory: the largest). On
// a shared machine whose speed drifts over minutes, timing all of one side and then all of the
// other puts the drift into the ratio: bench_moe's e8/k2 ratio read 1.16x and 1.53x in two such
// runs ten minutes apart. `--rounds=N` on the command line overrides `rounds`; `torch_cases`
// gets the measurements of titan's first round, to pick the cases that ran.
struct Interleaved {
  std::map<std::string, Measurement> titan;
  TorchResults torch;
  int rounds = 0;
};
Interleaved run_interleaved(
    int argc, char** argv, int rounds,
    const std::function<std::vector<TorchCase>(const std::map<std::string, Measurement>&)>& torch_cases);

// Every benchmark's first call in main. Where OpenBLAS would run a kernel set older than this
// CPU (kernels/cpu/blas_kernels.h) and OPENBLAS_CORETYPE is unset, it starts the binary again
// with OPENBLAS_CORETYPE naming the faster set, so that titan is measured on the kernels this CPU
// is made for. (PyTorch 2 runs MKL and oneDNN, which pick their kernels from the CPU's ISA.)
void use_this_cpus_blas_kernels(char** argv);

// "OpenBLAS kernels <name>" and where the choice came from: detected, OPENBLAS_CORETYPE as given,
// or set by use_this_cpus_blas_kernels (with what OpenBLAS had detected).
std::string blas_kernels_summary();

// The CPU's model and the ISA extensions that set the kernels either side can use (avx2, avx512f,
// avx512_bf16, amx_bf16), from /proc/cpuinfo.
std::string cpu_summary();

// The CPU, cores, titan's threads, the BLAS kernels, and the share of the CPUs that other processes took
// since run_benchmarks started (or mark_start, for a benchmark that runs its own loop): work from others (a
// compile) makes every figure noisy.
std::string machine_summary();
void mark_start();

// A field of /proc/self/status in bytes ("VmRSS": resident now, "VmHWM": its high-water mark).
int64_t status_bytes(const std::string& field);
// Resets VmHWM to the resident set now, so that it measures what follows.
void reset_peak_rss();

// The middle value, or the mean of the two middle values; `v` must not be empty.
double median(std::vector<double> v);

std::string fixed(double value, int decimals);
std::string mib(double bytes);

}  // namespace titan::bench
