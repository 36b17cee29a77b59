#pragma once
// [profiling]: the trace of every step divisible by profile_freq (as TorchTitan picks them),
// each rank's written to <dump_folder>/<save_traces_folder>/iteration_<step>/rank<r>_trace.json,
// a Chrome trace that Perfetto (ui.perfetto.dev) and chrome://tracing open.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include "titan/core/trace.h"
#include "titan/train/config/profiling_config.h"

namespace titan::train {

class StepProfiler {
 public:
  // `log` gets a line per trace written: the trainer passes rank 0 its log, the others a null one.
  StepProfiler(const ProfilingConfig& cfg, const std::string& dump_folder, int rank, std::ostream& log);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Starts recording when `step` is one to trace.
  void begin_step(int64_t step);
  // Ends a traced step: runs `settle` while still recording (what must finish for the trace to be
  // whole: a checkpoint written in the background), stops, and writes the trace (errors name the
  // file). Steps not traced skip `settle`.
  void end_step(const std::function<void()>& settle = nullptr);

 private:
  std::filesystem::path trace_path(int64_t step) const;

  ProfilingConfig cfg_;
  std::filesystem::path folder_;
  int rank_ = 0;
  std::ostream& log_;
  int64_t traced_step_ = 0;                 // the step being recorded; 0: none
  std::unique_ptr<trace::Span> step_span_;  // the span of the whole step traced
};

}  // namespace titan::train
