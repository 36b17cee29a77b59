#include "titan/data/byte_tokenizer.h"

#include <array>

#include "titan/core/error.h"

namespace titan::data {

namespace {
constexpr std::array<std::string_view, 3> kSpecialText = {"<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"};
static_assert(ByteTokenizer::kBeginOfText == 256 && ByteTokenizer::kVocabSize == 256 + kSpecialText.size());
}  // namespace

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 2);
  if (add_bos) ids.push_back(kBeginOfText);
  // Through unsigned char: a plain char is signed here, and bytes >= 0x80 must map to 128..255.
  for (unsigned char byte : text) ids.push_back(byte);
  if (add_eos) ids.push_back(kEndOfText);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    TITAN_CHECK(id >= 0 && id < kVocabSize, "ByteTokenizer::decode: ids must lie in [0, ", kVocabSize,
                "), found ", id, " at position ", i, "; were these ids made by another tokenizer?");
    if (id < kBeginOfText)
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    else
      text += kSpecialText[static_cast<size_t>(id - kBeginOfText)];
  }
  return text;
}

}  // namespace titan::data
