#pragma once
// The model of a tokenizer.json: what turns one pre-tokenized word into ids. BPE (bpe_model.h)
// and Unigram (unigram_model.h), chosen by the file's model.type.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class WordModel {
 public:
  virtual ~WordModel() = default;
  // Appends the ids of `word` to `out`. Safe to call from several threads at once.
  virtual void encode_word(std::string_view word, std::vector<int32_t>& out) const = 0;
  // One past the largest id of the vocabulary.
  virtual int32_t size() const = 0;
  // Token `id` as the model holds it (bytes for byte-level BPE, else its spelling); nullptr for
  // an id the vocabulary skips.
  virtual const std::string* token(int32_t id) const = 0;
  virtual std::optional<int32_t> id_of(std::string_view token) const = 0;
};

// The model of tokenizer.json's "model" section, by its "type" (BPE or Unigram); `source` names
// the file in errors, ids above `max_id` are refused, `byte_level` chooses BPE's spelling.
std::unique_ptr<WordModel> load_word_model(const nlohmann::json& model, const std::string& source, int32_t max_id,
                                           bool byte_level);

}  // namespace titan::data
