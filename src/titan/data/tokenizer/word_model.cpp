#include "titan/data/tokenizer/word_model.h"

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/tokenizer/bpe_model.h"
#include "titan/data/tokenizer/unigram_model.h"

namespace titan::data {

std::unique_ptr<WordModel> load_word_model(const nlohmann::json& model, const std::string& source, int32_t max_id,
                                           bool byte_level) {
  const json_fields::JsonPath at{source, "model"};
  const std::string type = json_fields::field<std::string>(json_fields::object(model, at), "type", at);
  if (type == "BPE") return std::make_unique<BpeModel>(model, source, max_id, byte_level);
  TITAN_CHECK(type == "Unigram", (at / "type").str(), ": model type \"", type,
              "\" is not supported; titan reads BPE and Unigram");
  TITAN_CHECK(!byte_level, source, ": a Unigram model with a ByteLevel pre-tokenizer is not supported; "
              "Unigram files (T5's) spell their pieces as text, with Metaspace");
  auto unigram = std::make_unique<UnigramModel>(model, source);
  TITAN_CHECK(unigram->size() - 1 <= max_id, (at / "vocab").str(), ": ", unigram->size(), " pieces is more than ",
              max_id + 1, " ids");
  return unigram;
}

}  // namespace titan::data
