// scripts/make_task_data.py, the worked example's data for SFT and GRPO (rewarded by rl/reward.h):
// every answer right, no problem in two files, the same bytes from the same seed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <tuple>

#include "support/test_util.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The script's exit status, its output in `dir`/log.
int make_task_data(const fs::path& dir, const std::string& args) {
  const std::string cmd = "python3 '" + std::string(TITAN_SOURCE_DIR) + "/scripts/make_task_data.py' " +
                          args + " --out '" + dir.string() + "' > '" + (dir.string() + ".log") + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<json> rows(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// Each file's rows have exactly the keys {prompt, `field`}; `check` sees each (prompt, answer);
// no prompt appears twice in all three files.
void expect_disjoint_files(const fs::path& dir, size_t sft, size_t prompts, size_t eval,
                           const std::function<void(const std::string&, const std::string&)>& check) {
  std::set<std::string> seen;
  for (const auto& [name, field, count] :
       {std::tuple{"sft.jsonl", "completion", sft}, std::tuple{"prompts.jsonl", "answer", prompts},
        std::tuple{"eval.jsonl", "answer", eval}}) {
    const std::vector<json> got = rows(dir / name);
    EXPECT_EQ(got.size(), count) << name;
    for (const json& row : got) {
      ASSERT_EQ(row.size(), 2u) << name << ": " << row.dump();
      const std::string prompt = row.at("prompt"), answer = row.at(field);
      check(prompt, answer);
      EXPECT_TRUE(seen.insert(prompt).second) << prompt << " appears twice (again in " << name << ")";
    }
  }
}

TEST(RewardTaskData, AdditionAnswersAreTheSumsAndTheFilesAreDisjoint) {
  const fs::path dir = test::fresh_temp_dir("task_data_addition");
  ASSERT_EQ(
      make_task_data(dir / "a", "--task addition --digits 2 --seed 7 --sft 300 --prompts 100 --eval 50"), 0)
      << test::slurp(dir / "a.log");
  const std::regex problem(R"((\d{1,2})\+(\d{1,2})=)");
  expect_disjoint_files(dir / "a", 300, 100, 50, [&](const std::string& prompt, const std::string& answer) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(prompt, m, problem)) << prompt;
    EXPECT_EQ(answer, std::to_string(std::stoi(m[1]) + std::stoi(m[2]))) << prompt;
  });
}

TEST(RewardTaskData, SortAnswersAreTheSortedLetters) {
  const fs::path dir = test::fresh_temp_dir("task_data_sort");
  ASSERT_EQ(make_task_data(dir / "s", "--task sort --letters 4 --sft 40 --prompts 20 --eval 10"), 0)
      << test::slurp(dir / "s.log");
  const std::regex problem(R"(sort ([a-z]{4})=)");
  expect_disjoint_files(dir / "s", 40, 20, 10, [&](const std::string& prompt, const std::string& answer) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(prompt, m, problem)) << prompt;
    std::string sorted = m[1];
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(answer, sorted) << prompt;
  });
}

TEST(RewardTaskData, TheSeedFixesTheBytes) {
  const fs::path dir = test::fresh_temp_dir("task_data_seed");
  for (const char* run : {"a", "b", "c"})
    ASSERT_EQ(
        make_task_data(dir / run, std::string("--task addition --digits 3 --sft 200 --prompts 50 --eval 20") +
                                      (run[0] == 'c' ? " --seed 2" : " --seed 1")),
        0)
        << test::slurp(dir / (std::string(run) + ".log"));
  for (const char* name : {"sft.jsonl", "prompts.jsonl", "eval.jsonl"}) {
    EXPECT_EQ(test::slurp(dir / "a" / name), test::slurp(dir / "b" / name)) << name;
    EXPECT_NE(test::slurp(dir / "a" / name), test::slurp(dir / "c" / name)) << name;
  }
}

TEST(RewardTaskData, EveryProblemOnceAndNoMore) {
  // 1-digit addition has 100 problems: all of them fit, one more does not.
  const fs::path dir = test::fresh_temp_dir("task_data_all");
  ASSERT_EQ(make_task_data(dir / "all", "--task addition --digits 1 --sft 80 --prompts 15 --eval 5"), 0)
      << test::slurp(dir / "all.log");
  expect_disjoint_files(dir / "all", 80, 15, 5, [](const std::string&, const std::string&) {});
  EXPECT_EQ(make_task_data(dir / "more", "--task addition --digits 1 --sft 80 --prompts 15 --eval 6"), 2);
  EXPECT_NE(test::slurp(dir / "more.log").find("101 problems asked for"), std::string::npos)
      << test::slurp(dir / "more.log");
  EXPECT_FALSE(fs::exists(dir / "more"));
}

}  // namespace
}  // namespace titan
