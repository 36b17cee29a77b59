#include "titan/data/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <cstdint>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"

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
    TITAN_CHECK(
        p.is_object() && p.contains("String") && p["String"].is_string() && p["String"] != "",
        (at / "pattern").str(), ": Replace pattern ", p.dump().substr(0, 200),
        " is not supported; titan reads a non-empty {\"String\": ...} (a Regex pattern it cannot honour)");
    steps_.push_back({Step::Kind::replace, p["String"].get<std::string>(),
                      json_fields::field<std::string>(config, "content", at)});
  } else {
    TITAN_CHECK(false, at.str(), ": normalizer ", config.dump().substr(0, 300),
                " is not supported; titan reads null, NFC, Prepend, Replace with a String pattern, and "
                "Sequences of them");
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
    }
    if (changed) {
      scratch.swap(next);
      current = scratch;
    }
  }
  return current;
}

}  // namespace titan::data
