#pragma once
// The pre-tokenizer of a byte-level BPE tokenizer.json: regexes (through PCRE2's JIT) that cut
// text into words, inside which the merges then run. Supported: Split (Regex or String pattern,
// behavior Isolated), ByteLevel (its GPT-2 regex when use_regex), and Sequences of them ending
// in ByteLevel. Anything else is refused when the file is read, naming what was found.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class Pretokenizer {
 public:
  // `config` is tokenizer.json's "pre_tokenizer"; `source` names the file in error messages.
  Pretokenizer(const nlohmann::json& config, const std::string& source);
  ~Pretokenizer();
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // Calls on_word with each word of `text`, in order; the words are views into `text` and cover
  // it exactly. Bytes that are not valid UTF-8 match no regex and so end up in words of their own.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_word) const;

 private:
  struct Regex;
  void split_from(size_t step, std::string_view text,
                  const std::function<void(std::string_view)>& on_word) const;

  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace titan::data
