#pragma once
// The normalizer of a tokenizer.json: none, or Unicode NFC (Qwen's), through ICU. Others are
// refused when the file is read, naming what was found.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace titan::data {

class Normalizer {
 public:
  // `config` is tokenizer.json's "normalizer"; `source` names the file in error messages.
  Normalizer(const nlohmann::json& config, const std::string& source);

  bool active() const { return nfc_; }
  // `text` normalized; `scratch` holds the result when it differs from `text`. Bytes that are not
  // valid UTF-8 pass through unchanged.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  bool nfc_ = false;
};

}  // namespace titan::data
