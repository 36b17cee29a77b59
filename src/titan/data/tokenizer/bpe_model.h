#pragma once
// The BPE model of a byte-level tokenizer.json: the vocabulary and the ranked merges, applied to
// one pre-tokenized word at a time. Tokens are held as raw bytes (see byte_level.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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

class BpeModel {
 public:
  // `model` is tokenizer.json's "model"; `source` names the file in error messages. Ids above
  // `max_id` are refused.
  BpeModel(const nlohmann::json& model, const std::string& source, int32_t max_id);

  // Appends the ids of `word` (raw bytes, one word of the pre-tokenizer) to `out`: the word's
  // bytes, merged pair by pair, lowest rank first and leftmost first among equals, as Hugging Face
  // does. Safe to call from several threads at once.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // One past the largest id of the vocabulary.
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  // The bytes of token `id`; nullptr for an id the vocabulary skips.
  const std::string* token(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view bytes) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // of the merged token
  };
  const Merge* find_merge(int32_t left, int32_t right) const;
  void merge(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256] = {};
  // Llama 3's: a word that is itself in the vocabulary is one token, whatever the merges would give.
  bool ignore_merges_ = false;
  // Keys this model's entries in each thread's word cache.
  uint64_t cache_owner_ = 0;
};

}  // namespace titan::data
