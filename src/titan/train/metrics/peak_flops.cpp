#include "titan/train/metrics/peak_flops.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/parallel.h"
#include "titan/kernels/cpu/blas_kernels.h"
#include "titan/kernels/cpu/gemm.h"

namespace titan::train {
namespace {

using Clock = std::chrono::steady_clock;

// A missing file is an empty cache; anything else must be an object of positive numbers.
nlohmann::json load_cache(const std::filesystem::path& cache) {
  std::ifstream in(cache);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(j.is_object(), "peak FLOP/s cache '", cache.string(),
              "' is not a JSON object of {\"<cpu> | <threads> threads\": flops}; delete it to re-measure");
  for (const auto& [key, value] : j.items()) {
    TITAN_CHECK(value.is_number() && value.get<double>() > 0, "peak FLOP/s cache '", cache.string(),
                "': key '", key, "' holds ", value.dump(),
                ", expected a positive number; delete it to re-measure");
  }
  return j;
}

// User and system CPU seconds of every thread of this process so far.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

}  // namespace

double measure_peak_flops(DType precision, int n, int max_repeats, double budget_seconds) {
  return measure_peak(precision, n, max_repeats, budget_seconds).flops_per_second;
}

PeakMeasurement measure_peak(DType precision, int n, int max_repeats, double budget_seconds) {
  TITAN_CHECK(n > 0 && max_repeats > 0, "measure_peak_flops: expected n > 0 and max_repeats > 0, got n=", n,
              ", max_repeats=", max_repeats);
  TITAN_CHECK(precision == kF32 || precision == kBF16, "measure_peak_flops: expected f32 or bf16, got ",
              dtype_name(precision));
  // Plain vectors, not tensors: the benchmark must not show up in the allocator's peak bytes.
  // Values near 1 keep the sums normal (denormals would time a slow path, not the peak).
  size_t elems = static_cast<size_t>(n) * n;
  std::vector<float> a(elems, 0.5f), b(elems, 0.25f), c(elems, 0.0f);
  std::vector<bf16> a16(precision == kBF16 ? elems : 0, bf16(0.5f)), b16(a16.size(), bf16(0.25f));
  auto run = [&] {
    if (precision == kBF16)
      kernels::cpu::gemm<bf16>(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
    else
      kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  run();  // warm-up: thread team start, page faults on c, BLAS buffers
  double flops = 2.0 * n * static_cast<double>(n) * n;
  PeakMeasurement best;
  double spent = 0;
  for (int r = 0; r < max_repeats && (r == 0 || spent < budget_seconds); ++r) {
    const double cpu0 = process_cpu_seconds();
    auto t0 = Clock::now();
    run();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = process_cpu_seconds() - cpu0;
    spent += s;
    if (flops / s > best.flops_per_second)
      best = {flops / s, std::min(1.0, cpu / (s * static_cast<double>(std::max(1, num_threads()))))};
  }
  return best;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t begin = line.find_first_not_of(" \t", colon + 1);
    if (begin == std::string::npos) break;
    return line.substr(begin);
  }
  return "unknown cpu";
}

std::string peak_flops_cache_key(DType precision) {
  const std::string base = cpu_model_name() + " | " + std::to_string(num_threads()) + " threads | ";
  if (precision == kBF16)
    return base + "oneDNN " + kernels::cpu::onednn_version() + " " + kernels::cpu::onednn_bf16_isa() +
           " bf16";
  return base + "OpenBLAS " + kernels::cpu::blas_corename();
}

std::filesystem::path default_peak_flops_cache() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "titan" / "peak_flops.json";
  const char* home = std::getenv("HOME");
  TITAN_CHECK(home && *home,
              "peak FLOP/s cache: neither XDG_CACHE_HOME nor HOME is set; set one, or give "
              "metrics.peak_flops in the config");
  return std::filesystem::path(home) / ".cache" / "titan" / "peak_flops.json";
}

std::optional<double> read_cached_peak_flops(const std::filesystem::path& cache, const std::string& key) {
  nlohmann::json j = load_cache(cache);
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  return it->get<double>();
}

void write_cached_peak_flops(const std::filesystem::path& cache, const std::string& key, double flops) {
  TITAN_CHECK(flops > 0, "peak FLOP/s cache: refusing to store ", flops, " for '", key, "'; expected > 0");
  nlohmann::json j = load_cache(cache);
  j[key] = flops;
  std::error_code ec;
  if (cache.has_parent_path()) std::filesystem::create_directories(cache.parent_path(), ec);
  TITAN_CHECK(!ec, "peak FLOP/s cache: cannot create '", cache.parent_path().string(), "': ", ec.message());
  std::filesystem::path tmp = cache;
  tmp += ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    TITAN_CHECK(out.good(), "peak FLOP/s cache: cannot write '", tmp.string(), "'");
  }
  std::filesystem::rename(tmp, cache, ec);
  TITAN_CHECK(!ec, "peak FLOP/s cache: cannot rename '", tmp.string(), "' to '", cache.string(),
              "': ", ec.message());
}

PeakFlops resolve_peak_flops(double configured, DType precision, const std::filesystem::path& cache,
                             double min_cpu_share) {
  TITAN_CHECK(configured >= 0, "metrics.peak_flops = ", configured,
              ": expected FLOP/s > 0, or 0 to measure this machine");
  if (configured > 0) return {configured, "metrics.peak_flops"};
  std::string key = peak_flops_cache_key(precision);
  if (std::optional<double> cached = read_cached_peak_flops(cache, key)) {
    return {*cached, "cached in " + cache.string() + " for " + key};
  }
  const PeakMeasurement m = measure_peak(precision);
  const double measured = m.flops_per_second;
  std::string source =
      std::string("measured (") + (precision == kBF16 ? "bf16" : "f32") + " GEMM) for " + key;
  if (m.cpu_share < min_cpu_share)
    return {measured, source + " while other processes held the cores (this process had " +
                          std::to_string(static_cast<int>(100 * m.cpu_share)) + "% of " +
                          std::to_string(num_threads()) +
                          " threads' time), so not cached: MFU reads high in this run; give metrics.peak_flops, "
                          "or start a run on idle cores to cache the machine's figure"};
  try {
    write_cached_peak_flops(cache, key, measured);
    source += ", cached in " + cache.string();
  } catch (const Error& e) {
    source += std::string(", not cached: ") + e.what();
  }
  return {measured, source};
}

PeakFlops resolve_peak_flops(double configured, DType precision) {
  if (configured > 0) return {configured, "metrics.peak_flops"};
  return resolve_peak_flops(configured, precision, default_peak_flops_cache());
}

}  // namespace titan::train
