// BpeTokenizer against Hugging Face tokenizers (tests/tokenizer/hf_encode.py through the venv's
// python): the same ids on a varied corpus and on random mixes of the fragments that make
// pre-tokenizers disagree, for the real Llama 3 and Qwen 3 files (../shared/tokenizers/, skipped
// when absent) and for a tokenizer trained here; exact round trips; clear refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/hf_tokenizer.h"
#include "support/test_util.h"
#include "titan/data/text_dataset.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"
#include "titan/data/tokenizer/bpe_trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using data::BpeTokenizer;
using Ids = std::vector<int32_t>;

fs::path shared_tokenizer(const std::string& name) {
  return fs::path(TITAN_SOURCE_DIR) / ".." / "shared" / "tokenizers" / name;
}

std::string kjv_head(size_t bytes) {
  return data::read_text_file(fs::path(TITAN_SOURCE_DIR) / "data" / "kjv.txt.gz").substr(0, bytes);
}

std::vector<std::string> corpus() {
  return {
      "",
      "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see.",
      "I'M SURE YOU'VE SEEN IT, DON'T YOU'D THINK? SHE'S THERE. WE'LL GO. THEY'RE HERE.",
      "int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) printf(\"%s\\n\", argv[i]);\n"
      "\treturn 0;\n}\n",
      "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\n\n",
      "    \t\t  \n\n\n   \r\n\r\n  \r\r\n\t \n end  \t",
      "line one\r\nline two\r\n\r\nline four\r\n",
      "中华人民共和国成立于1949年。東京タワーは333メートルです。한국어 문장입니다.",
      "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
      "family 👨‍👩‍👧‍👦 flag 🏳️‍🌈 thumbs 👍🏽 heart ❤️ 🇫🇷🇯🇵",
      "1234567890123456789012345678901234567890 3.14159265358979 1,000,000 -42 0x1F",
      "Hello<|begin_of_text|>world<|end_of_text|><|end_of_text|> <|im_start|>user\nhi<|im_end|> "
      "<think>x</think>",
      "<|end_of_text <|im_start| <| |> <|reserved_special_token_7|>",
      "naïve café résumé Ångström Ελληνικά русский язык العربية हिन्दी",
      "decomposed: e\u0301 a\u0308 o\u0302 A\u030a, ligature: ﬁ ﬂ, compat: ① ㈱",
      "NEL\u0085here, NBSP\u00a0there, ideographic\u3000space, zwsp\u200bjoin, bom\ufeffmark, \x1c sep",
      "İstanbul straße ΣΊΣΥΦΟΣ ς ǅ ſs 'ſ 'S 'Ll",
      std::string(5000, 'a'),
      std::string(20000, ' ') + "x" + std::string(3000, '\n'),
      std::string(3000, '7'),
      "https://example.com/path?query=1&b=%20#frag user@example.org",
      kjv_head(200000),
  };
}

// Random mixes of the fragments where regex engines, contractions, digits, whitespace and added
// tokens meet.
std::vector<std::string> fuzz_corpus(size_t n, uint32_t seed) {
  const std::vector<std::string> pieces = {"a",
                                           "Zq",
                                           "'s",
                                           "'S",
                                           "'ll",
                                           "'LL",
                                           "'",
                                           " ",
                                           "  ",
                                           "\t",
                                           "\n",
                                           "\r\n",
                                           "\r",
                                           "\u0085",
                                           "\u00a0",
                                           "\u3000",
                                           "1",
                                           "23",
                                           "4567",
                                           "你",
                                           "好",
                                           "ไทย",
                                           "👍",
                                           "👨‍👩‍👧",
                                           "é",
                                           "e\u0301",
                                           "ﬁ",
                                           "<|end_of_text|>",
                                           "<|im_start|>",
                                           "<think>",
                                           "<|",
                                           "|>",
                                           "!",
                                           "...",
                                           "ß",
                                           "İ",
                                           "ς",
                                           "\u200b",
                                           "١٢",
                                           "\u2028",
                                           "_",
                                           "-"};
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

class BpeTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("titan_bpe_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void expect_parity(const BpeTokenizer& tok, const fs::path& file, const std::vector<std::string>& texts) {
    test::expect_hf_parity(tok, file, texts, dir_);
  }

  fs::path dir_;
};

TEST_F(BpeTokenizerTest, Llama3MatchesHuggingFace) {
  fs::path dir = shared_tokenizer("llama3");
  if (!fs::exists(dir / "tokenizer.json")) TITAN_MISSING_REFERENCE("no Llama 3 tokenizer at " << dir);
  BpeTokenizer tok = BpeTokenizer::load(dir);
  EXPECT_EQ(tok.vocab_size(), 128256);
  expect_parity(tok, dir / "tokenizer.json", corpus());
  expect_parity(tok, dir / "tokenizer.json", fuzz_corpus(500, 1));
  // No normalizer: decoding gives back exactly the text.
  for (const std::string& text : corpus()) EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST_F(BpeTokenizerTest, Qwen3MatchesHuggingFace) {
  fs::path dir = shared_tokenizer("qwen3");
  if (!fs::exists(dir / "tokenizer.json")) TITAN_MISSING_REFERENCE("no Qwen 3 tokenizer at " << dir);
  BpeTokenizer tok = BpeTokenizer::load(dir);
  EXPECT_EQ(tok.vocab_size(), 151669);
  // Qwen normalizes to NFC, which the decomposed text and the fragments test.
  expect_parity(tok, dir / "tokenizer.json", corpus());
  expect_parity(tok, dir / "tokenizer.json", fuzz_corpus(500, 2));
}

TEST_F(BpeTokenizerTest, SpecialTokensComeFromTheConfig) {
  fs::path llama = shared_tokenizer("llama3"), qwen = shared_tokenizer("qwen3");
  if (!fs::exists(llama / "tokenizer.json") || !fs::exists(qwen / "tokenizer.json"))
    TITAN_MISSING_REFERENCE("no tokenizers in " << llama.parent_path());
  BpeTokenizer l = BpeTokenizer::load(llama);
  EXPECT_EQ(l.bos_id(), 128000);
  EXPECT_EQ(l.eos_id(), 128001);
  Ids plain = l.encode("Hello world");
  Ids with = l.encode("Hello world", /*add_special=*/true);
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with.front(), 128000);
  EXPECT_EQ(Ids(with.begin() + 1, with.end()), plain);
  EXPECT_EQ(l.decode(with), "<|begin_of_text|>Hello world");
  EXPECT_EQ(l.decode(with, /*skip_special=*/true), "Hello world");

  BpeTokenizer q = BpeTokenizer::load(qwen / "tokenizer.json");
  EXPECT_EQ(q.bos_id(), std::nullopt);
  EXPECT_EQ(q.eos_id(), 151645);  // <|im_end|>
  EXPECT_EQ(q.encode("Hello world", true), q.encode("Hello world"));
  // <think> is added but not special: skip_special keeps it.
  EXPECT_EQ(q.decode(q.encode("<|im_start|><think>"), true), "<think>");
}

TEST_F(BpeTokenizerTest, AnyBytesRoundTrip) {
  fs::path dir = shared_tokenizer("llama3");
  if (!fs::exists(dir / "tokenizer.json")) TITAN_MISSING_REFERENCE("no Llama 3 tokenizer at " << dir);
  BpeTokenizer tok = BpeTokenizer::load(dir);
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  for (const std::string& text : {all_bytes, std::string("ok\xff\xfe mid\xc3 cut\xe4\xbd"),
                                  std::string("nul\0inside", 10), std::string("\xed\xa0\x80 surrogate")})
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  // A character cut between tokens comes back as its bytes, to be joined by the caller.
  Ids ids = tok.encode("龘");
  ASSERT_GT(ids.size(), 1u);
  EXPECT_EQ(tok.decode(Ids{ids[0]}) + tok.decode(Ids(ids.begin() + 1, ids.end())), "龘");
  EXPECT_TITAN_ERROR(tok.decode(Ids{5, 128256}), "id 128256", "position 1");
  EXPECT_TITAN_ERROR(tok.decode(Ids{-1}), "id -1", "position 0");
}

TEST_F(BpeTokenizerTest, TrainedTokenizerLoadsInHuggingFace) {
  std::string text = kjv_head(300000);
  std::vector<std::string_view> texts = {text};
  data::BpeTrainerOptions options;
  options.vocab_size = 600;
  nlohmann::ordered_json trained = data::train_bpe(texts, options);
  EXPECT_EQ(trained, data::train_bpe(texts, options)) << "training is not reproducible";
  data::save_trained_tokenizer(trained, options, dir_);

  BpeTokenizer tok = BpeTokenizer::load(dir_);
  EXPECT_EQ(tok.vocab_size(), 600);
  EXPECT_EQ(tok.bos_id(), 598);
  EXPECT_EQ(tok.eos_id(), 599);
  std::vector<std::string> sample = corpus();
  sample.push_back(kjv_head(2000000).substr(1000000, 50000));  // text it was not trained on
  expect_parity(tok, dir_ / "tokenizer.json", sample);
  expect_parity(tok, dir_ / "tokenizer.json", fuzz_corpus(200, 3));
  for (const std::string& s : sample) EXPECT_EQ(tok.decode(tok.encode(s)), s);
  // The merges compress the text they were learned from.
  EXPECT_LT(tok.encode(text).size(), text.size() / 2);
}

TEST_F(BpeTokenizerTest, BundledKjvTokenizerIsWhatTrainingMakes) {
  fs::path dir = fs::path(TITAN_SOURCE_DIR) / "data" / "kjv_tokenizer";
  std::string kjv = data::read_text_file(fs::path(TITAN_SOURCE_DIR) / "data" / "kjv.txt.gz");
  std::vector<std::string_view> texts = {kjv};
  std::ifstream file(dir / "tokenizer.json");
  EXPECT_EQ(nlohmann::ordered_json::parse(file), data::train_bpe(texts, {.vocab_size = 2048}))
      << "data/kjv_tokenizer is stale: remake it as data/kjv_tokenizer/README.md says";
  BpeTokenizer tok = BpeTokenizer::load(dir);
  EXPECT_EQ(tok.vocab_size(), 2048);
  EXPECT_EQ(tok.bos_id(), 2046);
  EXPECT_EQ(tok.eos_id(), 2047);
  expect_parity(tok, dir / "tokenizer.json", corpus());
}

// The paths the shipped tokenizers leave untried, on the KJV tokenizer edited: GPT-2's ByteLevel
// regex, a literal Split before it, and an added token matched after NFC.
TEST_F(BpeTokenizerTest, OtherConfigurationsMatchHuggingFace) {
  std::ifstream file(fs::path(TITAN_SOURCE_DIR) / "data" / "kjv_tokenizer" / "tokenizer.json");
  const nlohmann::ordered_json base = nlohmann::ordered_json::parse(file);
  const nlohmann::ordered_json gpt2_byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  std::vector<std::function<void(nlohmann::ordered_json&)>> edits = {
      [&](auto& j) { j["pre_tokenizer"] = gpt2_byte_level; },
      [&](auto& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "Split"},
                                 {"pattern", {{"String", "the"}}},
                                 {"behavior", "Isolated"},
                                 {"invert", false}},
                                gpt2_byte_level}}};
      },
      [&](auto& j) {
        j["normalizer"] = {{"type", "NFC"}};
        j["added_tokens"].push_back({{"id", 2048},
                                     {"content", "caf\u00e9"},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", true},
                                     {"special", false}});
      },
  };
  std::vector<std::string> texts = corpus();
  texts.push_back("a cafe\u0301 and a caf\u00e9, then the other theme; cafe\u0301s");
  for (size_t i = 0; i < edits.size(); ++i) {
    SCOPED_TRACE("configuration " + std::to_string(i));
    nlohmann::ordered_json j = base;
    edits[i](j);
    std::ofstream(dir_ / "tokenizer.json") << j.dump();
    BpeTokenizer tok = BpeTokenizer::load(dir_);
    expect_parity(tok, dir_ / "tokenizer.json", texts);
    expect_parity(tok, dir_ / "tokenizer.json", fuzz_corpus(200, 10 + static_cast<uint32_t>(i)));
  }
}

TEST_F(BpeTokenizerTest, RefusesWhatItCannotHonour) {
  std::string text = "the cat sat on the mat with the hat, the cat";
  std::vector<std::string_view> texts = {text};
  data::BpeTrainerOptions options;
  options.vocab_size = 270;
  const nlohmann::ordered_json good = data::train_bpe(texts, options);
  auto load_with = [&](const std::function<void(nlohmann::ordered_json&)>& edit) {
    nlohmann::ordered_json j = good;
    edit(j);
    std::ofstream(dir_ / "tokenizer.json") << j.dump();
    return BpeTokenizer::load(dir_);
  };
  EXPECT_NO_THROW(load_with([](auto&) {}));
  EXPECT_TITAN_ERROR(load_with([](auto& j) {
                       j["normalizer"] = {{"type", "NFKD"}};
                     }),
                     "tokenizer.json", "normalizer", "NFKD", "NFC");
  // SentencePiece-style steps around a byte-level vocabulary and decoder.
  const nlohmann::ordered_json metaspace = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_TITAN_ERROR(load_with([&](auto& j) { j["pre_tokenizer"] = metaspace; }), "pre_tokenizer",
                     "ByteLevel");
  EXPECT_TITAN_ERROR(
      load_with([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous"; }),
      "Contiguous", "Isolated");
  EXPECT_TITAN_ERROR(
      load_with([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; }),
      "(unclosed", "PCRE2");
  EXPECT_TITAN_ERROR(load_with([&](auto& j) { j["decoder"] = metaspace; }), "decoder", "ByteLevel");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["model"]["type"] = "WordPiece"; }), "model", "BPE",
                     "WordPiece");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["model"]["merges"].push_back("Ġc zz"); }), "merge", "Ġc zz",
                     "missing from the vocab");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["model"]["vocab"].erase("a"); }), "byte 97", "256 bytes");
  EXPECT_TITAN_ERROR(load_with([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }), "<|begin_of_text|>",
                     "lstrip");
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"bos_token": "<|nope|>"})";
  EXPECT_TITAN_ERROR(load_with([](auto&) {}), "tokenizer_config.json", "bos_token", "<|nope|>");
  EXPECT_TITAN_ERROR(BpeTokenizer::load(dir_ / "missing"), "no tokenizer at", "missing");
  EXPECT_TITAN_ERROR(data::train_bpe(texts, {.vocab_size = 100}), "vocab size 100");
}

}  // namespace
}  // namespace titan
