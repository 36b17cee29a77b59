#include "titan/apps/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace titan::apps {

ProgressLine::ProgressLine() : tty_(::isatty(2) != 0) {}

ProgressLine::~ProgressLine() {
  if (open_) std::fputc('\n', stderr);
}

void ProgressLine::update(int64_t done, int64_t total, const std::string& figures, bool last) {
  const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(std::max<int64_t>(total, 1)));
  const int tenth = static_cast<int>(fraction * 10);
  if (!tty_ && tenth <= printed_tenth_) return;
  printed_tenth_ = tenth;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  std::fprintf(stderr, "%s[%.*s%*s] %3.0f%%  %s%s", tty_ ? "\r" : "", filled, "##############################",
               kWidth - filled, "", 100 * fraction, figures.c_str(), tty_ && !last ? "" : "\n");
  std::fflush(stderr);
  open_ = tty_ && !last;
}

double ProgressLine::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace titan::apps
