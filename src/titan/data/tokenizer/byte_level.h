#pragma once
// GPT-2's byte-level alphabet: each of the 256 bytes stands for one printable Unicode character,
// so that a vocabulary of arbitrary byte strings can be stored as JSON text. tokenizer.json files
// spell their tokens and merges in this alphabet; titan works on raw bytes and translates only
// when it reads or writes such a file.
#include <optional>
#include <string>
#include <string_view>

namespace titan::data {

// `bytes` spelled in the alphabet (UTF-8).
std::string byte_level_encode(std::string_view bytes);

// The bytes that `text` spells; nullopt when a character of `text` is outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace titan::data
