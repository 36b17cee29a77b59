#pragma once
// The Unigram model of a tokenizer.json (T5's, from SentencePiece): a vocabulary of pieces with
// log-probability scores; a word becomes the pieces whose scores sum highest (Viterbi over every
// piece that starts at each character). As Hugging Face's tokenizers: a character that starts no
// one-character piece may also be unk_id, scored 10 below the lowest score; consecutive unknowns
// are fused into one; with byte_fallback an unknown stretch becomes its <0xNN> pieces when all are
// in the vocabulary.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "titan/data/tokenizer/bpe_model.h"
#include "titan/data/tokenizer/word_model.h"

namespace titan::data {

class UnigramModel final : public WordModel {
 public:
  // `model` is tokenizer.json's "model"; `source` names the file in errors.
  UnigramModel(const nlohmann::json& model, const std::string& source);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const override;
  int32_t size() const override { return static_cast<int32_t>(pieces_.size()); }
  const std::string* token(int32_t id) const override;
  std::optional<int32_t> id_of(std::string_view token) const override;

 private:
  // The ids of `unknown` (a stretch the Viterbi path gave to unk): its <0xNN> pieces with
  // byte_fallback, else the piece spelled so if there is one, else unk.
  void push_unknown(std::string_view unknown, std::vector<int32_t>& out) const;

  // The pieces as a byte trie: node -> sorted (byte, child) edges, and the id ending there.
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t id = -1;
  };
  std::vector<Node> trie_;
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>> ids_;
  std::optional<int32_t> unk_;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
  bool fuse_unk_ = true;
  std::string source_;
};

}  // namespace titan::data
