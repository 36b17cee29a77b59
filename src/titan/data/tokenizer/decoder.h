#pragma once
// The decoder of a tokenizer.json: how the tokens of some ids become text. Supported:
//   ByteLevel     byte-level BPE; its translation of the alphabet into bytes is done once, when
//                 the file is read, so here the tokens are bytes already and are joined
//   Replace       a String pattern replaced in each token (SentencePiece-style: "▁" -> " ")
//   ByteFallback  runs of <0xNN> tokens become their bytes
//   Fuse          the tokens joined into one
//   Strip         up to `start` leading and `stop` trailing `content` characters cut from each token
//   Metaspace     the replacement character read as a space, dropped from the first token (unless
//                 prepend_scheme is "never")
// and Sequences of them (ByteLevel alone). Anything else is refused when the file is read, naming
// what was found.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class Decoder {
 public:
  // `config` is tokenizer.json's "decoder"; `source` names the file in error messages.
  Decoder(const nlohmann::json& config, const std::string& source);

  bool byte_level() const { return byte_level_; }
  // The text of `tokens` (vocabulary tokens as spelled, added tokens as their content), as
  // Hugging Face's decoder gives it, except that bytes from ByteFallback that are not valid UTF-8
  // are kept as they are rather than replaced by U+FFFD.
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { replace, byte_fallback, fuse, strip, metaspace } kind;
    std::string pattern;         // replace: what is replaced; strip, metaspace: the character
    std::string content;         // replace: what goes instead
    size_t start = 0, stop = 0;  // strip
    bool drop_first = false;     // metaspace: drop the character from the first token
  };
  void add(const nlohmann::json& config, const std::string& source, const std::string& path);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace titan::data
