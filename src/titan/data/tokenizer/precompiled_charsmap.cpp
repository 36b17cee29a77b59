#include "titan/data/tokenizer/precompiled_charsmap.h"

#include <unicode/brkiter.h>
#include <unicode/utext.h>

#include <algorithm>
#include <memory>

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::data {

namespace {

std::string decode_base64(std::string_view text, const std::string& where) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const int v = value(text[i]);
    TITAN_CHECK(v >= 0, where, ": not base64: character ", i, " is '", text[i],
                "'; the charsmap is SentencePiece's precompiled_charsmap in standard base64");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if ((count += 6) >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

// A darts-clone unit's fields.
bool has_leaf(uint32_t unit) { return ((unit >> 8) & 1) != 0; }
uint32_t value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view base64, const std::string& where) {
  const std::string blob = decode_base64(base64, where);
  TITAN_CHECK(blob.size() >= 4, where, ": the charsmap holds ", blob.size(),
              " bytes, fewer than its 4-byte trie size; it is not a SentencePiece precompiled_charsmap");
  const uint32_t trie_bytes = static_cast<uint8_t>(blob[0]) | static_cast<uint8_t>(blob[1]) << 8 |
                              static_cast<uint8_t>(blob[2]) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(blob[3])) << 24;
  TITAN_CHECK(trie_bytes % 4 == 0 && trie_bytes >= 4 && trie_bytes <= blob.size() - 4, where,
              ": the charsmap's trie size ", trie_bytes, " does not fit its ", blob.size() - 4,
              " bytes (a positive multiple of 4 is expected); it is not a SentencePiece precompiled_charsmap");
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto* b = reinterpret_cast<const uint8_t*>(blob.data() + 4 + 4 * i);
    units_[i] = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
  }
  normalized_ = blob.substr(4 + trie_bytes);
  TITAN_CHECK(find_invalid_utf8(normalized_) == std::string::npos, where,
              ": the charsmap's normalized strings are not valid UTF-8");
}

bool PrecompiledCharsmap::transform(std::string_view text, std::string_view& to) const {
  // A malformed trie may point anywhere: every position is checked before it is read.
  size_t node = offset(units_[0]);
  for (unsigned char c : text) {
    if (c == 0) return false;
    node ^= c;
    if (node >= units_.size() || label(units_[node]) != c) return false;
    const bool leaf = has_leaf(units_[node]);
    node ^= offset(units_[node]);
    if (node >= units_.size()) return false;
    if (leaf) {
      const size_t begin = value(units_[node]);
      if (begin > normalized_.size()) return false;
      const size_t end = normalized_.find('\0', begin);
      to = std::string_view(normalized_).substr(begin, end == std::string::npos ? end : end - begin);
      return true;
    }
  }
  return false;
}

void PrecompiledCharsmap::apply_characters(std::string_view text, std::string& out) const {
  for (size_t i = 0; i < text.size();) {
    const size_t length = std::max<size_t>(utf8_char_length(text, i), 1);
    std::string_view to;
    if (transform(text.substr(i, length), to)) {
      out.append(to);
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
}

void PrecompiledCharsmap::apply(std::string_view text, std::string& out) const {
  TITAN_CHECK(text.size() <= static_cast<size_t>(INT32_MAX), "Precompiled normalizer: a ", text.size(),
              "-byte text is past ICU's 2 GiB limit; encode it in pieces");
  // Graphemes by ICU's rules (Unicode's extended grapheme clusters, as Rust's unicode-segmentation).
  UErrorCode status = U_ZERO_ERROR;
  thread_local std::unique_ptr<icu::BreakIterator> graphemes(
      icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
  TITAN_CHECK(graphemes != nullptr && U_SUCCESS(status), "ICU has no grapheme break iterator: ",
              u_errorName(status));
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<UText, decltype(&utext_close)> owner(utext, &utext_close);
  graphemes->setText(utext, status);
  TITAN_CHECK(U_SUCCESS(status), "Precompiled normalizer: ICU cannot read a ", text.size(),
              "-byte text: ", u_errorName(status));
  for (int32_t begin = graphemes->first(), end = graphemes->next(); end != icu::BreakIterator::DONE;
       begin = end, end = graphemes->next()) {
    const std::string_view grapheme = text.substr(begin, end - begin);
    std::string_view to;
    if (grapheme.size() < 6 && transform(grapheme, to)) {
      out.append(to);
    } else {
      apply_characters(grapheme, out);
    }
  }
}

}  // namespace titan::data
