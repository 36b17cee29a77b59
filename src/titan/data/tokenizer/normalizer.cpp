#include "titan/data/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cstdint>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/tokenizer/precompiled_charsmap.h"
#include "titan/data/tokenizer/regex.h"
#include "titan/data/utf8.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

const icu::Normalizer2& nfc() {
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    TITAN_CHECK(U_SUCCESS(status), "ICU has no NFC normalizer: ", u_errorName(status));
    return n;
  }();
  return *instance;
}

// `text` in NFC into `out`; false when it already is, leaving `out` alone.
bool apply_nfc(std::string_view text, std::string& out) {
  TITAN_CHECK(text.size() <= static_cast<size_t>(INT32_MAX), "NFC normalization: a ", text.size(),
              "-byte text is past ICU's 2 GiB limit; encode it in pieces");
  // Most text is already NFC, and checking is much cheaper than rewriting.
  UErrorCode status = U_ZERO_ERROR;
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (nfc().isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return false;
  status = U_ZERO_ERROR;
  out.clear();
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  nfc().normalizeUTF8(0, piece, sink, nullptr, status);
  TITAN_CHECK(U_SUCCESS(status), "NFC normalization of a ", text.size(),
              "-byte text failed: ", u_errorName(status));
  return true;
}

// Every `pattern` in `text` (left to right, not overlapping) replaced by `content`, into `out`;
// false when there is none, leaving `out` alone.
bool apply_replace(std::string_view text, std::string_view pattern, std::string_view content,
                   std::string& out) {
  size_t hit = text.find(pattern);
  if (hit == std::string_view::npos) return false;
  out.clear();
  size_t from = 0;
  for (; hit != std::string_view::npos; hit = text.find(pattern, from)) {
    out.append(text.substr(from, hit - from)).append(content);
    from = hit + pattern.size();
  }
  out.append(text.substr(from));
  return true;
}

// Every match of `regex` in `text` replaced by `content`, into `out`; false when there is none.
bool apply_replace_regex(std::string_view text, const Regex& regex, std::string_view content, std::string& out) {
  size_t from = 0;
  bool any = false;
  regex.for_each_match(text, [&](size_t begin, size_t end) {
    if (!any) out.clear();
    any = true;
    out.append(text.substr(from, begin - from)).append(content);
    from = end;
  });
  if (any) out.append(text.substr(from));
  return any;
}

char32_t decode_utf8(std::string_view c) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(c[i])); };
  switch (c.size()) {
    case 1: return b(0);
    case 2: return (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    case 3: return (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    default: return (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
  }
}

// Each character lowercased on its own, as Rust's char::to_lowercase (Unicode's full mapping,
// "İ" -> "i̇", without the context rules such as final sigma), into `out`.
bool apply_lowercase(std::string_view text, std::string& out) {
  out.clear();
  out.reserve(text.size());
  bool changed = false;
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_char_length(text, i);
    if (length <= 1) {
      const char c = text[i];
      const char lower = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
      changed |= lower != c;
      out.push_back(lower);
      ++i;
      continue;
    }
    UChar one[2], lower[8];
    int32_t n = 0;
    U16_APPEND_UNSAFE(one, n, decode_utf8(text.substr(i, length)));
    UErrorCode status = U_ZERO_ERROR;
    const int32_t lower_length = u_strToLower(lower, 8, one, n, "", &status);
    if (U_FAILURE(status) || (lower_length == n && std::equal(one, one + n, lower))) {
      out.append(text.substr(i, length));
    } else {
      changed = true;
      icu::UnicodeString(lower, lower_length).toUTF8String(out);
    }
    i += length;
  }
  return changed;
}

bool is_white_space_at(std::string_view text, size_t at, size_t length) {
  return length > 0 && u_isUWhiteSpace(static_cast<UChar32>(decode_utf8(text.substr(at, length))));
}

// `text` without its leading and/or trailing Unicode White_Space, into `out`.
bool apply_strip(std::string_view text, bool left, bool right, std::string& out) {
  size_t begin = 0, end = text.size();
  if (left) {
    for (size_t length; begin < end && is_white_space_at(text, begin, length = utf8_char_length(text, begin));)
      begin += length;
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      const size_t length = utf8_char_length(text, start);
      if (length != end - start || !is_white_space_at(text, start, length)) break;
      end = start;
    }
  }
  if (begin == 0 && end == text.size()) return false;
  out.assign(text.substr(begin, end - begin));
  return true;
}

}  // namespace

Normalizer::Normalizer(const nlohmann::json& config, const std::string& source) {
  if (!config.is_null()) add(config, source, "normalizer");
}

void Normalizer::add(const nlohmann::json& config, const std::string& source, const std::string& path) {
  const JsonPath at{source, path};
  const std::string type =
      config.is_object() ? json_fields::field_or<std::string>(config, "type", "", at) : "";
  if (type == "Sequence") {
    const nlohmann::json& list =
        json_fields::array(json_fields::member(config, "normalizers", at), at / "normalizers");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], source, (at / "normalizers")[i].path);
  } else if (type == "NFC") {
    steps_.push_back({Step::Kind::nfc, "", ""});
  } else if (type == "Prepend") {
    steps_.push_back({Step::Kind::prepend, "", json_fields::field<std::string>(config, "prepend", at)});
  } else if (type == "Replace") {
    const nlohmann::json& p = json_fields::member(config, "pattern", at);
    TITAN_CHECK(p.is_object() && ((p.contains("String") && p["String"].is_string() && p["String"] != "") ||
                                   (p.contains("Regex") && p["Regex"].is_string() && p["Regex"] != "")),
                (at / "pattern").str(), ": Replace pattern ", p.dump().substr(0, 200),
                " is not supported; titan reads a non-empty {\"String\": ...} or {\"Regex\": ...}");
    Step step{Step::Kind::replace, "", json_fields::field<std::string>(config, "content", at)};
    if (p.contains("Regex")) {
      step.kind = Step::Kind::replace_regex;
      step.regex = std::make_shared<const Regex>(
          json_fields::field<std::string>(p, "Regex", at / "pattern"), false, (at / "pattern").str());
    } else {
      step.pattern = p["String"].get<std::string>();
    }
    steps_.push_back(std::move(step));
  } else if (type == "Lowercase") {
    steps_.push_back({Step::Kind::lowercase, "", ""});
  } else if (type == "Strip") {
    Step step{Step::Kind::strip, "", ""};
    step.left = json_fields::field_or(config, "strip_left", true, at);
    step.right = json_fields::field_or(config, "strip_right", true, at);
    steps_.push_back(std::move(step));
  } else if (type == "Precompiled") {
    Step step{Step::Kind::precompiled, "", ""};
    step.charsmap = std::make_shared<const PrecompiledCharsmap>(
        json_fields::field<std::string>(config, "precompiled_charsmap", at), (at / "precompiled_charsmap").str());
    steps_.push_back(std::move(step));
  } else {
    TITAN_CHECK(false, at.str(), ": normalizer ", config.dump().substr(0, 300),
                " is not supported; titan reads null, NFC, Prepend, Replace (String or Regex pattern), "
                "Lowercase, Strip, Precompiled, and Sequences of them");
  }
}

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  std::string_view current = text;
  std::string next;
  for (const Step& step : steps_) {
    bool changed = false;
    switch (step.kind) {
      case Step::Kind::nfc: changed = apply_nfc(current, next); break;
      case Step::Kind::prepend:
        // As Hugging Face: an empty text stays empty.
        if (!current.empty()) {
          next.assign(step.content).append(current);
          changed = true;
        }
        break;
      case Step::Kind::replace: changed = apply_replace(current, step.pattern, step.content, next); break;
      case Step::Kind::replace_regex:
        changed = apply_replace_regex(current, *step.regex, step.content, next);
        break;
      case Step::Kind::lowercase: changed = apply_lowercase(current, next); break;
      case Step::Kind::strip: changed = apply_strip(current, step.left, step.right, next); break;
      case Step::Kind::precompiled:
        next.clear();
        step.charsmap->apply(current, next);
        changed = true;
        break;
    }
    if (changed) {
      scratch.swap(next);
      current = scratch;
    }
  }
  return current;
}

}  // namespace titan::data
