#pragma once
// Tokenizers read from Hugging Face tokenizer.json files, giving the ids (and the text back) that
// Hugging Face tokenizers gives. The model is BPE or Unigram (word_model.h); three kinds of file:
//   byte-level           pre-tokenizer ending in ByteLevel, decoder ByteLevel, vocabulary in GPT-2's
//                        byte alphabet (Llama 3, Qwen 2/3, GPT-2; CLIP's, with "</w>" ending words)
//   SentencePiece-style  no ByteLevel: spaces become "▁" through the normalizer (Prepend, Replace)
//                        or a Metaspace pre-tokenizer, characters missing from the vocabulary go to
//                        <0xNN> tokens (byte_fallback) or unk_token, and the decoder undoes it
//                        (Replace, ByteFallback, Fuse, Strip, or Metaspace) (Llama 2, Mistral, Gemma)
//   Unigram              SentencePiece's Unigram with its Precompiled normalizer and Metaspace (T5)
// The pipeline is the same for all:
//   text -> added tokens found whole (raw text) -> normalizer -> added tokens marked "normalized"
//   -> pre-tokenizer -> model per word -> ids.
// bos and eos come from tokenizer_config.json beside it: add_special = true wraps the ids in bos/eos
// as its add_bos_token (default: true when there is a bos) and add_eos_token (default: false) say.
// encode_for_model instead adds what the file's post_processor adds, as transformers does.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/tokenizer/added_tokens.h"
#include "titan/data/tokenizer/decoder.h"
#include "titan/data/tokenizer/normalizer.h"
#include "titan/data/tokenizer/post_processor.h"
#include "titan/data/tokenizer/pretokenizer.h"
#include "titan/data/tokenizer/word_model.h"

namespace titan::data {

class BpeTokenizer {
 public:
  // `path`: a folder holding tokenizer.json (and, optionally, tokenizer_config.json), or the
  // tokenizer.json file itself; or a folder of CLIP's vocab.json, merges.txt and
  // tokenizer_config.json without tokenizer.json (clip_vocab_files.h). Throws, naming the file and
  // the key, on anything it cannot honour.
  static BpeTokenizer load(const std::filesystem::path& path);
  // The same from the files' text: `source` and `config_source` name them in errors.
  static BpeTokenizer parse(std::string_view tokenizer_json, std::string_view config_json,
                            const std::string& source, const std::string& config_source);

  // Any bytes: those that are not valid UTF-8 are encoded byte by byte. Safe to call from
  // several threads at once.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // encode() of each text, in parallel over the texts.
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts,
                                                 bool add_special = false) const;
  // A text encoder's input, as transformers' tokenizer(text, padding="max_length",
  // max_length=length, truncation=True).input_ids: the text's ids cut to leave room for what the
  // post_processor adds (T5's </s>, CLIP's <|startoftext|> and <|endoftext|>), wrapped in it, then
  // padded with the pad token (tokenizer_config.json's pad_token) to `length`. Throws when `length`
  // cannot hold the added tokens, or, for a text shorter than `length`, when there is no pad token.
  std::vector<int32_t> encode_for_model(std::string_view text, int64_t length) const;
  // The text of the ids, added tokens as their text, as Hugging Face's decode gives it. Byte-level:
  // exactly the encoded text when `ids` came from encode(). SentencePiece-style: what the decoder
  // makes of the tokens (Llama 2's drops the one space its normalizer put in front). Unlike
  // Hugging Face, bytes that are not valid UTF-8 (a character cut between tokens) are returned as
  // they are, not replaced. Throws on an id outside the vocabulary, naming it and its position.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Which kind it is (see above).
  bool byte_level() const { return decoder_.byte_level(); }
  // One past the largest id, added tokens included.
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  std::optional<int32_t> bos_id() const { return bos_; }
  std::optional<int32_t> eos_id() const { return eos_; }
  std::optional<int32_t> pad_id() const { return pad_; }
  // CRC-32C of tokenizer.json followed by tokenizer_config.json ("{}" when absent): the files
  // that define the ids.
  uint32_t fingerprint() const { return fingerprint_; }
  // The id of an added token by its text, else of a vocabulary token by its bytes (byte-level) or
  // its spelling (SentencePiece-style: "▁the", "<0x0A>").
  std::optional<int32_t> token_id(std::string_view token) const;

 private:
  BpeTokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& source,
               const std::string& config_source);
  // `at_start`: `text` begins the text being encoded.
  void encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& out) const;

  Normalizer normalizer_;
  Pretokenizer pretokenizer_;
  std::unique_ptr<WordModel> model_;
  Decoder decoder_;
  PostProcessor post_processor_;
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // the others, matched after the normalizer
  // By id: what decode() gives for it (byte-level: its bytes; SentencePiece-style: its spelling, which
  // the decoder reads), and what the id is.
  enum class Kind : uint8_t { absent, token, special };
  std::vector<std::string> pieces_;
  std::vector<Kind> kinds_;
  std::optional<int32_t> bos_, eos_, pad_;
  bool add_bos_ = false, add_eos_ = false;
  uint32_t fingerprint_ = 0;
};

}  // namespace titan::data
