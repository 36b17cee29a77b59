#include "titan/data/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

namespace titan::data {

namespace {

struct Alphabet {
  std::array<char32_t, 256> char_of_byte{};
  // Every character of the alphabet is below U+0100 + 256.
  std::array<int16_t, 512> byte_of_char{};

  Alphabet() {
    // Printable Latin-1 bytes stand for themselves; the others (controls, space, NBSP, soft
    // hyphen) take the code points from U+0100 up, in byte order, so no token shows whitespace.
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
    byte_of_char.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char32_t c = printable(b) ? static_cast<char32_t>(b) : next++;
      char_of_byte[b] = c;
      byte_of_char[c] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) {
    char32_t c = a.char_of_byte[b];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto u = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    char32_t c;
    if (u(i) < 0x80) {
      c = u(i++);
    } else if ((u(i) & 0xE0) == 0xC0 && i + 1 < text.size() && (u(i + 1) & 0xC0) == 0x80) {
      c = (static_cast<char32_t>(u(i) & 0x1F) << 6) | (u(i + 1) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are all outside the alphabet
    }
    if (c >= a.byte_of_char.size() || a.byte_of_char[c] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.byte_of_char[c]));
  }
  return out;
}

}  // namespace titan::data
