#pragma once
// The BPE model of a tokenizer.json: the vocabulary and the ranked merges, applied to one
// pre-tokenized word at a time. Two spellings:
//   byte-level           tokens are spelled in GPT-2's byte alphabet and held as raw bytes (see
//                        byte_level.h); a word's bytes are its first symbols.
//   SentencePiece-style  tokens are held as spelled (text, "▁" for a space); a word's characters
//                        are its first symbols, and a character missing from the vocabulary
//                        becomes the <0xNN> tokens of its bytes (byte_fallback) or unk_token
//                        (fused with neighbouring ones when fuse_unk is set), or nothing when
//                        there is neither, as in Hugging Face.
// A word's last symbol carries end_of_word_suffix and the others continuing_subword_prefix when the
// file sets them (CLIP's "</w>"); the vocabulary and merges then spell them too.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "titan/data/tokenizer/word_model.h"

namespace titan::data {

// Lets a map keyed by std::string be searched with a string_view, without making a string.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// One key for a pair of token ids, for the maps of merges and pair counts.
inline uint64_t token_pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

class BpeModel final : public WordModel {
 public:
  // `model` is tokenizer.json's "model"; `source` names the file in error messages. Ids above
  // `max_id` are refused. `byte_level` chooses the spelling.
  BpeModel(const nlohmann::json& model, const std::string& source, int32_t max_id, bool byte_level);

  // Appends the ids of `word` (one word of the pre-tokenizer: raw bytes, or text when not byte-level)
  // to `out`: the word's first symbols, merged pair by pair, lowest rank first and leftmost first
  // among equals, as Hugging Face does. Bytes that are not valid UTF-8 are characters of their own
  // (byte fallback then gives them back). Safe to call from several threads at once.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const override;

  // One past the largest id of the vocabulary.
  int32_t size() const override { return static_cast<int32_t>(tokens_.size()); }
  // Token `id` (its bytes, or its spelling when not byte-level); nullptr for an id the vocabulary
  // skips.
  const std::string* token(int32_t id) const override;
  std::optional<int32_t> id_of(std::string_view token) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // of the merged token
  };
  const Merge* find_merge(int32_t left, int32_t right) const;
  // The word's first symbols, before any merge.
  void symbols_of(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool byte_level_ = true;
  // As held (bytes when byte-level); empty when the file sets none.
  std::string prefix_, suffix_;
  // Byte-level: the token of each byte. Otherwise, with byte_fallback: the <0xNN> token of each,
  // -1 where the vocabulary lacks it.
  int32_t byte_ids_[256] = {};
  bool byte_fallback_ = false;
  std::optional<int32_t> unk_;
  bool fuse_unk_ = false;
  // Llama 3's: a word that is itself in the vocabulary is one token, whatever the merges would give.
  bool ignore_merges_ = false;
  // Keys this model's entries in each thread's word cache.
  uint64_t cache_owner_ = 0;
};

}  // namespace titan::data
