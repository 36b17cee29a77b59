// GRPO's rewards: the built-in verifiable ones (exact, numeric, regex) and a user's program, with
// every way the program can misbehave.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/test_util.h"
#include "titan/core/error.h"
#include "titan/rl/reward.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using rl::RewardInput;
using rl::RewardOptions;

std::vector<double> score(const RewardOptions& opts, const std::vector<RewardInput>& inputs) {
  return rl::make_reward(opts)->score(inputs);
}

RewardOptions with_kind(const std::string& kind) {
  RewardOptions o;
  o.kind = kind;
  return o;
}

RewardOptions program(const std::string& command, double timeout_seconds = 30) {
  RewardOptions o = with_kind("program");
  o.command = command;
  o.timeout_seconds = timeout_seconds;
  return o;
}

// n inputs whose completions are `bytes` long.
std::vector<RewardInput> batch(size_t n, size_t bytes) {
  return std::vector<RewardInput>(n, RewardInput{"1+1=", std::string(bytes, 'x'), "2"});
}

TEST(RewardExact, TheTextAfterTheLastMarkerToTheEndOfItsLine) {
  RewardOptions o;
  o.marker = "####";
  EXPECT_EQ(score(o, {{"p", "#### 12\nthinking more\n####  13  \nbye", "13"},
                      {"p", "#### 12\nthinking more\n####  13  \nbye", "12"},
                      {"p", "no marker here: 13", "13"},
                      {"p", "####\n\n  13\n14", " 13\n"},
                      {"p", "#### 13.0", "13"}}),
            (std::vector<double>{1, 0, 0, 1, 0}));
}

TEST(RewardExact, WithoutAMarkerTheCompletionsFirstLine) {
  EXPECT_EQ(score(RewardOptions{}, {{"123+456=", "579", "579"},
                                    {"123+456=", "  579 \n123+1=124", "579"},
                                    {"123+456=", "5790", "579"},
                                    {"123+456=", "", "579"}}),
            (std::vector<double>{1, 1, 0, 0}));
}

TEST(RewardFinalAnswer, MarkerAbsentIsNoAnswerAndBlankAfterItIsEmpty) {
  EXPECT_EQ(rl::final_answer("the answer is 4", "Answer:"), std::nullopt);
  EXPECT_EQ(rl::final_answer("Answer: 3 Answer: 4\nAnswer", "Answer:"), "4");
  EXPECT_EQ(rl::final_answer("Answer:  \n \n", "Answer:"), "");
  EXPECT_EQ(rl::final_answer("\t x y \r\nz", ""), "x y");
}

TEST(RewardNumeric, ParsesSignsDecimalsAndThousandsSeparators) {
  EXPECT_EQ(rl::parse_number("1,234.5"), 1234.5);
  EXPECT_EQ(rl::parse_number("1,234,567"), 1234567);
  EXPECT_EQ(rl::parse_number("-12"), -12);
  EXPECT_EQ(rl::parse_number("+3"), 3);
  EXPECT_EQ(rl::parse_number(".5"), 0.5);
  EXPECT_EQ(rl::parse_number("-0.25"), -0.25);
  EXPECT_EQ(rl::parse_number("7."), 7);
  for (const char* bad :
       {"", "-", ".", ",", "1,23", "1234,567", ",123", "12a", "1 2", "1e3", "inf", "nan", "--1"})
    EXPECT_EQ(rl::parse_number(bad), std::nullopt) << bad;
}

TEST(RewardNumeric, CommasNegativesAndTheMarker) {
  RewardOptions o = with_kind("numeric");
  o.marker = "Answer:";
  EXPECT_EQ(score(o, {{"p", "Answer: 1,000", "1000"},
                      {"p", "Answer: 999\nAnswer: -5.0\n", "-5"},
                      {"p", "Answer: 5", "-5"},
                      {"p", "Answer: five", "5"},
                      {"p", "5", "5"}}),
            (std::vector<double>{1, 1, 0, 0, 0}));
}

TEST(RewardNumeric, AbsoluteAndRelativeTolerance) {
  RewardOptions absolute = with_kind("numeric");
  absolute.tolerance = 0.1;
  // The bounds are inclusive as written, though 3 - 2.9 > 0.1 in binary.
  EXPECT_EQ(score(absolute, {{"p", "3.05", "3"},
                             {"p", "2.9", "3"},
                             {"p", "3.1", "3"},
                             {"p", "3.2", "3"},
                             {"p", "2.8999", "3"}}),
            (std::vector<double>{1, 1, 1, 0, 0}));
  EXPECT_EQ(score(with_kind("numeric"), {{"p", "1000.000000001", "1000"}, {"p", "1,000.0", "1000"}}),
            (std::vector<double>{0, 1}));
  RewardOptions relative = absolute;
  relative.tolerance = 0.01;
  relative.relative = true;
  EXPECT_EQ(score(relative, {{"p", "1,009", "1000"},
                             {"p", "1011", "1000"},
                             {"p", "-990", "-1000"},
                             {"p", "0.5", "0"},
                             {"p", "0", "0"}}),
            (std::vector<double>{1, 0, 1, 0, 1}));
}

TEST(RewardNumeric, AReferenceThatIsNotANumberIsTheDataFault) {
  EXPECT_TITAN_ERROR(score(with_kind("numeric"), {{"2+2=", "4", "four"}}), "numeric", "\"four\"", "2+2=");
}

TEST(RewardRegex, WithAGroupTheLastMatchsGroupIsTheAnswer) {
  RewardOptions o = with_kind("regex");
  o.pattern = R"(answer is (\d+))";
  EXPECT_EQ(score(o, {{"p", "answer is 3, no: answer is 4.", "4"},
                      {"p", "answer is 3, no: answer is 4.", "3"},
                      {"p", "the answer: 4", "4"}}),
            (std::vector<double>{1, 0, 0}));
}

TEST(RewardRegex, WithoutAGroupAMatchAnywhere) {
  RewardOptions o = with_kind("regex");
  o.pattern = R"(\bdone\b)";
  EXPECT_EQ(score(o, {{"p", "all\ndone here", "ignored"}, {"p", "undone", ""}}), (std::vector<double>{1, 0}));
}

TEST(RewardOptions, BadOptionsAreRefusedByTheirKeys) {
  EXPECT_TITAN_ERROR(rl::make_reward(with_kind("fuzzy")), "grpo.reward_kind", "fuzzy");
  RewardOptions regex = with_kind("regex");
  EXPECT_TITAN_ERROR(rl::make_reward(regex), "grpo.reward_pattern");
  regex.pattern = "(\\d+";
  EXPECT_TITAN_ERROR(rl::make_reward(regex), "grpo.reward_pattern", "(\\d+");
  RewardOptions numeric = with_kind("numeric");
  numeric.tolerance = -0.5;
  EXPECT_TITAN_ERROR(rl::make_reward(numeric), "grpo.reward_tolerance");
  numeric.tolerance = std::nan("");
  EXPECT_TITAN_ERROR(rl::make_reward(numeric), "grpo.reward_tolerance");
  EXPECT_TITAN_ERROR(rl::make_reward(program("  ")), "grpo.reward_command");
  EXPECT_TITAN_ERROR(rl::make_reward(program("cat", 0)), "grpo.reward_timeout_seconds");
  EXPECT_TITAN_ERROR(rl::make_reward(program("cat", INFINITY)), "grpo.reward_timeout_seconds");
}

TEST(RewardOptions, AnOptionTheKindDoesNotReadIsRefused) {
  RewardOptions exact;
  exact.pattern = "x";
  EXPECT_TITAN_ERROR(rl::make_reward(exact), "grpo.reward_pattern", "\"exact\"", "\"regex\"");
  RewardOptions regex = with_kind("regex");
  regex.pattern = "x";
  regex.marker = "####";
  EXPECT_TITAN_ERROR(rl::make_reward(regex), "grpo.reward_marker", "\"regex\"");
  RewardOptions prog = program("cat");
  prog.tolerance = 1;
  EXPECT_TITAN_ERROR(rl::make_reward(prog), "grpo.reward_tolerance", "\"numeric\"");
  RewardOptions numeric = with_kind("numeric");
  numeric.timeout_seconds = 5;
  EXPECT_TITAN_ERROR(rl::make_reward(numeric), "grpo.reward_timeout_seconds", "\"program\"");
}

TEST(RewardProgram, ScoresALinePerInputInOrder) {
  EXPECT_EQ(score(program("awk '{print NR / 10}'"), batch(4, 3)), (std::vector<double>{0.1, 0.2, 0.3, 0.4}));
  EXPECT_EQ(score(program("exit 1"), {}), std::vector<double>{});  // nothing to score: not run
}

TEST(RewardProgram, ReadsEachInputAsJsonWithEveryCharacterIntact) {
  // The program scores 1 when it read the completion and the answer equal, and the completion's
  // length in code points otherwise: quotes, backslashes, newlines and non-ASCII must survive the
  // JSON line, and a byte that is no UTF-8 arrives as U+FFFD.
  const std::string tricky = "say \"hi\"\\n\n\ttab \xc3\xa9 \x01";
  const std::string command =
      "python3 -c 'import sys, json\n"
      "for line in sys.stdin:\n"
      "    d = json.loads(line)\n"
      "    print(1 if d[\"completion\"] == d[\"answer\"] and d[\"prompt\"] == \"q\" else "
      "len(d[\"completion\"]) + 10)'";
  EXPECT_EQ(score(program(command), {{"q", tricky, tricky}, {"q", "ab\xff", "x"}, {"q", "same", "same"}}),
            (std::vector<double>{1, 13, 1}));
}

TEST(RewardProgram, ANonZeroExitIsAnErrorQuotingItsStderr) {
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; echo 'reward: bad config' >&2; exit 3"), batch(2, 4)),
                     "grpo.reward_command", "exited with status 3", "reward: bad config");
}

TEST(RewardProgram, ACommandNotFoundSaysSo) {
  EXPECT_TITAN_ERROR(score(program("titan_no_such_reward_program --x"), batch(1, 4)),
                     "titan_no_such_reward_program", "not found", "127");
}

TEST(RewardProgram, TooFewOrTooManyLinesAreAnError) {
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; echo 1"), batch(3, 4)), "wrote 1 lines for 3 inputs",
                     "one number per line");
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; printf '1\\n1\\n1\\n'"), batch(2, 4)),
                     "wrote 3 lines for 2 inputs");
}

TEST(RewardProgram, ALineThatIsNotAFiniteNumberIsAnError) {
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; echo 1; echo abc"), batch(2, 4)), "line 2", "\"abc\"",
                     "finite number");
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; echo nan"), batch(1, 4)), "\"nan\"", "finite number");
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; echo; echo 1"), batch(2, 4)), "line 1", "finite number");
}

TEST(RewardProgram, KilledBySignalIsAnError) {
  EXPECT_TITAN_ERROR(score(program("kill -9 $$"), batch(1, 4)), "killed by signal 9");
}

// /proc's state letter of `pid`: 'R', 'S', ..., 'Z' for a zombie, 0 when there is no such process.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t paren = line.rfind(')');
  return paren + 2 < line.size() ? line[paren + 2] : 0;
}

TEST(RewardProgram, PastTheTimeoutItsWholeGroupIsKilledAndReaped) {
  const fs::path dir = test::fresh_temp_dir("reward_timeout");
  const std::string pids = (dir / "pids").string();
  // The shell starts a sleep in the background and waits: both must go.
  const std::string command = "sleep 30 & echo $$ $! > '" + pids + "'; wait";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TITAN_ERROR(score(program(command, 0.5), batch(2, 4)),
                     "ran longer than grpo.reward_timeout_seconds = 0.5", "killed");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 3.0);
  std::ifstream in(pids);
  pid_t shell = 0, sleeper = 0;
  ASSERT_TRUE(in >> shell >> sleeper) << "the command did not write its pids";
  // The shell was our child and is reaped: no such child any more.
  EXPECT_EQ(::waitpid(shell, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // The sleep, the shell's child, was killed with the group (init reaps it; a zombie until then).
  char state = process_state(sleeper);
  for (int i = 0; i < 100 && state != 0 && state != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state = process_state(sleeper);
  }
  EXPECT_TRUE(state == 0 || state == 'Z')
      << "the background sleep " << sleeper << " is still running: " << state;
}

TEST(RewardProgram, AProgramThatNeverReadsItsStdinDoesNotDeadlockOrRaiseSigpipe) {
  // 4 MB of input, far more than a pipe holds; the program writes its scores without reading a
  // byte and exits, so titan's writes fail with EPIPE.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(
      score(program("awk 'BEGIN { for (i = 0; i < 2000; i++) print 1 }' < /dev/null", 20), batch(2000, 2000)),
      std::vector<double>(2000, 1.0));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  // The SIGPIPE those writes raised is neither pending nor left blocked.
  sigset_t pending, mask;
  sigpending(&pending);
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));
  EXPECT_FALSE(sigismember(&mask, SIGPIPE));
}

TEST(RewardProgram, MuchStderrBeforeReadingDoesNotDeadlock) {
  // 2 MB on stderr before it reads its stdin: titan must drain stderr while it writes.
  EXPECT_EQ(
      score(program("head -c 2000000 /dev/zero | tr '\\0' x >&2; awk '{ print 0.5 }'", 20), batch(500, 2000)),
      std::vector<double>(500, 0.5));
}

TEST(RewardProgram, OutputWithoutEndIsStopped) {
  // A few KiB a score is plenty; the limit stops it well before the timeout.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TITAN_ERROR(score(program("yes 1", 20), batch(3, 4)), "wrote more than 4864 bytes", "3 inputs");
  EXPECT_TITAN_ERROR(score(program("cat /dev/zero", 20), batch(3, 4)), "wrote more than 4864 bytes");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

TEST(RewardProgram, AnExitStatusLostToAnIgnoredSigchldIsAnErrorNotAScore) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, &old);
  EXPECT_TITAN_ERROR(score(program("cat > /dev/null; exit 3"), batch(1, 4)), "SIGCHLD");
  sigaction(SIGCHLD, &old, nullptr);
}

TEST(RewardProgram, DescribeNamesTheCommand) {
  EXPECT_NE(rl::make_reward(program("python3 score.py"))->describe().find("python3 score.py"),
            std::string::npos);
  RewardOptions o;
  o.marker = "####";
  EXPECT_NE(rl::make_reward(o)->describe().find("####"), std::string::npos);
}

}  // namespace
}  // namespace titan
