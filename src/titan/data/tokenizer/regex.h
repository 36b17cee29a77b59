#pragma once
// The regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers), through
// PCRE2's JIT, with the meaning Hugging Face's Oniguruma gives them.
#include <string>
#include <string_view>

#include "titan/core/error.h"

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace titan::data {

class Regex {
 public:
  // `literal`: `pattern` is plain text to find. `what` says whose pattern it is, for errors
  // ("tokenizer.json: pre_tokenizer").
  Regex(std::string_view pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) with each non-empty match in `text`, in order, not overlapping.
  // Bytes that are not valid UTF-8 match nothing.
  template <typename OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const {
    MatchData md(*this);
    for (size_t pos = 0; pos < text.size();) {
      size_t begin = 0, end = 0;
      if (!find(text, pos, md, begin, end)) break;
      if (end == begin) {
        // An empty match cuts nothing; step over one character to look further.
        pos = begin + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      on_match(begin, end);
      pos = end;
    }
  }

 private:
  struct MatchData {
    explicit MatchData(const Regex& regex);
    ~MatchData();
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
    pcre2_real_match_data_8* data;
  };
  // The first match at or after `pos` as [begin, end); false when there is none.
  bool find(std::string_view text, size_t pos, MatchData& md, size_t& begin, size_t& end) const;

  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace titan::data
