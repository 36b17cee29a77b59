#include "titan/data/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/utf8.h"

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

// How a Split keeps its matches: as words of their own, or joined to the word before or after.
enum class Behavior { isolated, merged_with_previous, merged_with_next };

// Cuts `text` at the matches for_each_match reports (as on_match(begin, end), in order, none
// empty) and calls on_piece with each piece, as Hugging Face's SplitDelimiterBehavior does:
// MergedWithPrevious cuts after every match, MergedWithNext before every match.
template <typename ForEachMatch, typename OnPiece>
void cut(std::string_view text, Behavior behavior, ForEachMatch&& for_each_match, OnPiece&& on_piece) {
  size_t gap = 0;
  for_each_match([&](size_t begin, size_t end) {
    switch (behavior) {
      case Behavior::isolated:
        if (begin > gap) on_piece(text.substr(gap, begin - gap));
        on_piece(text.substr(begin, end - begin));
        gap = end;
        break;
      case Behavior::merged_with_previous:
        on_piece(text.substr(gap, end - gap));
        gap = end;
        break;
      case Behavior::merged_with_next:
        if (begin > gap) on_piece(text.substr(gap, begin - gap));
        gap = begin;
        break;
    }
  });
  if (gap < text.size()) on_piece(text.substr(gap));
}

struct Regex {
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

  // Calls on_match(begin, end) with each non-empty match in `text`, in order.
  template <typename OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    TITAN_CHECK(md != nullptr, "pre_tokenizer: out of memory for PCRE2 match data");
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
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
      on_match(begin, end);
      pos = end;
    }
  }
};

}  // namespace

struct Pretokenizer::Step {
  enum class Kind { split, metaspace } kind = Kind::split;
  // split
  std::unique_ptr<Regex> regex;
  Behavior behavior = Behavior::isolated;
  // metaspace
  enum class Prepend { always, first, never } prepend = Prepend::always;
  std::string replacement;
  bool split_words = true;
};

namespace {

Behavior split_behavior(const std::string& name, const JsonPath& at) {
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  TITAN_CHECK(false, at.str(), ": Split behavior \"", name,
              "\" is not supported; titan reads Isolated, MergedWithPrevious and MergedWithNext");
  return Behavior::isolated;
}

}  // namespace

Pretokenizer::Pretokenizer(const nlohmann::json& config, const std::string& source) {
  const std::string where = source + ": pre_tokenizer";
  const JsonPath at{source, "pre_tokenizer"};
  if (config.is_null()) return;
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
  bool metaspace = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, step_at] = steps[i];
    const std::string type =
        json_fields::field<std::string>(json_fields::object(step, step_at), "type", step_at);
    auto s = std::make_unique<Step>();
    if (type == "Split") {
      s->behavior =
          split_behavior(json_fields::field_or<std::string>(step, "behavior", "", step_at), step_at);
      TITAN_CHECK(!json_fields::field_or(step, "invert", false, step_at), step_at.str(),
                  ": Split with invert = true is not supported");
      const nlohmann::json& p = json_fields::member(step, "pattern", step_at);
      TITAN_CHECK(p.is_object() && (p.contains("Regex") || p.contains("String")), step_at.str(),
                  ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}; got ", p.dump());
      bool literal = p.contains("String");
      const char* kind = literal ? "String" : "Regex";
      s->regex = std::make_unique<Regex>(json_fields::field<std::string>(p, kind, step_at / "pattern"),
                                         literal, source);
    } else if (type == "ByteLevel") {
      // The vocabulary is then spelled in the byte-level alphabet, so the text must reach the
      // model through ByteLevel, and no step may run after it on the translated text.
      TITAN_CHECK(i + 1 == steps.size(), where, " has ByteLevel before its last step");
      TITAN_CHECK(!metaspace, where, " has both Metaspace and ByteLevel; titan reads one or the other");
      // A space in front of every word would change the text the views cover.
      TITAN_CHECK(!json_fields::field_or(step, "add_prefix_space", false, step_at), step_at.str(),
                  ": ByteLevel with add_prefix_space = true is not supported");
      byte_level_ = true;
      if (!json_fields::field_or(step, "use_regex", true, step_at)) continue;
      s->regex = std::make_unique<Regex>(kGpt2Pattern, false, source);
    } else if (type == "Metaspace") {
      metaspace = true;
      s->kind = Step::Kind::metaspace;
      s->replacement = json_fields::field<std::string>(step, "replacement", step_at);
      TITAN_CHECK(!s->replacement.empty() && utf8_char_length(s->replacement, 0) == s->replacement.size(),
                  (step_at / "replacement").str(), ": must be one character; got \"", s->replacement, "\"");
      // Files from before prepend_scheme said add_prefix_space, which meant "always".
      const std::string scheme = json_fields::field_or<std::string>(
          step, "prepend_scheme",
          json_fields::field_or(step, "add_prefix_space", true, step_at) ? "always" : "never", step_at);
      if (scheme == "always") {
        s->prepend = Step::Prepend::always;
      } else if (scheme == "first") {
        s->prepend = Step::Prepend::first;
      } else {
        TITAN_CHECK(scheme == "never", (step_at / "prepend_scheme").str(), ": \"", scheme,
                    "\" is not a prepend scheme; Hugging Face knows always, first and never");
        s->prepend = Step::Prepend::never;
      }
      s->split_words = json_fields::field_or(step, "split", true, step_at);
    } else {
      TITAN_CHECK(false, step_at.str(), ": type ", type,
                  " is not supported; titan reads Split, ByteLevel, Metaspace and Sequence");
    }
    steps_.push_back(std::move(s));
  }
}

Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

void Pretokenizer::split(std::string_view text, bool at_start,
                         const std::function<void(std::string_view)>& on_word) const {
  if (text.empty()) return;
  split_from(0, text, at_start, on_word);
}

void Pretokenizer::split_from(size_t step, std::string_view text, bool at_start,
                              const std::function<void(std::string_view)>& on_word) const {
  if (step == steps_.size()) {
    on_word(text);
    return;
  }
  // A piece still begins the encoded text when it begins `text` and `text` did.
  auto next = [&](std::string_view whole) {
    return [&, whole](std::string_view piece) {
      split_from(step + 1, piece, at_start && piece.data() == whole.data(), on_word);
    };
  };
  const Step& s = *steps_[step];
  if (s.kind == Step::Kind::split) {
    cut(
        text, s.behavior, [&](auto&& on_match) { s.regex->for_each_match(text, on_match); }, next(text));
    return;
  }
  // Metaspace, as Hugging Face: spaces become the replacement first, so a text that began with
  // a space gets no second one in front.
  std::string word;
  word.reserve(text.size() + s.replacement.size());
  const bool prepend = s.prepend == Step::Prepend::always || (s.prepend == Step::Prepend::first && at_start);
  if (prepend && !text.starts_with(' ') && !text.starts_with(s.replacement)) word = s.replacement;
  for (char c : text) {
    if (c == ' ') {
      word += s.replacement;
    } else {
      word.push_back(c);
    }
  }
  const std::string_view w = word;
  if (!s.split_words) {
    split_from(step + 1, w, at_start, on_word);
    return;
  }
  auto each_replacement = [&](auto&& on_match) {
    for (size_t at = w.find(s.replacement); at != std::string_view::npos;
         at = w.find(s.replacement, at + s.replacement.size()))
      on_match(at, at + s.replacement.size());
  };
  cut(w, Behavior::merged_with_next, each_replacement, next(w));
}

}  // namespace titan::data
