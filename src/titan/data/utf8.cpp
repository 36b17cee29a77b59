#include "titan/data/utf8.h"

#include <cstdint>
#include <cstring>

namespace titan::data {

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Corpora are mostly ASCII: skip eight such bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const size_t len = utf8_char_length(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

size_t utf8_char_length(std::string_view text, size_t at) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char c = s[at];
  if (c < 0x80) return 1;
  // The length the lead byte announces, and the range its first continuation byte must lie in
  // (narrower than 80..BF where the lead alone would allow an overlong form, a surrogate or a
  // code point above U+10FFFF).
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (at + len > text.size()) return 0;
  if (s[at + 1] < lo || s[at + 1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((s[at + k] & 0xC0) != 0x80) return 0;
  return len;
}

}  // namespace titan::data
