#include "support/torch_reference.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "titan/core/allocator.h"
#include "titan/core/error.h"
#include "titan/core/parallel.h"
#include "titan/core/process_malloc.h"
#include "titan/kernels/cpu/blas_kernels.h"

namespace titan::bench {

namespace {

constexpr const char* kPeakCounter = "peak_bytes";

struct Slot {
  std::string key;
  std::type_index type = typeid(void);
  std::shared_ptr<void> value;
};

Slot& slot() {
  static Slot s;
  return s;
}

void release_inputs() {
  slot() = Slot{};
  CpuAllocator::instance().empty_cache();
}

// Keeps each benchmark's median while printing what Google Benchmark prints anyway.
class Collector : public benchmark::ConsoleReporter {
 public:
  explicit Collector(bool color) : benchmark::ConsoleReporter(color ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Aggregate || r.aggregate_name != "median") continue;
      Measurement m;
      // Every repetition runs the same iteration count, so this is the median time per call.
      m.seconds = r.real_accumulated_time / static_cast<double>(std::max<int64_t>(r.iterations, 1));
      if (auto it = r.counters.find(kPeakCounter); it != r.counters.end()) m.peak_bytes = it->second.value;
      results[r.run_name.function_name] = m;
    }
  }
  std::map<std::string, Measurement> results;
};

// CPU time of the whole machine (from /proc/stat) and of this process and its waited-for
// children (the reference script), in seconds; the difference is what other processes took.
struct CpuTimes {
  double busy = 0, total = 0, ours = 0;
};

CpuTimes cpu_times() {
  CpuTimes t;
  std::ifstream f("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) {
    double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    t.busy = (user + nice + system + irq + softirq + steal) / tick;
    t.total = t.busy + (idle + iowait) / tick;
  }
  auto seconds = [](const rusage& r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
  };
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  t.ours = seconds(self) + seconds(children);
  return t;
}

std::optional<CpuTimes>& start_times() {
  static std::optional<CpuTimes> t;
  return t;
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string python_path() {
  if (const char* p = std::getenv("TITAN_PYTHON"); p && *p) return p;
  return std::string(TITAN_SOURCE_DIR) + "/.venv/bin/python";
}

std::string jax_python_path() {
  if (const char* p = std::getenv("TITAN_JAX_PYTHON"); p && *p) return p;
  return std::string(TITAN_SOURCE_DIR) + "/.venv-jax/bin/python";
}

std::optional<double> JaxReply::median_seconds(const std::string& name) const {
  if (!reply.contains("results") || !reply["results"].contains(name)) return std::nullopt;
  std::vector<double> s = reply["results"][name]["seconds"].get<std::vector<double>>();
  if (s.empty()) return std::nullopt;
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

std::string JaxReply::about() const {
  if (reply.contains("error")) return "JAX: not run (" + reply.value("error", std::string("?")) + ")";
  return "JAX " + reply.value("jax_version", std::string("?")) + ", jaxlib " + reply.value("jaxlib", std::string("?")) +
         ", " + std::to_string(reply.value("threads", 0)) + " threads; bench/" + script +
         ", jitted whole, median of its timed calls after one warm-up, run after titan's rounds";
}

JaxReply run_jax_cases(const std::string& script, const nlohmann::json& cases, int threads, int reps) {
  if (cases.empty()) return {{{"error", "no case ran on titan's side"}}, script};
  return {run_python_script(jax_python_path(), script, {{"threads", threads}, {"reps", reps}, {"cases", cases}}),
          script};
}

std::string with_malloc_tunables(const std::string& command) {
  // glibc returns every freed block over 32 MiB to the kernel, so each fresh eager output is
  // page-faulted 4 KiB at a time: on this VM that costs more than the kernel writing it (a
  // 256 MiB x * c takes 120 ms instead of 17). Transparent huge pages for malloc's blocks cut
  // that to a few ms, so the ratio measures kernels rather than page faults (titan's caching
  // allocator does not fault once warm). A GLIBC_TUNABLES from the caller is kept as it is.
  if (std::getenv("GLIBC_TUNABLES")) return command;
  return "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 " + command;
}

nlohmann::json run_for_json(const std::string& command) {
  std::string text;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
    int status = pclose(pipe);
    if (status != 0 && text.empty()) text = "exit status " + std::to_string(status);
  }
  std::string last;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') last = line;
  nlohmann::json reply = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object())
    return {{"error", "no result (" + (text.empty() ? std::string("no output") : text.substr(0, 300)) + ")"}};
  return reply;
}

namespace detail {
std::shared_ptr<void>& input_slot(const std::string& key, std::type_index type) {
  Slot& s = slot();
  if (s.key != key) {
    release_inputs();
    s.key = key;
    s.type = type;
  }
  TITAN_CHECK(s.type == type, "bench: inputs under key '", key, "' were made with another type");
  return s.value;
}
}  // namespace detail

void add_benchmark(const std::string& name, const Plan& plan, std::function<void(benchmark::State&)> fn) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), std::move(fn));
  b->Repetitions(plan.reps)
      ->ReportAggregatesOnly(true)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->MinWarmUpTime(plan.warmup)
      ->MinTime(plan.min_time);
}

void mark_start() {
  start_times() = cpu_times();
}

std::map<std::string, Measurement> run_benchmarks(int argc, char** argv) {
  // Google Benchmark reads its flags once; later calls (rounds) run the same selection again.
  static std::optional<bool> color;
  if (!color) {
    mark_start();
    std::cout << machine_summary() << "\n";
    // A reporter passed in does not read --benchmark_color, so decide here: colour on a terminal
    // unless the flag says otherwise, never in a file.
    color = isatty(STDOUT_FILENO) != 0;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--benchmark_color=", 0) == 0) {
        std::string v = arg.substr(arg.find('=') + 1);
        color = v == "true" || v == "yes" || v == "1" || (v == "auto" && *color);
      }
    }
    benchmark::Initialize(&argc, argv);
    benchmark::ReportUnrecognizedArguments(argc, argv);
  }
  Collector collector(*color);
  benchmark::RunSpecifiedBenchmarks(&collector);
  release_inputs();
  return collector.results;
}

int64_t status_bytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream s(line.substr(field.size() + 1));
    int64_t kib = 0;
    s >> kib;
    return kib * 1024;
  }
  TITAN_CHECK(false, "bench: no ", field, " in /proc/self/status");
  return 0;
}

void reset_peak_rss() {
  // "5" resets VmHWM to the current resident set (Linux >= 4.0).
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  TITAN_CHECK(f.good(), "bench: cannot write /proc/self/clear_refs to reset the peak resident set");
}

double median(std::vector<double> v) {
  TITAN_CHECK(!v.empty(), "bench: median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Interleaved run_interleaved(
    int argc, char** argv, int rounds,
    const std::function<std::vector<TorchCase>(const std::map<std::string, Measurement>&)>& torch_cases) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--rounds=", 0) == 0) {
      const std::string v = a.substr(9);
      // A usage error, said before anything is timed, not an exception out of main.
      if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(v) == 0) {
        std::cerr << argv[0] << ": --rounds expects a whole number from 1 to 9999, got '" << v << "'\n";
        std::exit(2);
      }
      rounds = std::stoi(v);
    } else {
      args.push_back(argv[i]);
    }
  }
  std::map<std::string, std::vector<double>> titan_seconds;
  std::map<std::string, std::map<std::string, std::vector<double>>> torch_seconds;
  Interleaved out;
  out.rounds = rounds;
  std::vector<TorchCase> cases;
  bool torch_missing = false;  // no interpreter or no torch: later rounds would not find one either
  for (int r = 0; r < rounds; ++r) {
    std::cout << "\n== round " << r + 1 << " of " << rounds << ": titan\n" << std::flush;
    for (const auto& [name, m] : run_benchmarks(static_cast<int>(args.size()), args.data())) {
      titan_seconds[name].push_back(m.seconds);
      out.titan[name].peak_bytes = std::max(out.titan[name].peak_bytes, m.peak_bytes);
    }
    if (r == 0) cases = torch_cases(out.titan);
    if (torch_missing) continue;
    std::cout << "== round " << r + 1 << " of " << rounds << ": torch" << std::flush;
    TorchResults t = run_torch_reference(cases, num_threads());
    if (!t.available) {
      if (!out.torch.available) {
        torch_missing = true;
        out.torch.about = t.about;
      }
      continue;
    }
    out.torch.available = true;
    out.torch.about = t.about;
    for (const auto& [name, by_variant] : t.seconds)
      for (const auto& [variant, s] : by_variant) torch_seconds[name][variant].push_back(s);
    for (const auto& [name, by_variant] : t.first_call_seconds)
      for (const auto& [variant, s] : by_variant) {
        double& first = out.torch.first_call_seconds[name][variant];
        first = std::max(first, s);
      }
    for (const auto& [name, by_variant] : t.impl)
      out.torch.impl[name].insert(by_variant.begin(), by_variant.end());
    for (const auto& [name, e] : t.errors) out.torch.errors[name] = e;
  }
  for (const auto& [name, v] : titan_seconds) out.titan[name].seconds = median(v);
  for (const auto& [name, by_variant] : torch_seconds)
    for (const auto& [variant, v] : by_variant) out.torch.seconds[name][variant] = median(v);
  return out;
}

PeakMemory::PeakMemory() {
  CpuAllocator::instance().reset_peak();
}

void PeakMemory::report(benchmark::State& state) const {
  state.counters[kPeakCounter] =
      benchmark::Counter(static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes),
                         benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

bool is_f32(const std::string& variant) {
  return variant.find("bf16") == std::string::npos;
}

std::optional<double> TorchResults::get(const std::string& name, const std::string& variant) const {
  auto it = seconds.find(name);
  if (it == seconds.end()) return std::nullopt;
  auto v = it->second.find(variant);
  if (v == it->second.end()) return std::nullopt;
  return v->second;
}

std::map<std::string, double> TorchResults::rates(const std::string& name, double work) const {
  std::map<std::string, double> out;
  if (auto it = seconds.find(name); it != seconds.end())
    for (const auto& [variant, s] : it->second) out[variant] = work / s;
  return out;
}

nlohmann::json run_torch_script(const std::string& script, const nlohmann::json& request) {
  const std::string python = python_path();
  if (access(python.c_str(), X_OK) != 0)
    return {{"error", "no Python interpreter at " + python +
                          " (set TITAN_PYTHON, or run `make deps-test` to create .venv with torch)"}};
  return run_python_script(python, script, request);
}

nlohmann::json run_python_script(const std::string& python, const std::string& script,
                                 const nlohmann::json& request) {
  if (access(python.c_str(), X_OK) != 0) return {{"error", "no Python interpreter at " + python}};
  char path[] = "/tmp/titan-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {{"error", "cannot create a temporary file for the request"}};
  const std::string text = request.dump();
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  // The script's progress goes to stderr (the terminal); stdout carries one JSON line.
  const std::string command = with_malloc_tunables(
      shell_quote(python) + " " + shell_quote(std::string(TITAN_SOURCE_DIR) + "/bench/" + script) + " " +
      shell_quote(path));
  std::cout << "\n$ " << command << "\n" << std::flush;
  nlohmann::json reply =
      written ? run_for_json(command) : nlohmann::json{{"error", "cannot write the request"}};
  std::remove(path);
  return reply;
}

std::string describe_torch(const nlohmann::json& reply) {
  auto field = [&](const char* key) {
    return reply.contains(key) && reply[key].is_string() ? reply[key].get<std::string>() : std::string("?");
  };
  return "torch: PyTorch " + field("torch") + " on the CPU, " + std::to_string(reply.value("threads", 0)) +
         " threads; BLAS " + field("blas") + ", oneDNN " + field("onednn") + ", ATen CPU capability " +
         field("cpu_capability") +
         "; torch.compile: inductor (TORCHINDUCTOR_COMPILE_THREADS=" + field("compile_threads") +
         "); GLIBC_TUNABLES=" + field("glibc_tunables");
}

TorchResults read_torch_reply(const nlohmann::json& reply, const std::string& script) {
  TorchResults out;
  if (reply.contains("error")) {
    out.about = "PyTorch reference unavailable: " + script + ": " + reply["error"].get<std::string>();
    return out;
  }
  out.available = true;
  out.about = describe_torch(reply);
  for (const auto& [name, variants] : reply["results"].items())
    for (const auto& [variant, r] : variants.items()) {
      if (!r.contains("seconds")) {
        out.errors[name + " [" + variant + "]"] = r.value("error", std::string("no result"));
        continue;
      }
      out.seconds[name][variant] = r["seconds"].get<double>();
      out.first_call_seconds[name][variant] = r.value("first_call_seconds", 0.0);
      if (r.contains("impl")) out.impl[name][variant] = r["impl"].get<std::string>();
    }
  return out;
}

TorchResults run_torch_reference(const std::vector<TorchCase>& cases, int threads) {
  if (cases.empty()) {
    TorchResults none;
    none.about = "no cases ran, so none were timed in PyTorch";
    return none;
  }
  nlohmann::json request = {{"threads", threads}, {"cases", nlohmann::json::array()}};
  for (const TorchCase& c : cases) {
    nlohmann::json j = c.spec;
    j["name"] = c.name;
    j["variants"] = c.variants;
    j["reps"] = c.plan.reps;
    j["min_time"] = c.plan.min_time;
    j["warmup"] = c.plan.warmup;
    request["cases"].push_back(std::move(j));
  }
  std::cout << "\nTiming the PyTorch reference (" << cases.size() << " cases)";
  return read_torch_reply(run_torch_script("torch_reference.py", request), "bench/torch_reference.py");
}

std::string fixed(double value, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << value;
  return s.str();
}

std::string mib(double bytes) {
  return fixed(bytes / (1024.0 * 1024.0), 0) + " MiB";
}

namespace {
std::optional<std::pair<std::string, double>> best_where(const Row& row, bool higher_is_better,
                                                         bool f32_only) {
  std::optional<std::pair<std::string, double>> best;
  for (const auto& [variant, v] : row.torch)
    if ((!f32_only || is_f32(variant)) && (!best || (higher_is_better ? v > best->second : v < best->second)))
      best = {variant, v};
  return best;
}
}  // namespace

std::optional<std::pair<std::string, double>> best_f32(const Row& row, bool higher_is_better) {
  return best_where(row, higher_is_better, true);
}

std::optional<std::pair<std::string, double>> best_any(const Row& row, bool higher_is_better) {
  return best_where(row, higher_is_better, false);
}

void print_table(const Table& table, const TorchResults& reference) {
  const bool several = table.variants.size() > 1;
  const bool any_bf16 = std::any_of(table.variants.begin(), table.variants.end(),
                                    [](const std::string& v) { return !is_f32(v); });
  std::vector<std::string> header = {"case", table.titan_label + " " + table.unit};
  for (const std::string& v : table.variants)
    header.push_back(table.reference_label + (v.empty() ? "" : " " + v) + " " + table.unit);
  // A table of bf16 variants alone has no f32 ratio to show.
  const bool any_f32 = std::any_of(table.variants.begin(), table.variants.end(), is_f32);
  if (any_f32) header.push_back(table.titan_label + "/" + (several ? "best f32" : table.reference_label));
  if (any_bf16) header.push_back(table.titan_label + "/best");
  header.insert(header.end(), table.extra_headers.begin(), table.extra_headers.end());
  std::vector<std::vector<std::string>> cells;
  auto figure = [](const std::optional<double>& v) { return v ? fixed(*v, 1) : std::string("n/a"); };
  for (const Row& r : table.rows) {
    std::vector<std::string> line = {r.name, figure(r.titan)};
    for (const std::string& v : table.variants) {
      auto it = r.torch.find(v);
      line.push_back(it == r.torch.end() ? std::string("n/a") : figure(it->second));
    }
    auto ratio = [&](const std::optional<std::pair<std::string, double>>& b) {
      if (!r.titan || !b) return std::string("n/a");
      return fixed(*r.titan / b->second, 2) + "x" + (several ? " (" + b->first + ")" : "");
    };
    if (any_f32) line.push_back(ratio(best_f32(r, table.higher_is_better)));
    if (any_bf16) line.push_back(ratio(best_any(r, table.higher_is_better)));
    line.insert(line.end(), r.extra.begin(), r.extra.end());
    line.resize(header.size());
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) {
    width[i] = header[i].size();
    for (const auto& line : cells) width[i] = std::max(width[i], line[i].size());
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    for (size_t i = 0; i < line.size(); ++i) {
      if (i == 0)
        std::cout << std::left << std::setw(static_cast<int>(width[i])) << line[i];
      else
        std::cout << "  " << std::right << std::setw(static_cast<int>(width[i])) << line[i];
    }
    std::cout << "\n";
  };

  std::cout << "\n== " << table.title << "\n";
  print_line(header);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  std::cout << std::string(total - 2, '-') << "\n";
  for (const auto& line : cells) print_line(line);
  std::cout << reference.about << "\n";
  if (!reference.available) std::cout << "(titan's figures above stand alone)\n";
  if (any_bf16 && table.titan_bf16)
    std::cout
        << "bf16 columns: PyTorch in bf16 (torch.autocast(\"cpu\", dtype=torch.bfloat16) unless the notes "
           "say otherwise). titan runs bf16 too (training.mixed_precision_param = \"bfloat16\"): its "
           "headline ratio is titan/best, against every variant.\n";
  else if (any_bf16)
    std::cout
        << "bf16 columns: torch.autocast(\"cpu\", dtype=torch.bfloat16), for information: titan runs f32 "
           "here, so its headline ratio is against the best f32 figure (titan/best f32); titan's own bf16 "
           "is measured in its bf16 tables and runs.\n";
  for (const auto& [name, by_variant] : reference.first_call_seconds) {
    std::string line;
    for (const auto& [variant, s] : by_variant)
      if (variant.rfind("compile", 0) == 0) line += " " + variant + " " + fixed(s, 1) + " s;";
    if (!line.empty())
      std::cout << "torch.compile first call (compilation, not in the figures), " << name << ":" << line
                << "\n";
  }
  for (const auto& [name, by_variant] : reference.impl)
    for (const auto& [variant, impl] : by_variant)
      std::cout << "torch " << name << " [" << variant << "]: " << impl << "\n";
  for (const auto& [name, why] : reference.errors)
    std::cout << "torch failed on " << name << ": " << why << "\n";
  for (const std::string& n : table.notes) std::cout << n << "\n";
  std::cout << machine_summary() << "\n" << std::flush;
}

namespace {
// What OpenBLAS had detected, when use_this_cpus_blas_kernels replaced it.
constexpr const char* kDetectedBlasKernels = "TITAN_BENCH_DETECTED_BLAS_KERNELS";
}  // namespace

void use_this_cpus_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string detected = kernels::cpu::blas_corename();
  const std::string faster = kernels::cpu::faster_blas_coretype(detected, kernels::cpu::host_vector_isa());
  if (faster.empty()) return;
  setenv("OPENBLAS_CORETYPE", faster.c_str(), 1);
  setenv(kDetectedBlasKernels, detected.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::cerr << "bench: cannot restart with OPENBLAS_CORETYPE=" << faster << " (" << std::strerror(errno)
            << "); measuring OpenBLAS's " << detected << " kernels, older than this CPU\n";
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kDetectedBlasKernels);
}

std::string blas_kernels_summary() {
  std::string s = "OpenBLAS kernels " + kernels::cpu::blas_corename();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* detected = std::getenv(kDetectedBlasKernels);
  if (coretype && detected)
    return s + " (OPENBLAS_CORETYPE=" + coretype + ", set by the benchmark for titan: OpenBLAS detected " +
           detected + ", older than this CPU)";
  if (coretype) return s + " (OPENBLAS_CORETYPE=" + coretype + ")";
  return s + " (detected)";
}

std::string cpu_summary() {
  std::ifstream f("/proc/cpuinfo");
  std::string model = "?", flags;
  for (std::string line; std::getline(f, line) && (model == "?" || flags.empty());) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : std::string();
    if (line.rfind("model name", 0) == 0) model = value;
    if (line.rfind("flags", 0) == 0) flags = " " + value + " ";
  }
  std::string isa;
  for (const char* flag : {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}) {
    const bool has = flags.find(" " + std::string(flag) + " ") != std::string::npos;
    isa += std::string(isa.empty() ? "" : " ") + (has ? "+" : "-") + flag;
  }
  return "CPU " + model + " (" + isa + ")";
}

std::string machine_summary() {
  std::ostringstream s;
  s << "machine: " << cpu_summary() << ", " << std::thread::hardware_concurrency() << " cores, titan threads "
    << num_threads() << ", " << blas_kernels_summary() << ", titan's malloc " << process_malloc();
  if (const auto& start = start_times()) {
    CpuTimes now = cpu_times();
    double total = now.total - start->total;
    if (total > 0) {
      double others = std::max(0.0, (now.busy - start->busy) - (now.ours - start->ours)) / total;
      s << "; other processes took " << fixed(100 * others, 0) << "% of the CPUs since the start";
      if (others > 0.1) s << " -- figures are noisy";
    }
  }
  return s.str();
}

}  // namespace titan::bench
