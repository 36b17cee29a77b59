#pragma once
// A byte-level tokenizer: every byte is its own token, so any input (binary, invalid UTF-8,
// NUL) encodes and decodes exactly, with no vocabulary file. It is the tokenizer of a config whose
// model.tokenizer_path is empty (data/tokenizer.h); the trainer sizes the model's vocabulary from
// vocab_size().
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class ByteTokenizer {
 public:
  // Ids 0..255 are the bytes; the specials follow, named as in Llama 3.
  static constexpr int32_t kBeginOfText = 256;
  static constexpr int32_t kEndOfText = 257;
  // Never produced by encode() nor by packing; reserved for padded batches.
  static constexpr int32_t kPad = 258;
  static constexpr int32_t kVocabSize = 259;

  int32_t vocab_size() const { return kVocabSize; }
  int32_t bos_id() const { return kBeginOfText; }
  int32_t eos_id() const { return kEndOfText; }
  int32_t pad_id() const { return kPad; }

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool add_eos) const;
  // Specials decode to their text form ("<|end_of_text|>"), as Hugging Face tokenizers do by
  // default, so a sample shows where documents end. Bytes decode exactly, whatever they are.
  // Throws on an id outside [0, vocab_size()), naming it and its position.
  std::string decode(std::span<const int32_t> ids) const;
};

}  // namespace titan::data
