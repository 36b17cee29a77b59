#pragma once
// UTF-8 validation for the bad-data policy of datasets (tokenizers themselves take any bytes), and
// the character steps of tokenizers that work on characters.
#include <cstddef>
#include <string_view>

namespace titan::data {

// The offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos when `text` is
// valid throughout.
size_t find_invalid_utf8(std::string_view text);

// The length (1 to 4) of the well-formed UTF-8 character that starts at text[at], or 0 when the
// byte there starts none (it is a stray continuation byte, or its sequence is cut short,
// overlong, a surrogate or above U+10FFFF). `at` must lie inside `text`.
size_t utf8_char_length(std::string_view text, size_t at);

}  // namespace titan::data
