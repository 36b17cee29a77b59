#pragma once
// The pre-tokenizer of a tokenizer.json: the steps that cut text into words, inside which the
// merges then run. Supported:
//   Split      a Regex (through PCRE2's JIT) or String pattern, behavior Isolated,
//              MergedWithPrevious, MergedWithNext or Removed, inverted or not (CLIP's keeps the
//              matches and removes the rest)
//   WhitespaceSplit  words between runs of white space, which is dropped (T5's, before Metaspace)
//   ByteLevel  its GPT-2 regex when use_regex; must be the last step, and makes the tokenizer
//              byte-level (words go to the model as bytes)
//   Metaspace  SentencePiece-style: spaces become its replacement character, which is put in
//              front of a word as prepend_scheme says, and cuts words when split is set
// and Sequences of them; null (no pre-tokenizer) leaves the text one word. Anything else is
// refused when the file is read, naming what was found.
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

  // Whether the last step is ByteLevel: the vocabulary is then spelled in GPT-2's byte alphabet.
  bool byte_level() const { return byte_level_; }

  // Calls on_word with each word of `text`, in order. `at_start`: `text` begins the text being
  // encoded (Metaspace's prepend_scheme "first" prepends only there). Words are views valid during
  // the call; without Metaspace they are views into `text` and cover it exactly. Bytes that are
  // not valid UTF-8 match no regex and so end up in words of their own.
  void split(std::string_view text, bool at_start,
             const std::function<void(std::string_view)>& on_word) const;

 private:
  struct Step;
  void split_from(size_t step, std::string_view text, bool at_start,
                  const std::function<void(std::string_view)>& on_word) const;

  std::vector<std::unique_ptr<Step>> steps_;
  bool byte_level_ = false;
};

}  // namespace titan::data
