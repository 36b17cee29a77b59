#include "titan/train/metrics/memory_snapshot.h"

#include <exception>
#include <ostream>
#include <string>

#include "titan/core/file_lock.h"
#include "titan/core/memory_snapshot.h"

namespace titan::train {

MemorySnapshots::MemorySnapshots(const JobConfig& cfg, int rank, std::ostream& log)
    : enabled_(cfg.profiling.enable_memory_snapshot),
      freq_(cfg.profiling.profile_freq),
      rank_(rank),
      folder_(std::filesystem::path(cfg.job.dump_folder) / cfg.profiling.save_memory_snapshot_folder),
      log_(log) {
  if (!enabled_) return;
  // Found now rather than after the first snapshot's step, as the trace folder is.
  check_writable(folder_, "memory snapshot folder (job.dump_folder/profiling.save_memory_snapshot_folder)");
  CpuAllocator::instance().start_recording();
}

MemorySnapshots::~MemorySnapshots() {
  if (enabled_) CpuAllocator::instance().stop_recording();
}

std::filesystem::path MemorySnapshots::step_path(int64_t step) const {
  return folder_ / ("iteration_" + std::to_string(step)) / ("rank" + std::to_string(rank_) + "_memory_snapshot.json");
}

std::filesystem::path MemorySnapshots::oom_path() const {
  return folder_ / "oom" / ("rank" + std::to_string(rank_) + "_memory_snapshot.json");
}

void MemorySnapshots::after_step(int64_t step) {
  if (!enabled_ || step % freq_ != 0) return;
  MemorySnapshot s = CpuAllocator::instance().memory_snapshot();
  s.reason = "step";
  s.step = step;
  s.rank = rank_;
  write_memory_snapshot(s, step_path(step));
}

void MemorySnapshots::write_oom(int64_t step, const OutOfMemoryError& e) {
  // Taken at the failing allocation; without one (too little memory left to make it), what is
  // left after unwinding is still better than nothing.
  MemorySnapshot s = e.snapshot() ? *e.snapshot() : CpuAllocator::instance().memory_snapshot();
  s.reason = "oom";
  s.step = step;
  s.rank = rank_;
  const std::filesystem::path path = oom_path();
  try {
    write_memory_snapshot(s, path);
  } catch (const std::exception& failed) {  // the out-of-memory error is the one to report
    log_ << "titan: out of memory at step " << step << "; the memory snapshot could not be written: "
         << failed.what() << "\n";
    return;
  }
  log_ << "titan: out of memory at step " << step << "; memory snapshot written to " << path.string()
       << " (draw it with scripts/memviz.py)\n";
}

}  // namespace titan::train
