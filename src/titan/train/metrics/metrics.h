#pragma once
// Training metrics: every metrics.log_freq steps, one console line, one JSON line in
// <dump_folder>/metrics.jsonl and (when enabled) one TensorBoard event; the same for each
// validation pass, in records of their own. The trainer passes what it measured each step;
// throughput is averaged over the steps since the last log, so one slow step (a checkpoint, a
// data stall) is seen in proportion. Call it on one rank only: the logger knows nothing of
// processes.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "titan/train/metrics/tensorboard.h"

namespace titan::train {

struct MetricsOptions {
  std::filesystem::path dump_folder;  // job.dump_folder: created if missing; metrics.jsonl goes here
  int64_t log_freq = 10;              // metrics.log_freq
  int64_t total_steps = 1;            // training.steps, for the ETA and the last line
  double peak_flops = 0;              // FLOP/s that MFU divides by (resolve_peak_flops); > 0
  bool enable_jsonl = true;           // metrics.enable_jsonl
  bool enable_tensorboard = false;    // metrics.enable_tensorboard
  std::string save_tb_folder = "tb";  // metrics.save_tb_folder, relative to dump_folder
  std::string jsonl_name = "metrics.jsonl";  // under dump_folder
  bool color = false;                        // ANSI colours on the console line (use_color)
  std::string mode = {};  // how the step ran ("graph on cpu"), ending the console line; empty: eager
  // The logged memory high-water mark where the step's tensors live off the host (graph mode on
  // a device whose plugin counts its memory); empty or nullopt: CpuAllocator's peak.
  std::function<std::optional<int64_t>()> device_peak_bytes = {};
};

// What the trainer measured in one step. tokens and flops_per_token are this rank's, and
// peak_flops is one rank's device, so MFU is per device.
struct StepMetrics {
  int64_t step = 0;  // 1-based, increasing
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;          // tokens processed in this step
  double step_seconds = 0;     // wall time of this step
  double flops_per_token = 0;  // model FLOPs (forward + backward) per token
  Scalars extra = {};          // e.g. MoE load statistics: written to every sink under their names
};

// One logged step. loss, grad_norm, lr and extra are the logged step's; throughput is the
// window's (the steps since the previous log).
struct LoggedMetrics {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double tokens_per_second = 0;
  double tflops = 0;              // achieved TFLOP/s (1e12 FLOP/s)
  double mfu_percent = 0;         // achieved / peak FLOP/s, in %
  int64_t peak_memory_bytes = 0;  // CpuAllocator peak since start (or its last reset_peak), or the device's
  double mean_step_seconds = 0;
  double eta_seconds = 0;  // mean_step_seconds * steps left
  Scalars extra = {};
};

// One validation pass (train/validator.h): the mean cross-entropy per token over every batch of
// every data-parallel rank.
struct ValidationMetrics {
  int64_t step = 0;           // the training step it followed
  double loss = 0;            // nats per token, or FLUX's velocity MSE (per_token false)
  bool per_token = true;      // a language model's cross-entropy, whose perplexity the logs show
  int64_t tokens = 0;         // over all ranks
  double seconds = 0;         // wall time of the pass
  double perplexity() const;  // exp(loss)
};

class MetricsLogger {
 public:
  // Creates dump_folder (and the TensorBoard folder) and opens the enabled sinks; metrics.jsonl
  // is appended to, so a resumed run continues it.
  explicit MetricsLogger(MetricsOptions options, std::ostream& console = std::cout);

  // Logs at step 1, every log_freq steps and at the last step.
  bool should_log(int64_t step) const;
  // Adds the step to the window; on a logging step writes every sink, resets the window and
  // returns what it wrote.
  std::optional<LoggedMetrics> record(const StepMetrics& m);
  // Writes a validation pass to every sink, whatever the step: a console line, a JSONL record of
  // its own (format_validation_json) and the TensorBoard tags validation/loss and
  // validation/perplexity.
  void record_validation(const ValidationMetrics& v);

  // Empty where that sink is disabled.
  const std::filesystem::path& jsonl_path() const { return jsonl_path_; }
  std::filesystem::path tensorboard_path() const;

 private:
  void write_jsonl(const std::string& record);

  MetricsOptions options_;
  std::ostream& console_;
  std::filesystem::path jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<EventFileWriter> tensorboard_;
  int64_t last_step_ = 0;
  // The steps since the last log.
  struct Window {
    int64_t steps = 0;
    int64_t tokens = 0;
    double seconds = 0;
    double flops = 0;
  };
  Window window_;
};

// The console line for `m`, e.g.
//   step  10/100  loss 2.3456  grad_norm 1.2340  lr 3.000e-04  tps 12345  tflops 0.123
//   mfu 12.34%  mem 1.50 GiB  eta 0:01:23  moe/load_max 1.1
std::string format_metrics_line(const LoggedMetrics& m, int64_t total_steps, bool color = false);
// Whether the console line is coloured: never when metrics.disable_color_printing or NO_COLOR is
// set; always when FORCE_COLOR is (non-empty, not "0"); else when the console is a terminal.
bool use_color(bool disabled, bool console_is_terminal);
// The JSONL object: step, wall_time, loss, grad_norm, lr, tps, tflops, mfu_pct,
// memory_peak_bytes, step_time_s, eta_s, then extras. Non-finite numbers become null.
std::string format_metrics_json(const LoggedMetrics& m, double wall_time);
// The TensorBoard scalars: loss, grad_norm, lr, tps, tflops, mfu_pct, memory_peak_gib, extras.
Scalars tensorboard_scalars(const LoggedMetrics& m);

// "validate step 20  loss 2.3456  ppl 10.45  (1.2 s)".
std::string format_validation_line(const ValidationMetrics& v);
// A record apart from the training steps', its keys prefixed so that no reader takes it for one:
// step, wall_time, validation/loss, validation/perplexity, validation/tokens, validation/time_s.
std::string format_validation_json(const ValidationMetrics& v, double wall_time);

// 1536 -> "1.50 KiB"; binary units up to TiB.
std::string format_bytes(int64_t bytes);
// 83 -> "0:01:23", 90061 -> "1d 01:01:01".
std::string format_duration(double seconds);

}  // namespace titan::train
