#include "titan/data/tokenizer/added_tokens.h"

#include <algorithm>

namespace titan::data {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : trie_(1) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    int32_t node = 0;
    for (unsigned char b : t.content) {
      auto& kids = trie_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), b,
                                 [](const auto& kid, unsigned char x) { return kid.first < x; });
      if (it != kids.end() && it->first == b) {
        node = it->second;
      } else {
        int32_t child = static_cast<int32_t>(trie_.size());
        kids.insert(it, {b, child});
        trie_.emplace_back();  // invalidates `kids`, used no more
        node = child;
      }
    }
    trie_[node].id = t.id;
    starts_[static_cast<unsigned char>(t.content[0])] = true;
  }
}

std::pair<size_t, int32_t> AddedTokenMatcher::longest_at(std::string_view text, size_t at) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto& kids = trie_[node].children;
    unsigned char b = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(kids.begin(), kids.end(), b,
                               [](const auto& kid, unsigned char x) { return kid.first < x; });
    if (it == kids.end() || it->first != b) break;
    node = it->second;
    if (trie_[node].id >= 0) best = {i + 1 - at, trie_[node].id};
  }
  return best;
}

}  // namespace titan::data
