#pragma once
// UTF-8 validation for the bad-data policy of datasets (tokenizers themselves take any bytes).
#include <cstddef>
#include <string_view>

namespace titan::data {

// The offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos when `text` is
// valid throughout.
size_t find_invalid_utf8(std::string_view text);

}  // namespace titan::data
