#pragma once
// Running a user's command (`/bin/sh -c COMMAND`) on some input text, with a deadline: what a
// reward program needs. The command may misbehave in any way (never read its input, write
// without end, never exit, exit early); none of them blocks or kills the caller. Its stdin,
// stdout and stderr are polled together, so neither side waits on a full pipe, and SIGPIPE is
// held back while its stdin is written.
#include <cstddef>
#include <string>
#include <string_view>

namespace titan::rl {

struct ShellLimits {
  double timeout_seconds = 30;        // from the start to the exit; then its process group is killed
  size_t max_output_bytes = 1 << 20;  // stdout beyond this kills it too
};

struct ShellRun {
  // How it ended: exited (exit_status), killed by a signal (signal), or stopped by titan at a
  // limit (timed_out, output_overflow; then it was killed with its whole process group).
  int exit_status = -1;
  int signal = 0;
  bool timed_out = false;
  bool output_overflow = false;
  std::string out;       // its stdout (up to the limit)
  std::string err_tail;  // the end of its stderr (the last few KiB)
};

// Runs `command` through /bin/sh -c in a process group of its own, writing `input` to its stdin
// (then closing it) while reading its stdout and stderr, and reaps it: no child is left behind,
// on any path. Throws only when the process cannot be started at all (no pipes, no /bin/sh).
ShellRun run_shell(const std::string& command, std::string_view input, const ShellLimits& limits);

// The last `lines` lines of `text` (without trailing blank lines), each indented: a stderr tail as
// an error message quotes it.
std::string last_lines(std::string_view text, int lines);

}  // namespace titan::rl
