#pragma once
// The normalizer of a tokenizer.json: none, Unicode NFC (Qwen's, through ICU), Prepend, Replace
// with a literal pattern (SentencePiece-style files: Llama 2's Prepend("▁") then Replace(" ", "▁"),
// Gemma's Replace(" ", "▁")) or a Regex one (CLIP's "\s+" -> " ", T5's " {2,}" -> " "),
// Lowercase (CLIP), Strip, Precompiled (SentencePiece's charsmap: T5's), or a Sequence of them.
// Others are refused when the file is read, naming what was found.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class Regex;
class PrecompiledCharsmap;

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
    enum class Kind { nfc, prepend, replace, replace_regex, lowercase, strip, precompiled } kind;
    std::string pattern;  // replace: what is replaced
    std::string content;  // prepend: what goes in front; replace, replace_regex: what goes instead
    std::shared_ptr<const Regex> regex = nullptr;                   // replace_regex
    std::shared_ptr<const PrecompiledCharsmap> charsmap = nullptr;  // precompiled
    bool left = false, right = false;                     // strip: the ends stripped of white space
  };
  void add(const nlohmann::json& config, const std::string& source, const std::string& at);

  std::vector<Step> steps_;
};

}  // namespace titan::data
