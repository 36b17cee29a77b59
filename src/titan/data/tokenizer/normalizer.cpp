#include "titan/data/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <cstdint>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"

namespace titan::data {

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

}  // namespace

Normalizer::Normalizer(const nlohmann::json& config, const std::string& source) {
  if (config.is_null()) return;
  std::string type = config.is_object()
                         ? json_fields::field_or<std::string>(config, "type", "", {source, "normalizer"})
                         : "";
  TITAN_CHECK(type == "NFC", source, ": normalizer ", config.dump().substr(0, 300),
              " is not supported; titan reads null and NFC");
  nfc_ = true;
}

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  if (!nfc_) return text;
  TITAN_CHECK(text.size() <= static_cast<size_t>(INT32_MAX), "NFC normalization: a ", text.size(),
              "-byte text is past ICU's 2 GiB limit; encode it in pieces");
  // Most text is already NFC, and checking is much cheaper than rewriting.
  UErrorCode status = U_ZERO_ERROR;
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (nfc().isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  scratch.clear();
  icu::StringByteSink<std::string> sink(&scratch, static_cast<int32_t>(text.size()));
  nfc().normalizeUTF8(0, piece, sink, nullptr, status);
  TITAN_CHECK(U_SUCCESS(status), "NFC normalization of a ", text.size(),
              "-byte text failed: ", u_errorName(status));
  return scratch;
}

}  // namespace titan::data
