// CLIP's tokenizer (openai/clip-vit-large-patch14's: byte-level BPE with "</w>" ending words, NFC +
// whitespace runs + Lowercase, CLIP's split regex, <|startoftext|> ... <|endoftext|>) on the real
// 49,408-id vocabulary, against Hugging Face tokenizers and transformers on 1,200 texts
// (tests/tokenizer/make_flux_fixtures.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/hf_tokenizer.h"
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

}  // namespace
}  // namespace titan
