#pragma once
// SentencePiece's normalization rules as tokenizer.json's Precompiled normalizer holds them: a
// base64 blob of [u32 trie size in bytes][the trie: darts-clone double-array units][the
// normalized strings, each ended by a NUL]. The trie maps a byte string to the offset of what it
// becomes. Applied as Hugging Face's Precompiled normalizer does (normalizers/precompiled.rs).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class PrecompiledCharsmap {
 public:
  // `base64` is the "precompiled_charsmap" field; `where` names it in errors.
  PrecompiledCharsmap(std::string_view base64, const std::string& where);

  // `text` normalized, appended to `out`. Each extended grapheme cluster shorter than 6 bytes is
  // replaced whole when the trie knows a prefix of it; otherwise each of its characters is
  // replaced by its own rule, or kept. Bytes that are not valid UTF-8 are kept.
  void apply(std::string_view text, std::string& out) const;

 private:
  // What the first (shortest) key that is a prefix of `text` becomes; false when none is.
  bool transform(std::string_view text, std::string_view& to) const;
  void apply_characters(std::string_view text, std::string& out) const;

  std::vector<uint32_t> units_;
  std::string normalized_;
};

}  // namespace titan::data
