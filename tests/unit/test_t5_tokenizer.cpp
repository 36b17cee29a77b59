// T5's tokenizer (SentencePiece Unigram with its Precompiled charsmap, Metaspace, "$A </s>")
// against Hugging Face tokenizers and transformers on 1,200 texts per file
// (tests/tokenizer/make_flux_fixtures.py), and clear refusals of malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/hf_tokenizer.h"
#include "titan/data/tokenizer.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using data::BpeTokenizer;
using Ids = std::vector<int32_t>;

class T5TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("titan_t5_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The t5 fixture with `edit` applied, loaded; the error's text when it is refused.
  std::string refusal(const std::function<void(nlohmann::ordered_json&)>& edit) {
    std::ifstream file(test::flux_tokenizer_fixture("t5") / "tokenizer.json");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(file);
    edit(j);
    std::ofstream(dir_ / "tokenizer.json") << j.dump();
    try {
      BpeTokenizer::load(dir_);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(T5TokenizerTest, MatchesHuggingFaceAsTransformers5WritesIt) {
  const fs::path folder = test::flux_tokenizer_fixture("t5");
  BpeTokenizer tok = BpeTokenizer::load(folder);
  EXPECT_EQ(tok.vocab_size(), 1600);
  EXPECT_EQ(tok.pad_id(), 0);
  test::expect_reference_parity(tok, folder);
  // The fixed-length form through the Tokenizer interface, as the text encoder takes it.
  auto loaded = data::load_tokenizer(folder.string());
  Ids ids = loaded->encode_for_model("a photo of a cat", 256);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(Ids(ids.begin(), ids.begin() + 8), tok.encode_for_model("a photo of a cat", 8));
}

TEST_F(T5TokenizerTest, MatchesHuggingFaceAsHubT5FilesSpellIt) {
  const fs::path folder = test::flux_tokenizer_fixture("t5_sequence");
  test::expect_reference_parity(BpeTokenizer::load(folder), folder);
}

TEST_F(T5TokenizerTest, DecodingGivesNormalizedTextBack) {
  BpeTokenizer tok = BpeTokenizer::load(test::flux_tokenizer_fixture("t5"));
  for (const std::string text : {"a photo of a cat", "In the beginning God created the heaven", "x 1 2 3"})
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  // NFKC: full-width letters come back as ASCII.
  EXPECT_EQ(tok.decode(tok.encode("\uff21\uff22")), "AB");
}

TEST_F(T5TokenizerTest, TooShortALengthIsRefused) {
  BpeTokenizer tok = BpeTokenizer::load(test::flux_tokenizer_fixture("t5"));
  EXPECT_EQ(tok.encode_for_model("a cat", 1), Ids{1});
  EXPECT_THROW(tok.encode_for_model("a cat", 0), std::exception);
}

TEST_F(T5TokenizerTest, MalformedFieldsAreClearErrors) {
  EXPECT_NE(refusal([](auto& j) { j["normalizer"]["precompiled_charsmap"] = "not*base64"; })
                .find("precompiled_charsmap"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["normalizer"]["precompiled_charsmap"] = "AAAA"; }).find("trie size"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["normalizer"] = {{"type", "NFKD"}}; }).find("normalizer"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["post_processor"] = {{"type", "Mystery"}}; }).find("post_processor"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["model"]["vocab"][5][1] = "high"; }).find("model.vocab[5][1]"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["model"]["vocab"][5] = "piece"; }).find("[text, score]"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["model"]["type"] = "WordPiece"; }).find("WordPiece"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["post_processor"]["single"][1]["SpecialToken"]["id"] = "<x>"; }).find("<x>"),
            std::string::npos);
}

}  // namespace
}  // namespace titan
