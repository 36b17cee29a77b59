#pragma once
// Added tokens (specials such as <|end_of_text|> and extras such as Qwen's <think>): found in the
// text before pre-tokenization, always as a whole, as Hugging Face does, by leftmost-longest match.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;     // skipped by decode(..., skip_special = true)
  bool normalized = false;  // matched in the normalized text rather than the raw one
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Cuts `text` into added tokens, reported as on_token(id), and the stretches between them,
  // reported as on_text(view) (never empty), in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t gap = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (!starts_[static_cast<unsigned char>(text[i])]) continue;
      auto [length, id] = longest_at(text, i);
      if (length == 0) continue;
      if (i > gap) on_text(text.substr(gap, i - gap));
      on_token(id);
      gap = i + length;
      i = gap - 1;
    }
    if (gap < text.size()) on_text(text.substr(gap));
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // (byte, node index), sorted by byte
    int32_t id = -1;                                          // the token ending here, if any
  };
  // The longest token starting at text[at] as (length, id); length 0 when none does.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t at) const;

  std::vector<Node> trie_;
  bool starts_[256] = {};  // bytes some token starts with: most text is skipped on this alone
};

}  // namespace titan::data
