#include "titan/data/tokenizer/pretokenizer.h"

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/tokenizer/regex.h"
#include "titan/data/utf8.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

// What ByteLevel splits by when use_regex is set (GPT-2's pattern).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// How a Split keeps its delimiters: as words of their own, joined to the word before or after,
// or not at all.
enum class Behavior { isolated, merged_with_previous, merged_with_next, removed };

// Cuts `text` at the matches for_each_match reports (as on_match(begin, end), in order, none
// empty) and calls on_piece with each piece, as Hugging Face's SplitDelimiterBehavior does. The
// delimiters are the matches, or with `invert` the stretches between them: MergedWithPrevious cuts
// after every delimiter, MergedWithNext before every delimiter, Removed keeps only what is not one.
template <typename ForEachMatch, typename OnPiece>
void cut(std::string_view text, Behavior behavior, bool invert, ForEachMatch&& for_each_match,
         OnPiece&& on_piece) {
  size_t gap = 0;      // where the piece being gathered begins
  size_t covered = 0;  // where the last match ended
  auto segment = [&](size_t begin, size_t end, bool delimiter) {
    switch (behavior) {
      case Behavior::isolated: on_piece(text.substr(begin, end - begin)); break;
      case Behavior::removed:
        if (!delimiter) on_piece(text.substr(begin, end - begin));
        break;
      case Behavior::merged_with_previous:
        if (delimiter) {
          on_piece(text.substr(gap, end - gap));
          gap = end;
        }
        break;
      case Behavior::merged_with_next:
        if (delimiter) {
          if (begin > gap) on_piece(text.substr(gap, begin - gap));
          gap = begin;
        }
        break;
    }
  };
  for_each_match([&](size_t begin, size_t end) {
    if (begin > covered) segment(covered, begin, invert);
    segment(begin, end, !invert);
    covered = end;
  });
  if (covered < text.size()) segment(covered, text.size(), invert);
  const bool gathers = behavior == Behavior::merged_with_previous || behavior == Behavior::merged_with_next;
  if (gathers && gap < text.size()) on_piece(text.substr(gap));
}

}  // namespace

struct Pretokenizer::Step {
  enum class Kind { split, metaspace } kind = Kind::split;
  // split
  std::unique_ptr<Regex> regex;
  Behavior behavior = Behavior::isolated;
  bool invert = false;
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
  if (name == "Removed") return Behavior::removed;
  TITAN_CHECK(false, at.str(), ": Split behavior \"", name,
              "\" is not supported; titan reads Isolated, MergedWithPrevious, MergedWithNext and Removed");
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
      s->invert = json_fields::field_or(step, "invert", false, step_at);
      const nlohmann::json& p = json_fields::member(step, "pattern", step_at);
      TITAN_CHECK(p.is_object() && (p.contains("Regex") || p.contains("String")), step_at.str(),
                  ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}; got ", p.dump());
      bool literal = p.contains("String");
      const char* kind = literal ? "String" : "Regex";
      s->regex = std::make_unique<Regex>(json_fields::field<std::string>(p, kind, step_at / "pattern"),
                                         literal, where);
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
      s->regex = std::make_unique<Regex>(kGpt2Pattern, false, where);
    } else if (type == "WhitespaceSplit") {
      // Words are the runs of Unicode White_Space-free text, as Rust's char::is_whitespace sees it.
      s->regex = std::make_unique<Regex>("\\s+", false, where);
      s->behavior = Behavior::removed;
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
                  " is not supported; titan reads Split, ByteLevel, Metaspace, WhitespaceSplit and Sequence");
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
        text, s.behavior, s.invert, [&](auto&& on_match) { s.regex->for_each_match(text, on_match); },
        next(text));
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
  cut(w, Behavior::merged_with_next, false, each_replacement, next(w));
}

}  // namespace titan::data
