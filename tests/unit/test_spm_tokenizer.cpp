// SentencePiece-style BPE tokenizer.json files (Llama 2, Mistral and Gemma conversions) against
// Hugging Face tokenizers: the same ids and the same decoded text on over a thousand texts per
// kind (tests/fixtures/tokenizers/, made by tests/tokenizer/make_spm_fixtures.py), on the settings
// those files leave untried, and clear refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/hf_tokenizer.h"
#include "support/test_util.h"
#include "titan/data/text_dataset.h"
#include "titan/data/tokenizer.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using data::BpeTokenizer;
using Ids = std::vector<int32_t>;

fs::path fixture(const std::string& name) {
  return fs::path(TITAN_SOURCE_DIR) / "tests" / "fixtures" / "tokenizers" / name;
}

std::string kjv() {
  return data::read_text_file(fs::path(TITAN_SOURCE_DIR) / "data" / "kjv.txt.gz");
}

// Texts where SentencePiece-style pipelines differ: spaces at the start, in runs and at the end,
// characters the vocabulary lacks (byte fallback), the replacement character itself, text that
// looks like a <0xNN> token, added tokens of both families, and long inputs.
std::vector<std::string> corpus() {
  const std::string bible = kjv();
  std::vector<std::string> texts = {
      "",
      " ",
      "   ",
      "\n",
      "Hello world",
      " Hello",
      "  leading two",
      "trailing  ",
      "a  b   c    d     e",
      "\t\ttabs\tand\nnewlines\n\n",
      "\r\n windows\r\n line\r\n",
      "In the beginning God created the heaven and the earth.",
      "1234567890 3.14159 1,000,000 -42 0x1F",
      "café résumé straße über ñandú garçon",
      "καλημέρα σου φίλε",
      "привет мир доброе утро",
      "中文日本語人大学 大学人",
      "مرحبا سلام عالم",
      "龘 is not in the vocab, ไทย neither, 한국어 neither",
      "emoji 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 😀😀",
      "decomposed e\u0301 a\u0308 o\u0302",
      "literal \u2581 and \u2581\u2581 metaspace \u2581start\u2581",
      "\u2581leading replacement",
      "<s>Hello</s> <s> </s><s>",
      "<unk> <pad> <bos><eos> <unk><unk>",
      "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
      "<0x41> <0xZZ> <0x <0x0A><0xe4>",
      "x_1 = f(2, 0.5)  # ok\n    return x",
      "NEL\u0085 NBSP\u00a0 ideographic\u3000 zwsp\u200b",
      std::string("nul\0inside", 10),
      std::string(3000, ' '),
      std::string(2000, 'a'),
      std::string(500, '\n') + "x",
      bible.substr(0, 100000),
  };
  std::istringstream lines(bible.substr(1000000, 40000));
  for (std::string line; std::getline(lines, line) && texts.size() < 300;) texts.push_back(line);
  return texts;
}

// Random mixes of the fragments above.
std::vector<std::string> fuzz_corpus(size_t n, uint32_t seed) {
  const std::vector<std::string> pieces = {"a",
                                           "the",
                                           "God",
                                           " ",
                                           "  ",
                                           "\t",
                                           "\n",
                                           "\r\n",
                                           "\u2581",
                                           "\u2581\u2581",
                                           "1",
                                           "23",
                                           "4567",
                                           "κα",
                                           "при",
                                           "中",
                                           "文",
                                           "龘",
                                           "ไทย",
                                           "👍",
                                           "👨‍👩‍👧",
                                           "é",
                                           "e\u0301",
                                           "ß",
                                           "<s>",
                                           "</s>",
                                           "<unk>",
                                           "<start_of_turn>",
                                           "<end_of_turn>",
                                           "<bos>",
                                           "<0x41>",
                                           "<0x",
                                           "<",
                                           ">",
                                           "_",
                                           "\u3000",
                                           "\u00a0",
                                           "!",
                                           "...",
                                           "'s",
                                           "x_",
                                           "ñan"};
  std::mt19937 gen(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    for (int k = std::uniform_int_distribution<int>(0, 24)(gen); k > 0; --k)
      s += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(gen)];
    out.push_back(std::move(s));
  }
  return out;
}

class SpmTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("titan_spm_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Ids and decodings equal to Hugging Face's on the corpus and 1000 random mixes.
  void expect_parity(const BpeTokenizer& tok, const fs::path& file, uint32_t seed, size_t mixes = 1000) {
    std::vector<std::string> texts = corpus();
    for (std::string& s : fuzz_corpus(mixes, seed)) texts.push_back(std::move(s));
    test::expect_hf_parity(tok, file, texts, dir_);
  }

  // The edited fixture `name` saved in dir_, loaded.
  BpeTokenizer edited(const std::string& name, const std::function<void(nlohmann::ordered_json&)>& edit) {
    std::ifstream file(fixture(name) / "tokenizer.json");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(file);
    edit(j);
    std::ofstream(dir_ / "tokenizer.json") << j.dump();
    return BpeTokenizer::load(dir_);
  }

  fs::path dir_;
};

// Decoding gives the text back exactly where Hugging Face's does: no added tokens, no "▁" in it.
void expect_round_trips(const BpeTokenizer& tok) {
  for (const std::string& text : corpus()) {
    if (text.find('<') != std::string::npos || text.find("\u2581") != std::string::npos) continue;
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << "'" << text.substr(0, 100) << "'";
  }
  // Bytes that are not UTF-8, which Hugging Face cannot take, go to their <0xNN> tokens and back.
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  for (const std::string& text :
       {all_bytes, std::string("ok\xff\xfe mid\xc3 cut\xe4\xbd"), std::string("\xed\xa0\x80 surrogate")})
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.encode("\xff").back(), *tok.token_id("<0xFF>"));
}

TEST_F(SpmTokenizerTest, Llama2StyleMatchesHuggingFace) {
  BpeTokenizer tok = BpeTokenizer::load(fixture("llama_legacy"));
  EXPECT_FALSE(tok.byte_level());
  EXPECT_EQ(tok.vocab_size(), 1500);
  expect_parity(tok, fixture("llama_legacy") / "tokenizer.json", 1);
  expect_round_trips(tok);
}

TEST_F(SpmTokenizerTest, MetaspaceLlamaMatchesHuggingFace) {
  BpeTokenizer tok = BpeTokenizer::load(fixture("llama_metaspace"));
  EXPECT_FALSE(tok.byte_level());
  expect_parity(tok, fixture("llama_metaspace") / "tokenizer.json", 2);
  // prepend_scheme "first": a "▁" in front of the text, none after an added token.
  EXPECT_EQ(tok.encode("God"), Ids{*tok.token_id("\u2581God")});
  EXPECT_NE(tok.encode("<s>God")[1], *tok.token_id("\u2581God"));
}

TEST_F(SpmTokenizerTest, GemmaStyleMatchesHuggingFace) {
  BpeTokenizer tok = BpeTokenizer::load(fixture("gemma"));
  EXPECT_FALSE(tok.byte_level());
  EXPECT_EQ(tok.vocab_size(), 1200);
  expect_parity(tok, fixture("gemma") / "tokenizer.json", 3);
  expect_round_trips(tok);
}

TEST_F(SpmTokenizerTest, SpecialTokensComeFromTheConfig) {
  BpeTokenizer llama = BpeTokenizer::load(fixture("llama_legacy"));
  EXPECT_EQ(llama.bos_id(), 1);
  EXPECT_EQ(llama.eos_id(), 2);
  Ids plain = llama.encode("Hello world");
  Ids with = llama.encode("Hello world", /*add_special=*/true);
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(Ids(with.begin() + 1, with.end()), plain);
  // As Hugging Face: the Strip decoder takes the space off the start of the whole text only.
  EXPECT_EQ(llama.decode(with), "<s> Hello world");
  EXPECT_EQ(llama.decode(with, /*skip_special=*/true), "Hello world");

  BpeTokenizer gemma = BpeTokenizer::load(fixture("gemma"));
  EXPECT_EQ(gemma.bos_id(), 2);
  EXPECT_EQ(gemma.eos_id(), 1);
  Ids turn = gemma.encode("<start_of_turn>user\nHi<end_of_turn>");
  EXPECT_EQ(turn.front(), *gemma.token_id("<start_of_turn>"));
  EXPECT_EQ(gemma.decode(turn, /*skip_special=*/true), "user\nHi");
}

// What model.tokenizer_path reaches: the loader tells the kind from the file.
TEST_F(SpmTokenizerTest, LoaderReadsSentencePieceStyleFiles) {
  for (const char* name : {"llama_legacy", "llama_metaspace", "gemma"}) {
    auto tok = data::load_tokenizer("tests/fixtures/tokenizers/" + std::string(name));
    BpeTokenizer direct = BpeTokenizer::load(fixture(name));
    EXPECT_NE(tok->description().find("SentencePiece-style"), std::string::npos) << tok->description();
    EXPECT_EQ(tok->vocab_size(), direct.vocab_size());
    EXPECT_EQ(tok->bos_id(), direct.bos_id());
    const std::string text = "In the beginning 👍 God";
    EXPECT_EQ(tok->encode(text), direct.encode(text));
    EXPECT_EQ(tok->decode(tok->encode(text)), direct.decode(direct.encode(text)));
  }
  EXPECT_NE(data::load_tokenizer("data/kjv_tokenizer")->description().find("byte-level"), std::string::npos);
}

// Settings the fixtures leave untried, on them edited: older files' string merges, no byte
// fallback (unk, fused or not, or dropped) or a partial one, the Metaspace pre-tokenizer and
// decoder of older conversions, merges ignored, added tokens matched after the normalizer, Splits
// that keep their matches with a neighbour, and Strips on unfused tokens (each from one end, the
// end first: Hugging Face panics when cuts from both ends of a token overlap or reach an empty one).
TEST_F(SpmTokenizerTest, OtherConfigurationsMatchHuggingFace) {
  const nlohmann::ordered_json llama_decoder = [] {
    std::ifstream file(fixture("llama_legacy") / "tokenizer.json");
    return nlohmann::ordered_json::parse(file)["decoder"];
  }();
  auto metaspace = [](const char* scheme, bool split) {
    return nlohmann::ordered_json{
        {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
  };
  auto split = [](const char* kind, const char* pattern, const char* behavior) {
    return nlohmann::ordered_json{
        {"type", "Split"}, {"pattern", {{kind, pattern}}}, {"behavior", behavior}, {"invert", false}};
  };
  std::vector<std::pair<std::string, std::function<void(nlohmann::ordered_json&)>>> edits = {
      {"string merges",
       [](auto& j) {
         for (auto& m : j["model"]["merges"])
           m = m[0].template get<std::string>() + " " + m[1].template get<std::string>();
       }},
      {"unk, fused", [](auto& j) { j["model"]["byte_fallback"] = false; }},
      {"unk, not fused",
       [](auto& j) {
         j["model"]["byte_fallback"] = false;
         j["model"]["fuse_unk"] = false;
       }},
      {"no unk",
       [](auto& j) {
         j["model"]["byte_fallback"] = false;
         j["model"]["unk_token"] = nullptr;
       }},
      {"Metaspace always, split",
       [&](auto& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = metaspace("always", true);
         j["decoder"] = metaspace("always", true);
       }},
      {"Metaspace never",
       [&](auto& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = metaspace("never", false);
         j["decoder"] = {{"type", "Sequence"},
                         {"decoders", {{{"type", "ByteFallback"}}, metaspace("never", false)}}};
       }},
      {"Metaspace first, split",
       [&](auto& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = metaspace("first", true);
       }},
      {"byte fallback lacking <0x9F>: emoji to unk, after the bytes of what follows",
       [](auto& j) { j["model"]["vocab"].erase("<0x9F>"); }},
      {"ignore_merges", [](auto& j) { j["model"]["ignore_merges"] = true; }},
      {"normalized added token",
       [](auto& j) {
         j["added_tokens"].push_back({{"id", 1500},
                                      {"content", "God said"},
                                      {"single_word", false},
                                      {"lstrip", false},
                                      {"rstrip", false},
                                      {"normalized", true},
                                      {"special", false}});
       }},
      {"specials marked normalized, as in older Llama 2 files",
       [](auto& j) {
         for (auto& t : j["added_tokens"]) t["normalized"] = true;
       }},
      {"Split merged with the next or previous, per-token Strip",
       [&](auto& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {split("String", "\u2581", "MergedWithNext"), split("Regex", "\\d|e", "MergedWithPrevious")}}};
         j["decoder"] = {{"type", "Sequence"},
                         {"decoders",
                          {llama_decoder["decoders"][0],
                           llama_decoder["decoders"][1],
                           {{"type", "Strip"}, {"content", "s"}, {"start", 0}, {"stop", 1}},
                           {{"type", "Strip"}, {"content", "h"}, {"start", 2}, {"stop", 0}}}}};
       }},
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    SCOPED_TRACE(edits[i].first);
    BpeTokenizer tok = edited("llama_legacy", edits[i].second);
    expect_parity(tok, dir_ / "tokenizer.json", 10 + static_cast<uint32_t>(i), 300);
  }
  // The Gemma fixture's Split cuts nothing once its normalizer has replaced the spaces; without
  // the normalizer it does.
  BpeTokenizer gemma = edited("gemma", [](auto& j) { j["normalizer"] = nullptr; });
  expect_parity(gemma, dir_ / "tokenizer.json", 30, 300);
}

TEST_F(SpmTokenizerTest, RefusesWhatItCannotHonour) {
  auto load_with = [&](const std::function<void(nlohmann::ordered_json&)>& edit) {
    return edited("llama_legacy", edit);
  };
  EXPECT_NO_THROW(load_with([](auto&) {}));
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", ""}};
                     }),
                     "normalizer", "Regex", "String");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["normalizer"]["normalizers"][0] = {{"type", "NFKC"}};
                     }),
                     "normalizer", "NFKC", "Prepend");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
                     }),
                     "replacement", "one character");
  EXPECT_TITAN_ERROR(
      load_with([](auto& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "x"}, {"prepend_scheme", "sometimes"}};
      }),
      "prepend_scheme", "sometimes");
  EXPECT_TITAN_ERROR(
      load_with([](auto& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Contiguous"}, {"invert", false}};
      }),
      "Contiguous", "MergedWithPrevious");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["pre_tokenizer"] = {{"type", "Whitespace"}};
                     }),
                     "pre_tokenizer", "Whitespace", "Metaspace");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["decoder"] = {{"type", "WordPiece"}};
                     }),
                     "decoder", "WordPiece", "ByteFallback");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["decoder"]["decoders"][0]["pattern"] = {{"Regex", "\u2581"}};
                     }),
                     "decoder", "Regex");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["decoder"] = {{"type", "ByteLevel"}};
                     }),
                     "decoder", "ByteLevel", "pre_tokenizer");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["decoder"] = nullptr; }), "decoder", "null");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["model"]["unk_token"] = "<nope>"; }), "unk_token", "<nope>");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["model"]["dropout"] = 0.1; }), "dropout");
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["model"]["merges"].push_back({"\u2581zz", "q"});
                     }),
                     "merge", "missing from the vocab");
}

}  // namespace
}  // namespace titan
