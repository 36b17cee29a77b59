#include "titan/data/tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/data/tokenizer/byte_level.h"
#include "titan/data/utf8.h"

namespace titan::data {

using json_fields::JsonPath;

namespace {

// Words already merged, with their ids: text repeats its words, and a lookup costs far less than
// the merges. One cache per thread, so encoding in parallel takes no lock; it serves one model at
// a time and starts over when a thread switches model or the cache is full.
struct WordCache {
  static constexpr size_t kMaxWords = 1 << 17;
  static constexpr size_t kMaxWordBytes = 128;  // longer words are rare, and would crowd it

  uint64_t owner = 0;
  // Word -> (first, count) of its ids in `ids`.
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringViewHash, std::equal_to<>> index;
  std::vector<int32_t> ids;

  static WordCache& of(uint64_t owner) {
    thread_local WordCache cache;
    if (cache.owner != owner || cache.index.size() >= kMaxWords) {
      cache.index.clear();
      cache.ids.clear();
      cache.owner = owner;
    }
    return cache;
  }
};

std::atomic<uint64_t> next_cache_owner{1};

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& source, int32_t max_id, bool byte_level)
    : byte_level_(byte_level), cache_owner_(next_cache_owner++) {
  const std::string where = source + ": model";
  const JsonPath at{source, "model"};
  TITAN_CHECK(model.is_object() && json_fields::field_or<std::string>(model, "type", "", at) == "BPE", where,
              " must be of type BPE; got ",
              (model.is_object() ? model.value("type", nlohmann::json()) : model).dump().substr(0, 100));
  TITAN_CHECK(!model.contains("dropout") || model["dropout"].is_null() || model["dropout"] == 0, where,
              " has BPE dropout, which is for training and makes encoding random; titan encodes without it");
  ignore_merges_ = json_fields::field_or(model, "ignore_merges", false, at);
  byte_fallback_ = json_fields::field_or(model, "byte_fallback", false, at);
  TITAN_CHECK(!(byte_level_ && byte_fallback_), where,
              " has byte_fallback with a ByteLevel pre-tokenizer; byte-level BPE needs none");
  // The spelling of a token as the model holds it; nullopt when it cannot be.
  auto held = [&](const std::string& spelled) -> std::optional<std::string> {
    return byte_level_ ? byte_level_decode(spelled) : spelled;
  };
  auto affix = [&](const char* key) {
    const std::string spelled = json_fields::field_or<std::string>(model, key, "", at);
    std::optional<std::string> bytes = held(spelled);
    TITAN_CHECK(bytes.has_value(), (at / key).str(), ": '", spelled,
                "' is not spelled in the byte-level alphabet, which the ByteLevel pre-tokenizer needs");
    return *bytes;
  };
  prefix_ = affix("continuing_subword_prefix");
  suffix_ = affix("end_of_word_suffix");

  const nlohmann::json& vocab = json_fields::object(json_fields::member(model, "vocab", at), at / "vocab");
  for (const auto& [spelled, id_json] : vocab.items()) {
    std::optional<std::string> bytes = held(spelled);
    TITAN_CHECK(bytes.has_value(), where, " token '", spelled,
                "' is not spelled in the byte-level alphabet, which the ByteLevel pre-tokenizer needs");
    const auto id = static_cast<int32_t>(json_fields::as_integer(id_json, at / "vocab" / spelled, 0, max_id));
    if (static_cast<size_t>(id) >= tokens_.size()) {
      tokens_.resize(id + 1);
      present_.resize(id + 1);
    }
    tokens_[id] = *bytes;
    present_[id] = true;
    ids_.emplace(std::move(*bytes), id);
  }
  if (byte_level_) {
    for (int b = 0; b < 256; ++b) {
      std::optional<int32_t> id = id_of(std::string(1, static_cast<char>(b)));
      TITAN_CHECK(id.has_value(), where, " vocab lacks the token of byte ", b,
                  "; a byte-level vocabulary holds all 256 bytes");
      byte_ids_[b] = *id;
    }
  } else if (byte_fallback_) {
    // Some files lack a few (older Gemma's <0x09>, renamed "\t"): a character with such a byte
    // then goes to unk_token, as in Hugging Face.
    for (int b = 0; b < 256; ++b) {
      char fallback[8];
      std::snprintf(fallback, sizeof(fallback), "<0x%02X>", b);
      byte_ids_[b] = id_of(fallback).value_or(-1);
    }
  }
  {
    const nlohmann::json& unk = json_fields::optional_member(model, "unk_token", at);
    if (!unk.is_null()) {
      const std::string text = json_fields::as_string(unk, at / "unk_token");
      unk_ = id_of(held(text).value_or(text));
      TITAN_CHECK(unk_.has_value(), (at / "unk_token").str(), ": '", text,
                  "' is not in the vocab; name a token of model.vocab, or null for none");
    }
    fuse_unk_ = json_fields::field_or(model, "fuse_unk", false, at);
  }

  const nlohmann::json& merges = json_fields::array(json_fields::member(model, "merges", at), at / "merges");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges[rank];
    // Older files write a merge as "left right", newer ones as ["left", "right"].
    std::string left, right;
    if (m.is_string()) {
      std::string s = m.get<std::string>();
      size_t space = s.find(' ');
      TITAN_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, where, " merge ",
                  rank, " '", s, "' is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      TITAN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where, " merge ",
                  rank, " is neither \"left right\" nor [\"left\", \"right\"]: ", m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    // As Hugging Face: the merged token is the right one without the prefix's length.
    const std::string right_rest = right.substr(std::min(right.size(), prefix_.size()));
    std::optional<int32_t> l = id_of(held(left).value_or("")), r = id_of(held(right).value_or("")),
                           merged = id_of(held(left + right_rest).value_or(""));
    TITAN_CHECK(l && r && merged, where, " merge ", rank, " (", left, " ", right,
                ") names a token missing from the vocab");
    // A pair listed twice takes its last rank, as in Hugging Face.
    merges_.insert_or_assign(token_pair_key(*l, *r), Merge{static_cast<int32_t>(rank), *merged});
  }
}

const std::string* BpeModel::token(int32_t id) const {
  if (id < 0 || id >= size() || !present_[id]) return nullptr;
  return &tokens_[id];
}

std::optional<int32_t> BpeModel::id_of(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(token_pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (byte_level_ && word.size() == 1 && suffix_.empty()) {
    out.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto it = ids_.find(word); it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > WordCache::kMaxWordBytes) {
    merge(word, out);
    return;
  }
  WordCache& cache = WordCache::of(cache_owner_);
  if (auto it = cache.index.find(word); it != cache.index.end()) {
    auto [first, count] = it->second;
    out.insert(out.end(), cache.ids.begin() + first, cache.ids.begin() + first + count);
    return;
  }
  size_t start = out.size();
  merge(word, out);
  cache.index.emplace(std::string(word),
                      std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(cache.ids.size()),
                                                    static_cast<uint32_t>(out.size() - start)));
  cache.ids.insert(cache.ids.end(), out.begin() + start, out.end());
}

void BpeModel::symbols_of(std::string_view word, std::vector<int32_t>& ids) const {
  ids.clear();
  const bool affixed = !prefix_.empty() || !suffix_.empty();
  if (byte_level_ && !affixed) {
    for (unsigned char b : word) ids.push_back(byte_ids_[b]);
    return;
  }
  bool unk_pending = false;
  std::string symbol;
  for (size_t i = 0; i < word.size();) {
    // Byte-level words are in bytes, each the alphabet's character for it.
    const size_t length = byte_level_ ? 1 : std::max<size_t>(utf8_char_length(word, i), 1);
    const std::string_view c = word.substr(i, length);
    std::string_view lookup = c;
    if (affixed) {
      symbol.assign(i > 0 ? prefix_ : "").append(c).append(i + length == word.size() ? suffix_ : "");
      lookup = symbol;
    }
    i += length;
    if (auto it = ids_.find(lookup); it != ids_.end()) {
      if (unk_pending) ids.push_back(*unk_);
      unk_pending = false;
      ids.push_back(it->second);
    } else if (byte_fallback_ && std::all_of(c.begin(), c.end(), [&](char b) {
                 return byte_ids_[static_cast<unsigned char>(b)] >= 0;
               })) {
      // As Hugging Face: a pending unk is not put out first, and so follows these bytes.
      for (unsigned char b : c) ids.push_back(byte_ids_[b]);
    } else if (unk_) {
      if (unk_pending && !fuse_unk_) ids.push_back(*unk_);
      unk_pending = true;
    }
  }
  if (unk_pending) ids.push_back(*unk_);
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& out) const {
  // The word as a linked list of symbols (a merge joins a symbol with its right neighbour, which
  // drops out), and a min-heap of candidate merges by (rank, position). An entry goes stale when
  // either of its symbols has changed since; it is then skipped when popped.
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<int32_t> first;
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols_of(word, first);
  const int32_t n = static_cast<int32_t>(first.size());
  if (n == 0) return;
  symbols.resize(n);
  heap.clear();
  auto push = [&](int32_t pos) {
    const Symbol& s = symbols[pos];
    if (s.next < 0) return;
    if (const Merge* m = find_merge(s.id, symbols[s.next].id)) {
      heap.push_back({m->rank, pos});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (int32_t i = 0; i < n; ++i) symbols[i] = {first[i], i - 1, i + 1 < n ? i + 1 : -1};
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    Candidate c = heap.back();
    heap.pop_back();
    Symbol& s = symbols[c.pos];
    if (s.id < 0 || s.next < 0) continue;
    Symbol& right = symbols[s.next];
    const Merge* m = find_merge(s.id, right.id);
    if (m == nullptr || m->rank != c.rank) continue;
    s.id = m->id;
    right.id = -1;
    s.next = right.next;
    if (s.next >= 0) symbols[s.next].prev = c.pos;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace titan::data
