#pragma once
// The normalizer of a tokenizer.json: none, Unicode NFC (Qwen's, through ICU), Prepend and Replace
// with a literal pattern (SentencePiece-style files: Llama 2's Prepend("▁") then Replace(" ", "▁"),
// Gemma's Replace(" ", "▁")), or a Sequence of them. Others are refused when the file is read,
// naming what was found.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class Normalizer {
 public:
  // `config` is tokenizer.json's "normalizer"; `source` names the file in error messages.
  Normalizer(const nlohmann::json& config, const std::string& source);

  bool active() const { return !steps_.empty(); }
  // `text` normalized; `scratch` holds the result when it differs from `text`. Bytes that are not
  // valid UTF-8 pass through unchanged.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  struct Step {
    enum class Kind { nfc, prepend, replace } kind;
    std::string pattern;  // replace: what is replaced
    std::string content;  // prepend: what goes in front; replace: what goes instead
  };
  void add(const nlohmann::json& config, const std::string& source, const std::string& at);

  std::vector<Step> steps_;
};

}  // namespace titan::data
