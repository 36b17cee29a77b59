#pragma once
// [profiling]: the trace of every step divisible by profile_freq (as TorchTitan picks them),
// each rank's written to <dump_folder>/<save_traces_folder>/iteration_<step>/rank<r>_trace.json,
// a Chrome trace that Perfetto (ui.perfetto.dev) and chrome://tracing open.
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <string>

#include "titan/core/trace.h"
#include "titan/train/job_config.h"

namespace titan::train {

class StepProfiler {
 public:
  // Only rank 0 is expected to pass a `log` that prints (the trainer's log).
  StepProfiler(const JobConfig::Profiling& cfg, const std::string& dump_folder, int rank, std::ostream& log);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Starts recording when `step` is one to trace.
  void begin_step(int64_t step);
  // Ends a traced step: stops recording and writes the trace (errors name the file).
  void end_step();

  // Where the trace of `step` goes.
  std::filesystem::path trace_path(int64_t step) const;

 private:
  JobConfig::Profiling cfg_;
  std::filesystem::path folder_;
  int rank_ = 0;
  std::ostream& log_;
  int64_t traced_step_ = 0;                 // the step being recorded; 0: none
  std::unique_ptr<trace::Span> step_span_;  // the span of the whole step traced
};

}  // namespace titan::train
