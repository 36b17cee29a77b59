#pragma once
// The peak FLOP/s that MFU divides by, measured on this machine rather than looked up in a
// table of devices (tables go stale; a measurement also reflects the thread count in use).
#include <filesystem>
#include <optional>
#include <string>

#include "titan/core/dtype.h"

namespace titan::train {

// Best-of-N GEMM rate of n x n x n products through kernels::cpu::gemm in `precision` (f32:
// OpenBLAS's sgemm; bf16: oneDNN's bf16 x bf16 -> f32), at the current OpenMP thread count, after
// one warm-up call; stops early once `budget_seconds` are spent (at least one timed call). Run it
// while nothing else busies the cores: MPI ranks sharing a node should measure one at a time or
// share a cached figure.
double measure_peak_flops(DType precision = kF32, int n = 2048, int max_repeats = 5,
                          double budget_seconds = 1.5);

// measure_peak_flops's figure, and the share of the cores this process had during its best call:
// the CPU time its threads got over wall time x the thread count. Below 1 when other processes
// ran on the same cores, and then the figure is a slowed GEMM's, not the machine's peak.
struct PeakMeasurement {
  double flops_per_second = 0;
  double cpu_share = 0;
};
PeakMeasurement measure_peak(DType precision = kF32, int n = 2048, int max_repeats = 5, double budget_seconds = 1.5);
// The share below which a measurement is not cached: a figure taken on shared cores would make
// every later run's MFU read high.
inline constexpr double kPeakMinCpuShare = 0.9;

// "model name" from /proc/cpuinfo, or "unknown cpu" where there is none.
std::string cpu_model_name();

// What a cached figure is valid for: this CPU at this thread count, with these GEMM kernels
// (OpenBLAS's for f32, oneDNN's version and instructions for bf16).
std::string peak_flops_cache_key(DType precision = kF32);

// $XDG_CACHE_HOME/titan/peak_flops.json, else ~/.cache/titan/peak_flops.json.
std::filesystem::path default_peak_flops_cache();

// The cache is one JSON object mapping keys to FLOP/s. A missing file or key is nullopt; a file
// that is not such an object is an error naming it.
std::optional<double> read_cached_peak_flops(const std::filesystem::path& cache, const std::string& key);
// Adds or replaces `key`, keeping other keys; written to a temporary file and renamed, so ranks
// writing at once never leave a half-written file.
void write_cached_peak_flops(const std::filesystem::path& cache, const std::string& key, double flops);

struct PeakFlops {
  double flops_per_second;
  std::string source;  // where the figure came from, for the start-up log
};

// metrics.peak_flops when it is > 0; otherwise the figure for this machine in `precision` (the
// precision the run's matrix products use) in `cache`, measured and cached on first use. A figure
// measured while other processes held the cores (cpu_share below min_cpu_share) is used for
// this run but not cached, and `source` says so. A cache that cannot be written costs a
// re-measurement next time, not the run: that failure is reported in `source`.
PeakFlops resolve_peak_flops(double configured, DType precision, const std::filesystem::path& cache,
                             double min_cpu_share = kPeakMinCpuShare);
// The same with default_peak_flops_cache(), looked up only when there is no configured figure.
PeakFlops resolve_peak_flops(double configured, DType precision = kF32);

}  // namespace titan::train
