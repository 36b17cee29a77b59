// The data subcommands of the `titan` executable, run as a user runs them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support/paths.h"
#include "titan/data/dataset.h"
#include "titan/data/tokenizer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int status = -1;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("titan_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // `titan ARGS < stdin_text`, from the source tree (where data/ is).
  CliResult titan(const std::string& args, const std::string& stdin_text = "") const {
    const fs::path in = write("stdin.txt", stdin_text), out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = "cd " + std::string(TITAN_SOURCE_DIR) + " && " + TITAN_CLI + " " + args + " < " +
                            in.string() + " > " + out.string() + " 2> " + err.string();
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
  }

  fs::path dir_;
};

TEST_F(Cli, TokenizerEncodesAndDecodesLikeTheLibrary) {
  const std::string text = "In the beginning God created the heaven and the earth.\n";
  CliResult enc = titan("tokenizer encode --tokenizer data/kjv_tokenizer", text);
  ASSERT_EQ(enc.status, 0) << enc.err;
  auto tok = data::load_tokenizer("data/kjv_tokenizer");
  EXPECT_EQ(nlohmann::json::parse(enc.out).get<std::vector<int32_t>>(), tok->encode(text));

  CliResult dec = titan("tokenizer decode --tokenizer data/kjv_tokenizer", enc.out);
  ASSERT_EQ(dec.status, 0) << dec.err;
  EXPECT_EQ(dec.out, text);

  CliResult bad = titan("tokenizer encode --tokenizer " + (dir_ / "nowhere").string(), text);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("no tokenizer at"), std::string::npos) << bad.err;
}

TEST_F(Cli, TokenizeWritesShardsThatHoldTheCorpus) {
  const fs::path corpus = write("corpus.jsonl", "{\"text\": \"And God said, Let there be light.\"}\n"
                                                "{\"text\": \"and there was light.\"}\n");
  const fs::path shards = dir_ / "shards";
  CliResult r = titan("tokenize --tokenizer data/kjv_tokenizer --shard-tokens 8 --out " + shards.string() + " " +
                      corpus.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 documents"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("100%"), std::string::npos) << r.err;  // the progress line
  auto tok = data::load_tokenizer("data/kjv_tokenizer");
  data::Dataset from_text = data::load_dataset({.path = corpus.string()}, *tok);
  data::Dataset from_shards = data::load_dataset({.path = shards.string()}, *tok);
  ASSERT_EQ(from_shards.stream.size(), from_text.stream.size());
  EXPECT_GT(from_shards.stats.files, 1);
  std::vector<int32_t> a(static_cast<size_t>(from_text.stream.size())), b(a.size());
  from_text.stream.read(0, from_text.stream.size(), a.data());
  from_shards.stream.read(0, from_shards.stream.size(), b.data());
  EXPECT_EQ(a, b);
}

TEST_F(Cli, TokenizeReportsBadInputClearly) {
  CliResult no_out = titan("tokenize " + write("a.txt", "text").string());
  EXPECT_EQ(no_out.status, 1);
  EXPECT_NE(no_out.err.find("no --out given"), std::string::npos) << no_out.err;

  const fs::path bad = write("bad.jsonl", "{\"text\": \"fine\"}\nnot json\n");
  CliResult stop = titan("tokenize --out " + (dir_ / "s1").string() + " " + bad.string());
  EXPECT_EQ(stop.status, 1);
  EXPECT_NE(stop.err.find("line 2 is not a JSON object"), std::string::npos) << stop.err;

  CliResult skip = titan("tokenize --bad-data skip --out " + (dir_ / "s2").string() + " " + bad.string());
  EXPECT_EQ(skip.status, 0) << skip.err;
  EXPECT_NE(skip.out.find("1 skipped (1 not JSON objects)"), std::string::npos) << skip.out;
}

}  // namespace
}  // namespace titan
