#include "titan/data/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

// What ByteLevel splits by when use_regex is set (GPT-2's pattern).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

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

}  // namespace

struct Pretokenizer::Regex {
  pcre2_code* code = nullptr;

  Regex(std::string_view pattern, bool literal, const std::string& source) {
    std::string translated = literal ? std::string(pattern) : with_white_space_property(pattern);
    // UCP gives \p{..} and the classes their Unicode meaning; PCRE2 refuses it with LITERAL.
    uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &error,
                         &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      TITAN_CHECK(false, source, ": pre_tokenizer pattern ", pattern,
                  " does not compile in PCRE2: ", reinterpret_cast<const char*>(message), " at offset ",
                  offset);
    }
    int rc = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    if (rc != 0) pcre2_code_free(code);
    TITAN_CHECK(rc == 0, source, ": PCRE2's JIT cannot compile the pre_tokenizer pattern ", pattern,
                " (error ", rc, "); titan needs a PCRE2 built with JIT support");
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Isolated: every match is a word, and so is every stretch of text between matches.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_word) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    TITAN_CHECK(md != nullptr, "pre_tokenizer: out of memory for PCRE2 match data");
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, gap = 0;
    while (pos < text.size()) {
      int rc = pcre2_jit_match(code, subject, text.size(), pos, 0, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        TITAN_CHECK(false, "pre_tokenizer: PCRE2 match failed at byte ", pos, " of a ", text.size(),
                    "-byte text: ", reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      size_t begin = ov[0], end = ov[1];
      if (end == begin) {
        // An empty match cuts nothing; step over one character to look further.
        pos = begin + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (begin > gap) on_word(text.substr(gap, begin - gap));
      on_word(text.substr(begin, end - begin));
      pos = gap = end;
    }
    if (gap < text.size()) on_word(text.substr(gap));
  }
};

Pretokenizer::Pretokenizer(const nlohmann::json& config, const std::string& source) {
  const std::string where = source + ": pre_tokenizer";
  const JsonPath at{source, "pre_tokenizer"};
  auto type_of = [](const nlohmann::json& step, const JsonPath& step_at) {
    return step.is_object() ? json_fields::field_or<std::string>(step, "type", "", step_at) : "";
  };
  std::vector<std::pair<nlohmann::json, JsonPath>> steps;
  if (type_of(config, at) == "Sequence") {
    const nlohmann::json& list =
        json_fields::array(json_fields::member(config, "pretokenizers", at), at / "pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) steps.emplace_back(list[i], (at / "pretokenizers")[i]);
  } else {
    steps.emplace_back(config, at);
  }
  // The vocabulary is spelled in the byte-level alphabet, so the text must reach the model through
  // ByteLevel, and no step may run after it on the translated text.
  TITAN_CHECK(
      !steps.empty() && type_of(steps.back().first, steps.back().second) == "ByteLevel", where,
      " must be ByteLevel or a Sequence ending in ByteLevel (titan reads byte-level BPE tokenizers); got ",
      config.dump().substr(0, 300));
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, step_at] = steps[i];
    const std::string type =
        json_fields::field<std::string>(json_fields::object(step, step_at), "type", step_at);
    if (type == "Split") {
      const std::string behavior = json_fields::field_or<std::string>(step, "behavior", "", step_at);
      TITAN_CHECK(behavior == "Isolated", step_at.str(), ": Split behavior \"", behavior,
                  "\" is not supported; titan reads Isolated");
      TITAN_CHECK(!json_fields::field_or(step, "invert", false, step_at), step_at.str(),
                  ": Split with invert = true is not supported");
      const nlohmann::json& p = json_fields::member(step, "pattern", step_at);
      TITAN_CHECK(p.is_object() && (p.contains("Regex") || p.contains("String")), step_at.str(),
                  ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}; got ", p.dump());
      bool literal = p.contains("String");
      const char* kind = literal ? "String" : "Regex";
      regexes_.push_back(std::make_unique<Regex>(
          json_fields::field<std::string>(p, kind, step_at / "pattern"), literal, source));
    } else if (type == "ByteLevel") {
      TITAN_CHECK(i + 1 == steps.size(), where, " has ByteLevel before its last step");
      // A space in front of every word would change the text the views cover.
      TITAN_CHECK(!json_fields::field_or(step, "add_prefix_space", false, step_at), step_at.str(),
                  ": ByteLevel with add_prefix_space = true is not supported");
      if (json_fields::field_or(step, "use_regex", true, step_at))
        regexes_.push_back(std::make_unique<Regex>(kGpt2Pattern, false, source));
    } else {
      TITAN_CHECK(false, step_at.str(), ": type ", type,
                  " is not supported; titan reads Split, ByteLevel and Sequence");
    }
  }
}

Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

void Pretokenizer::split(std::string_view text, const std::function<void(std::string_view)>& on_word) const {
  if (text.empty()) return;
  split_from(0, text, on_word);
}

void Pretokenizer::split_from(size_t step, std::string_view text,
                              const std::function<void(std::string_view)>& on_word) const {
  if (step == regexes_.size()) {
    on_word(text);
  } else {
    regexes_[step]->split(text, [&](std::string_view w) { split_from(step + 1, w, on_word); });
  }
}

}  // namespace titan::data
