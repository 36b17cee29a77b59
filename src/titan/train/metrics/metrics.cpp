#include "titan/train/metrics/metrics.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <system_error>

#include "titan/core/allocator.h"
#include "titan/core/error.h"

namespace titan::train {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// GCC 12 has no std::format.
[[gnu::format(printf, 1, 2)]] std::string sprintf_string(const char* fmt, ...) {
  char buf[256];
  va_list args;
  va_start(args, fmt);
  int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return std::string(buf, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof(buf)) - 1)));
}

int decimal_digits(int64_t v) {
  int d = 1;
  for (; v >= 10; v /= 10) ++d;
  return d;
}

// An extra scalar must not overwrite a figure the logger writes, nor another extra.
void check_extra_name(const std::string& name, bool taken) {
  TITAN_CHECK(!name.empty() && !taken, "MetricsLogger: extra scalar name '", name,
              "' is empty or already written (by the logger or an earlier extra); give it a name of its own "
              "(e.g. prefixed 'moe/')");
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  constexpr std::array<const char*, 4> kUnits = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  for (v /= 1024; v >= 1024 && unit + 1 < kUnits.size(); v /= 1024) ++unit;
  return sprintf_string("%.2f %s", v, kUnits[unit]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  int64_t days = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
  std::string hms = sprintf_string("%02lld:%02lld:%02lld", static_cast<long long>(h),
                                   static_cast<long long>(m), static_cast<long long>(sec));
  if (days > 0) return std::to_string(days) + "d " + hms;
  return hms.substr(hms[0] == '0' ? 1 : 0);
}

std::string format_metrics_line(const LoggedMetrics& m, int64_t total_steps, bool color) {
  // TorchTitan's colours: step red, loss green, memory yellow, throughput blue, FLOP/s cyan, MFU
  // magenta.
  auto paint = [&](const char* code, const std::string& text) {
    return color ? std::string("\033[") + code + "m" + text + "\033[39m" : text;
  };
  std::string line =
      paint("31", sprintf_string("step %*lld/%lld", decimal_digits(total_steps),
                                 static_cast<long long>(m.step), static_cast<long long>(total_steps)));
  line += "  " + paint("32", sprintf_string("loss %.4f", m.loss));
  line += sprintf_string("  grad_norm %.4f  lr %.3e", m.grad_norm, m.lr);
  line += "  " + paint("34", sprintf_string("tps %.0f", m.tokens_per_second));
  line += "  " + paint("36", sprintf_string("tflops %.3g", m.tflops));
  line += "  " + paint("35", sprintf_string("mfu %.2f%%", m.mfu_percent));
  line += "  " + paint("33", "mem " + format_bytes(m.peak_memory_bytes)) + "  eta " +
          format_duration(m.eta_seconds);
  for (const auto& [name, value] : m.extra) line += "  " + name + sprintf_string(" %.4g", value);
  return line;
}

bool use_color(bool disabled, bool console_is_terminal) {
  if (disabled || std::getenv("NO_COLOR")) return false;
  if (const char* force = std::getenv("FORCE_COLOR"); force && *force && std::string(force) != "0")
    return true;
  return console_is_terminal;
}

std::string format_metrics_json(const LoggedMetrics& m, double wall_time) {
  nlohmann::ordered_json j = {{"step", m.step},
                              {"wall_time", wall_time},
                              {"loss", m.loss},
                              {"grad_norm", m.grad_norm},
                              {"lr", m.lr},
                              {"tps", m.tokens_per_second},
                              {"tflops", m.tflops},
                              {"mfu_pct", m.mfu_percent},
                              {"memory_peak_bytes", m.peak_memory_bytes},
                              {"step_time_s", m.mean_step_seconds},
                              {"eta_s", m.eta_seconds}};
  for (const auto& [name, value] : m.extra) {
    check_extra_name(name, j.contains(name));
    j[name] = value;
  }
  return j.dump();
}

double ValidationMetrics::perplexity() const {
  return std::exp(loss);
}

std::string format_validation_line(const ValidationMetrics& v) {
  if (!v.per_token)
    return sprintf_string("validate step %lld  loss %.4f  (%.1f s)", static_cast<long long>(v.step), v.loss,
                          v.seconds);
  return sprintf_string("validate step %lld  loss %.4f  ppl %.2f  (%.1f s)", static_cast<long long>(v.step),
                        v.loss, v.perplexity(), v.seconds);
}

std::string format_validation_json(const ValidationMetrics& v, double wall_time) {
  nlohmann::ordered_json record{{"step", v.step}, {"wall_time", wall_time}, {"validation/loss", v.loss}};
  if (v.per_token) record["validation/perplexity"] = v.perplexity();
  record["validation/tokens"] = v.tokens;
  record["validation/time_s"] = v.seconds;
  return record.dump();
}

Scalars tensorboard_scalars(const LoggedMetrics& m) {
  Scalars s = {{"loss", m.loss},
               {"grad_norm", m.grad_norm},
               {"lr", m.lr},
               {"tps", m.tokens_per_second},
               {"tflops", m.tflops},
               {"mfu_pct", m.mfu_percent},
               {"memory_peak_gib", static_cast<double>(m.peak_memory_bytes) / kGiB}};
  for (const auto& extra : m.extra) {
    auto same = [&](const auto& kv) { return kv.first == extra.first; };
    check_extra_name(extra.first, std::any_of(s.begin(), s.end(), same));
    s.push_back(extra);
  }
  return s;
}

MetricsLogger::MetricsLogger(MetricsOptions options, std::ostream& console)
    : options_(std::move(options)), console_(console) {
  TITAN_CHECK(options_.log_freq > 0, "metrics.log_freq = ", options_.log_freq,
              ": expected a step count >= 1");
  TITAN_CHECK(options_.total_steps > 0,
              "MetricsLogger: total_steps (training.steps) = ", options_.total_steps, ": expected >= 1");
  TITAN_CHECK(options_.peak_flops > 0, "MetricsLogger: peak_flops = ", options_.peak_flops,
              ": expected FLOP/s > 0; pass resolve_peak_flops(metrics.peak_flops)");
  TITAN_CHECK(!options_.dump_folder.empty(),
              "job.dump_folder is empty: set it to the folder for metrics and checkpoints");
  std::error_code ec;
  std::filesystem::create_directories(options_.dump_folder, ec);
  TITAN_CHECK(!ec, "job.dump_folder '", options_.dump_folder.string(), "' cannot be created: ", ec.message(),
              "; set job.dump_folder to a writable folder");
  if (options_.enable_jsonl) {
    jsonl_path_ = options_.dump_folder / options_.jsonl_name;
    jsonl_.open(jsonl_path_, std::ios::app);
    TITAN_CHECK(jsonl_.is_open(), "cannot open '", jsonl_path_.string(),
                "' for appending; check the permissions of job.dump_folder");
  }
  if (options_.enable_tensorboard) {
    tensorboard_ = std::make_unique<EventFileWriter>(options_.dump_folder / options_.save_tb_folder);
  }
}

std::filesystem::path MetricsLogger::tensorboard_path() const {
  return tensorboard_ ? tensorboard_->path() : std::filesystem::path();
}

bool MetricsLogger::should_log(int64_t step) const {
  return step == 1 || step % options_.log_freq == 0 || step == options_.total_steps;
}

std::optional<LoggedMetrics> MetricsLogger::record(const StepMetrics& m) {
  TITAN_CHECK(m.step > last_step_ && m.step <= options_.total_steps, "MetricsLogger: step ", m.step,
              " after step ", last_step_,
              ": expected increasing steps in [1, total_steps=", options_.total_steps, "]");
  TITAN_CHECK(m.step_seconds > 0 && m.tokens >= 0 && m.flops_per_token >= 0, "MetricsLogger: step ", m.step,
              " has step_seconds=", m.step_seconds, ", tokens=", m.tokens,
              ", flops_per_token=", m.flops_per_token, "; expected a positive time and non-negative counts");
  // The logger's state changes only once nothing more can throw, so a rejected step can be retried.
  Window w = window_;
  w.steps += 1;
  w.tokens += m.tokens;
  w.seconds += m.step_seconds;
  w.flops += static_cast<double>(m.tokens) * m.flops_per_token;
  if (!should_log(m.step)) {
    window_ = w;
    last_step_ = m.step;
    return std::nullopt;
  }

  LoggedMetrics out;
  out.step = m.step;
  out.loss = m.loss;
  out.grad_norm = m.grad_norm;
  out.lr = m.lr;
  out.tokens_per_second = static_cast<double>(w.tokens) / w.seconds;
  double flops_per_second = w.flops / w.seconds;
  out.tflops = flops_per_second / 1e12;
  out.mfu_percent = 100.0 * flops_per_second / options_.peak_flops;
  const std::optional<int64_t> device_peak =
      options_.device_peak_bytes ? options_.device_peak_bytes() : std::optional<int64_t>();
  out.peak_memory_bytes = device_peak ? *device_peak : CpuAllocator::instance().stats().peak_allocated_bytes;
  out.mean_step_seconds = w.seconds / static_cast<double>(w.steps);
  out.eta_seconds = out.mean_step_seconds * static_cast<double>(options_.total_steps - m.step);
  out.extra = m.extra;
  std::string line = format_metrics_line(out, options_.total_steps, options_.color);
  if (!options_.mode.empty()) line += "  " + options_.mode;
  std::string json = format_metrics_json(out, unix_seconds());
  Scalars scalars = tensorboard_scalars(out);
  window_ = Window{};
  last_step_ = m.step;

  console_ << line << std::endl;
  write_jsonl(json);
  if (tensorboard_) tensorboard_->add_scalars(out.step, scalars);
  return out;
}

void MetricsLogger::record_validation(const ValidationMetrics& v) {
  console_ << format_validation_line(v) << std::endl;
  write_jsonl(format_validation_json(v, unix_seconds()));
  if (tensorboard_)
    tensorboard_->add_scalars(v.step, v.per_token ? Scalars{{"validation/loss", v.loss},
                                                            {"validation/perplexity", v.perplexity()}}
                                                  : Scalars{{"validation/loss", v.loss}});
}

void MetricsLogger::write_jsonl(const std::string& record) {
  if (!jsonl_.is_open()) return;
  jsonl_ << record << '\n';
  jsonl_.flush();
  TITAN_CHECK(jsonl_.good(), "writing '", jsonl_path_.string(), "' failed (disk full or removed?)");
}

}  // namespace titan::train
