#include "titan/rl/reward_program.h"

#include <string.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "titan/core/error.h"
#include "titan/rl/shell_command.h"

namespace titan::rl {

namespace {

// A score's line, with room to spare: more output than this per input is a program gone wrong.
constexpr size_t kOutputBytesPerInput = 256;
constexpr int kStderrLines = 10;

// The lines of `out`; a last line without its newline counts too.
std::vector<std::string_view> lines_of(std::string_view out) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < out.size();) {
    const size_t nl = std::min(out.find('\n', pos), out.size());
    lines.push_back(out.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

std::optional<double> finite_number(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return std::nullopt;
  line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
  if (line.front() == '+') line.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
  if (ec != std::errc() || end != line.data() + line.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

class ProgramReward : public Reward {
 public:
  ProgramReward(std::string command, double timeout_seconds)
      : command_(std::move(command)), timeout_seconds_(timeout_seconds) {}

  std::vector<double> score(std::span<const RewardInput> inputs) override {
    if (inputs.empty()) return {};
    std::string input;
    for (const RewardInput& in : inputs) {
      const nlohmann::json line = {
          {"prompt", in.prompt}, {"completion", in.completion}, {"answer", in.answer}};
      // A sampled completion may cut a UTF-8 character in two: such bytes become U+FFFD, as a
      // tokenizer's decode shows them, instead of failing the step.
      input += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      input += '\n';
    }
    const size_t n = inputs.size();
    const ShellRun run = run_shell(command_, input, {timeout_seconds_, 4096 + kOutputBytesPerInput * n});
    TITAN_CHECK(!run.timed_out, what(), " ran longer than grpo.reward_timeout_seconds = ", timeout_seconds_,
                " on ", n,
                " inputs and was killed; it must read one JSON line per input, write one number per "
                "line and exit (raise grpo.reward_timeout_seconds if it is just slow)",
                stderr_tail(run));
    TITAN_CHECK(!run.output_overflow, what(), " wrote more than ", run.out.size(), " bytes for ", n,
                " inputs and was killed; expected one number per line", stderr_tail(run));
    TITAN_CHECK(run.signal == 0, what(), " was killed by signal ", run.signal, " (", ::strsignal(run.signal),
                "); expected it to exit with status 0", stderr_tail(run));
    TITAN_CHECK(run.exit_status != 127, what(),
                " was not found: /bin/sh exited with status 127; give a command "
                "on the PATH or its full path",
                stderr_tail(run));
    TITAN_CHECK(run.exit_status == 0, what(), " exited with status ", run.exit_status,
                "; expected status 0 after one number per input line", stderr_tail(run));
    const std::vector<std::string_view> lines = lines_of(run.out);
    TITAN_CHECK(lines.size() == n, what(), " wrote ", lines.size(), " lines for ", n,
                " inputs; expected one number per line, one line per JSON line of its stdin",
                stderr_tail(run));
    std::vector<double> scores;
    scores.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const std::optional<double> s = finite_number(lines[i]);
      TITAN_CHECK(s, what(), ": line ", i + 1, " of its output is \"", lines[i].substr(0, 200),
                  "\"; expected a finite number (the score of input ", i + 1, ")");
      scores.push_back(*s);
    }
    return scores;
  }

  std::string describe() const override {
    std::ostringstream s;
    s << "program: /bin/sh -c \"" << command_ << "\" (timeout " << timeout_seconds_ << " s)";
    return s.str();
  }

 private:
  std::string what() const { return "reward program grpo.reward_command = \"" + command_ + "\""; }

  static std::string stderr_tail(const ShellRun& run) {
    const std::string tail = last_lines(run.err_tail, kStderrLines);
    return tail.empty() ? std::string(" (its stderr is empty)") : ". Its stderr ended with:\n" + tail;
  }

  std::string command_;
  double timeout_seconds_;
};

}  // namespace

std::unique_ptr<Reward> make_program_reward(const std::string& command, double timeout_seconds) {
  TITAN_CHECK(
      command.find_first_not_of(" \t\r\n") != std::string::npos,
      "grpo.reward_kind = \"program\" needs grpo.reward_command: a shell command that reads one JSON line "
      "per completion ({\"prompt\", \"completion\", \"answer\"}) and writes one score per line");
  TITAN_CHECK(std::isfinite(timeout_seconds) && timeout_seconds > 0,
              "grpo.reward_timeout_seconds = ", timeout_seconds,
              " must be a finite number of seconds > 0 (the longest one batch's scoring may take)");
  return std::make_unique<ProgramReward>(command, timeout_seconds);
}

}  // namespace titan::rl
