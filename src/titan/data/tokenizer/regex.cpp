#include "titan/data/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace titan::data {

namespace {

// Hugging Face runs these patterns through Oniguruma, whose \s is Unicode's White_Space; PCRE2's
// \s under UCP leaves out U+0085 (NEL) although it is White_Space, which would cut text
// differently. Spelling the property out gives Oniguruma's classes, inside brackets as outside.
std::string with_white_space_property(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 's') {
        out += "\\p{White_Space}";
      } else if (c == 'S') {
        out += "\\P{White_Space}";
      } else {
        out.push_back('\\');
        out.push_back(c);
      }
    } else {
      out.push_back(pattern[i]);
    }
  }
  return out;
}

std::string pcre2_message(int error) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(error, message, sizeof(message));
  return reinterpret_cast<const char*>(message);
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, const std::string& what) {
  std::string translated = literal ? std::string(pattern) : with_white_space_property(pattern);
  // UCP gives \p{..} and the classes their Unicode meaning; PCRE2 refuses it with LITERAL.
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &error,
                        &offset, nullptr);
  TITAN_CHECK(code_ != nullptr, what, ": pattern ", pattern, " does not compile in PCRE2: ", pcre2_message(error),
              " at offset ", offset);
  int rc = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  if (rc != 0) pcre2_code_free(code_);
  TITAN_CHECK(rc == 0, what, ": PCRE2's JIT cannot compile the pattern ", pattern, " (error ", rc,
              "); titan needs a PCRE2 built with JIT support");
}

Regex::~Regex() { pcre2_code_free(code_); }

Regex::MatchData::MatchData(const Regex& regex) : data(pcre2_match_data_create_from_pattern(regex.code_, nullptr)) {
  TITAN_CHECK(data != nullptr, "tokenizer regex: out of memory for PCRE2 match data");
}

Regex::MatchData::~MatchData() { pcre2_match_data_free(data); }

bool Regex::find(std::string_view text, size_t pos, MatchData& md, size_t& begin, size_t& end) const {
  int rc = pcre2_jit_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, md.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  TITAN_CHECK(rc >= 0, "tokenizer regex: PCRE2 match failed at byte ", pos, " of a ", text.size(),
              "-byte text: ", pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace titan::data
