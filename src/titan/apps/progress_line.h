#pragma once
// A long command's progress on stderr: one line redrawn in place on a terminal; elsewhere (a log
// file) a line every tenth of the way, so that logs stay short.
#include <chrono>
#include <cstdint>
#include <string>

namespace titan::apps {

class ProgressLine {
 public:
  ProgressLine();
  // An error thrown mid-way is printed next (by main): on a line of its own, not the bar's.
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` of `total`: the bar, the percentage, then `figures`. `last` ends the line.
  void update(int64_t done, int64_t total, const std::string& figures, bool last = false);
  // Since construction.
  double seconds() const;

 private:
  bool tty_;
  bool open_ = false;  // the bar was drawn without its newline
  int printed_tenth_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace titan::apps
