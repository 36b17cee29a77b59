#include "titan/data/tokenizer/unigram_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/utf8.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

// How far below the lowest piece score Hugging Face scores an unknown character.
constexpr double kUnknownPenalty = 10.0;

}  // namespace

UnigramModel::UnigramModel(const nlohmann::json& model, const std::string& source) : trie_(1), source_(source) {
  const JsonPath at{source, "model"};
  const nlohmann::json& vocab = json_fields::array(json_fields::member(model, "vocab", at), at / "vocab");
  TITAN_CHECK(!vocab.empty() && vocab.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
              (at / "vocab").str(), ": a Unigram vocabulary needs between 1 and 2^31 - 1 pieces; found ",
              vocab.size());
  double min_score = std::numeric_limits<double>::infinity();
  pieces_.reserve(vocab.size());
  scores_.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const JsonPath piece_at = (at / "vocab")[i];
    const nlohmann::json& entry = vocab[i];
    TITAN_CHECK(entry.is_array() && entry.size() == 2, piece_at.str(), ": a Unigram piece is [text, score]; found ",
                json_fields::found(entry));
    pieces_.push_back(json_fields::as_string(entry[0], piece_at[0]));
    scores_.push_back(json_fields::as_number(entry[1], piece_at[1]));
    min_score = std::min(min_score, scores_.back());
    // A piece listed twice is found by its last id, as in Hugging Face.
    ids_.insert_or_assign(pieces_.back(), static_cast<int32_t>(i));
  }
  unk_score_ = min_score - kUnknownPenalty;
  for (const auto& [piece, id] : ids_) {
    int32_t node = 0;
    for (unsigned char b : piece) {
      auto& kids = trie_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), b, [](const auto& kid, unsigned char x) { return kid.first < x; });
      if (it != kids.end() && it->first == b) {
        node = it->second;
      } else {
        const auto child = static_cast<int32_t>(trie_.size());
        kids.insert(it, {b, child});
        trie_.emplace_back();  // invalidates `kids`, used no more
        node = child;
      }
    }
    if (node != 0) trie_[node].id = id;
  }
  const nlohmann::json& unk = json_fields::optional_member(model, "unk_id", at);
  if (!unk.is_null())
    unk_ = static_cast<int32_t>(json_fields::as_integer(unk, at / "unk_id", 0, size() - 1));
  byte_fallback_ = json_fields::field_or(model, "byte_fallback", false, at);
}

const std::string* UnigramModel::token(int32_t id) const {
  return id >= 0 && id < size() ? &pieces_[id] : nullptr;
}

std::optional<int32_t> UnigramModel::id_of(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void UnigramModel::push_unknown(std::string_view unknown, std::vector<int32_t>& out) const {
  if (std::optional<int32_t> id = id_of(unknown)) {
    out.push_back(*id);
    return;
  }
  if (byte_fallback_) {
    const size_t start = out.size();
    for (unsigned char b : unknown) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      std::optional<int32_t> id = id_of(name);
      if (!id) break;
      out.push_back(*id);
    }
    if (out.size() == start + unknown.size()) return;
    out.resize(start);
  }
  out.push_back(*unk_);
}

void UnigramModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  // best[i]: the best-scoring way to spell word[0, i) that ends in a piece starting at `start`.
  struct Best {
    double score = 0;
    int32_t id = -1;
    int64_t start = -1;
  };
  thread_local std::vector<Best> best;
  const size_t n = word.size();
  best.assign(n + 1, Best{});
  auto offer = [&](size_t end, size_t start, int32_t id, double score) {
    Best& b = best[end];
    // Ties keep the first offer: the earlier start, then the shorter piece, then unk.
    if (b.start < 0 || score > b.score) b = {score, id, static_cast<int64_t>(start)};
  };
  for (size_t start = 0; start < n;) {
    const size_t length = std::max<size_t>(utf8_char_length(word, start), 1);
    const double base = best[start].score;
    bool one_character_piece = false;
    int32_t node = 0;
    for (size_t i = start; i < n; ++i) {
      const auto& kids = trie_[node].children;
      const auto b = static_cast<unsigned char>(word[i]);
      auto it = std::lower_bound(kids.begin(), kids.end(), b, [](const auto& kid, unsigned char x) { return kid.first < x; });
      if (it == kids.end() || it->first != b) break;
      node = it->second;
      if (const int32_t id = trie_[node].id; id >= 0) {
        offer(i + 1, start, id, base + scores_[id]);
        one_character_piece |= i + 1 - start == length;
      }
    }
    if (!one_character_piece) {
      TITAN_CHECK(unk_.has_value(), source_, ": model: the Unigram vocabulary has no piece for the character at byte ",
                  start, " of the word '", word.substr(0, 100), "' and no unk_id to stand for it; set model.unk_id");
      offer(start + length, start, *unk_, base + unk_score_);
    }
    start += length;
  }
  // Back from the end; consecutive unknowns are fused into one stretch.
  const size_t first = out.size();
  size_t unknown_begin = 0, unknown_end = 0;
  auto flush_unknown = [&] {
    if (unknown_end == 0) return;
    const size_t at = out.size();
    push_unknown(word.substr(unknown_begin, unknown_end - unknown_begin), out);
    std::reverse(out.begin() + static_cast<std::ptrdiff_t>(at), out.end());
    unknown_end = 0;
  };
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    const auto start = static_cast<size_t>(b.start);
    if (unk_ && b.id == *unk_) {
      if (unknown_end == 0) unknown_end = end;
      unknown_begin = start;
    } else {
      flush_unknown();
      out.push_back(b.id);
    }
    end = start;
  }
  flush_unknown();
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

}  // namespace titan::data
