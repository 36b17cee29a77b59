#include "titan/train/metrics/step_profiler.h"

#include <ostream>

#include "titan/core/file_lock.h"

namespace titan::train {

StepProfiler::StepProfiler(const ProfilingConfig& cfg, const std::string& dump_folder, int rank,
                           std::ostream& log)
    : cfg_(cfg),
      folder_(std::filesystem::path(dump_folder) / cfg.save_traces_folder),
      rank_(rank),
      log_(log) {
  if (!cfg_.enable_profiling) return;
  trace::set_thread_name("training loop");
  // Found now rather than after the first traced step.
  check_writable(folder_, "trace folder (job.dump_folder/profiling.save_traces_folder)");
}

// A step that threw leaves recording on; the next run in this process must not find it so.
StepProfiler::~StepProfiler() {
  if (traced_step_ == 0) return;
  step_span_.reset();
  trace::stop();
}

std::filesystem::path StepProfiler::trace_path(int64_t step) const {
  return folder_ / ("iteration_" + std::to_string(step)) / ("rank" + std::to_string(rank_) + "_trace.json");
}

void StepProfiler::begin_step(int64_t step) {
  if (!cfg_.enable_profiling || step % cfg_.profile_freq != 0) return;
  trace::start();
  traced_step_ = step;
  step_span_ = std::make_unique<trace::Span>("step " + std::to_string(step), "step");
  step_span_->arg("step", step);
}

void StepProfiler::end_step(const std::function<void()>& settle) {
  if (traced_step_ == 0) return;
  step_span_.reset();
  if (settle) settle();
  trace::stop();
  const int64_t step = traced_step_;
  traced_step_ = 0;
  const std::filesystem::path path = trace_path(step);
  trace::write_json(path, rank_, "rank " + std::to_string(rank_));
  log_ << "titan: trace of step " << step << " written to " << path.string() << "\n";
}

}  // namespace titan::train
