#pragma once
// profiling.enable_memory_snapshot for the trainer: the allocator records from construction (so
// that the model's parameters and the optimizer's state are attributed), a snapshot is written
// after every profile_freq-th step to
//   <job.dump_folder>/<save_memory_snapshot_folder>/iteration_<step>/rank<r>_memory_snapshot.json
// and, when a step runs out of memory, the snapshot taken at the failing allocation to
//   .../<save_memory_snapshot_folder>/oom/rank<r>_memory_snapshot.json
// before the error goes on. Disabled, it does nothing.
#include <filesystem>
#include <iosfwd>
#include <utility>

#include "titan/core/allocator.h"
#include "titan/train/config/job_config.h"

namespace titan::train {

class MemorySnapshots {
 public:
  MemorySnapshots(const JobConfig& cfg, int rank, std::ostream& log);
  ~MemorySnapshots();
  MemorySnapshots(const MemorySnapshots&) = delete;
  MemorySnapshots& operator=(const MemorySnapshots&) = delete;

  // Runs `step_fn` (training step `step`); an OutOfMemoryError from it is written, then rethrown.
  template <typename F>
  auto run_step(int64_t step, F&& step_fn) {
    try {
      return std::forward<F>(step_fn)();
    } catch (const OutOfMemoryError& e) {
      if (enabled_) write_oom(step, e);
      throw;
    }
  }
  // Writes the snapshot when `step` is one of profile_freq's.
  void after_step(int64_t step);

  std::filesystem::path step_path(int64_t step) const;
  std::filesystem::path oom_path() const;

 private:
  void write_oom(int64_t step, const OutOfMemoryError& e);

  bool enabled_;
  int64_t freq_;
  int rank_;
  std::filesystem::path folder_;
  std::ostream& log_;
};

}  // namespace titan::train
