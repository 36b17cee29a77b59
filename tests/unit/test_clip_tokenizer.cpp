// CLIP's tokenizer (openai/clip-vit-large-patch14's: byte-level BPE with "</w>" ending words, NFC +
// whitespace runs + Lowercase, CLIP's split regex, <|startoftext|> ... <|endoftext|>) on the real
// 49,408-id vocabulary, against Hugging Face tokenizers and transformers on 1,200 texts
// (tests/tokenizer/make_flux_fixtures.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/hf_tokenizer.h"
#include "support/test_util.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"

namespace titan {
namespace {

using data::BpeTokenizer;
using Ids = std::vector<int32_t>;

TEST(ClipTokenizer, MatchesHuggingFace) {
  const auto folder = test::flux_tokenizer_fixture("clip");
  BpeTokenizer tok = BpeTokenizer::load(folder);
  EXPECT_EQ(tok.vocab_size(), 49408);
  EXPECT_TRUE(tok.byte_level());
  test::expect_reference_parity(tok, folder);
}

TEST(ClipTokenizer, KnownIdsAndPadding) {
  BpeTokenizer tok = BpeTokenizer::load(test::flux_tokenizer_fixture("clip"));
  // OpenAI CLIP's ids: a 320, photo 1125, of 539, cat 2368.
  EXPECT_EQ(tok.encode("A photo of a CAT"), (Ids{320, 1125, 539, 320, 2368}));
  Ids fixed = tok.encode_for_model("a photo of a cat", 77);
  ASSERT_EQ(fixed.size(), 77u);
  EXPECT_EQ(Ids(fixed.begin(), fixed.begin() + 8), (Ids{49406, 320, 1125, 539, 320, 2368, 49407, 49407}));
  EXPECT_EQ(fixed.back(), 49407);
  // Truncation keeps the closing token.
  Ids cut = tok.encode_for_model(std::string(500, 'a') + " b c d", 4);
  EXPECT_EQ(cut.front(), 49406);
  EXPECT_EQ(cut.back(), 49407);
  // The ByteLevel decoder gives the tokens' text, "</w>" included, as tokenizers does.
  EXPECT_EQ(tok.decode(tok.encode("a cat")), "a</w>cat</w>");
}

// FLUX.1's tokenizer/ folder holds vocab.json, merges.txt and tokenizer_config.json, no
// tokenizer.json: titan builds it as transformers' CLIPTokenizer does, and gets clip/'s ids.
TEST(ClipTokenizer, VocabAndMergesFilesGiveTheTokenizerJsonIds) {
  const std::filesystem::path folder = test::flux_tokenizer_fixture("clip_files");
  ASSERT_FALSE(std::filesystem::exists(folder / "tokenizer.json"));
  const BpeTokenizer tok = BpeTokenizer::load(folder);
  EXPECT_EQ(tok.vocab_size(), 49408);
  EXPECT_TRUE(tok.byte_level());
  test::expect_reference_parity(tok, folder);
  EXPECT_EQ(tok.encode_for_model("a photo of a cat", 8), (Ids{49406, 320, 1125, 539, 320, 2368, 49407, 49407}));
}

TEST(ClipTokenizer, VocabAndMergesFilesThatCannotBeReadAreRefusedNamingTheFile) {
  const std::filesystem::path source = test::flux_tokenizer_fixture("clip_files");
  const std::filesystem::path dir = test::fresh_temp_dir("clip_files_refused");
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  std::filesystem::copy_file(source / "vocab.json", dir / "vocab.json");
  write("merges.txt", "#version: 0.2\ni n\nt h\n");
  write("tokenizer_config.json", R"({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|startoftext|>",
                                     "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})");
  EXPECT_TITAN_ERROR(BpeTokenizer::load(dir), "tokenizer_config.json", "'GPT2Tokenizer'", "save_pretrained");
  write("tokenizer_config.json", R"({"tokenizer_class": "CLIPTokenizer", "bos_token": "<|start|>",
                                     "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})");
  EXPECT_TITAN_ERROR(BpeTokenizer::load(dir), "vocab.json", "bos token '<|start|>'");
  write("tokenizer_config.json", R"({"tokenizer_class": "CLIPTokenizer", "eos_token": "<|endoftext|>",
                                     "unk_token": "<|endoftext|>"})");
  EXPECT_TITAN_ERROR(BpeTokenizer::load(dir), "names no bos_token");
  write("tokenizer_config.json", R"({"tokenizer_class": "CLIPTokenizer", "bos_token": "<|startoftext|>",
                                     "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})");
  write("merges.txt", "#version: 0.2\ni n\nthree tokens here\n");
  EXPECT_TITAN_ERROR(BpeTokenizer::load(dir), "merges.txt:3", "two tokens");
  std::filesystem::remove(dir / "merges.txt");
  EXPECT_TITAN_ERROR(BpeTokenizer::load(dir), "no tokenizer at", "merges.txt");
}

}  // namespace
}  // namespace titan
