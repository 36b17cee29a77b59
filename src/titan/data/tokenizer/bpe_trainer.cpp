#include "titan/data/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <unordered_map>
#include <vector>

#include "titan/core/error.h"
#include "titan/data/tokenizer/bpe_model.h"
#include "titan/data/tokenizer/byte_level.h"
#include "titan/data/tokenizer/pretokenizer.h"

namespace titan::data {

namespace {

// Llama 3's: contractions, letters with one leading non-letter, numbers three digits at a time,
// punctuation runs, and whitespace kept apart from the word that follows.
constexpr std::string_view kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::ordered_json pre_tokenizer_config() {
  nlohmann::ordered_json split = {
      {"type", "Split"}, {"pattern", {{"Regex", kPattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

// A pair and its count when pushed; stale once the count has changed, and then pushed again with
// the current count when popped (counts only fall, except those of pairs a merge creates, which
// are pushed as they are made).
struct Candidate {
  int64_t count;
  uint64_t pair;
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

class Trainer {
 public:
  Trainer(std::vector<Word> words) : words_(std::move(words)) {
    for (int b = 0; b < 256; ++b) add_token(std::string(1, static_cast<char>(b)));
    for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) {
      count_pairs(w, +1);
      const std::vector<int32_t>& s = words_[w].symbols;
      for (size_t i = 0; i + 1 < s.size(); ++i) where_[token_pair_key(s[i], s[i + 1])].push_back(w);
    }
    for (const auto& [pair, count] : counts_) heap_.push({count, pair});
  }

  // Learns merges until there are `num_tokens` tokens or no pair occurs `min_frequency` times.
  void run(size_t num_tokens, int64_t min_frequency) {
    while (tokens_.size() < num_tokens && !heap_.empty()) {
      Candidate top = heap_.top();
      heap_.pop();
      auto it = counts_.find(top.pair);
      int64_t count = it == counts_.end() ? 0 : it->second;
      if (count != top.count) {
        if (count > 0) heap_.push({count, top.pair});
        continue;
      }
      if (count < min_frequency) break;
      merge(static_cast<int32_t>(top.pair >> 32), static_cast<int32_t>(top.pair & 0xFFFFFFFFu));
    }
  }

  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  int32_t add_token(std::string bytes) {
    auto [it, added] = ids_.emplace(bytes, static_cast<int32_t>(tokens_.size()));
    if (added) tokens_.push_back(std::move(bytes));
    return it->second;
  }

  void count_pairs(int32_t w, int64_t sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      uint64_t pair = token_pair_key(word.symbols[i], word.symbols[i + 1]);
      counts_[pair] += sign * word.count;
    }
  }

  void merge(int32_t left, int32_t right) {
    // Two merges can spell the same bytes ("ab"+"c", "a"+"bc"); the token is then shared.
    int32_t id = add_token(tokens_[left] + tokens_[right]);
    merges_.emplace_back(left, right);
    uint64_t merged_pair = token_pair_key(left, right);
    std::vector<int32_t> affected = std::move(where_[merged_pair]);
    where_.erase(merged_pair);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    std::vector<uint64_t> created;
    for (int32_t w : affected) {
      std::vector<int32_t>& s = words_[w].symbols;
      // Only this word's pairs change: its counts are taken out and put back once merged.
      count_pairs(w, -1);
      size_t out = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          s[out++] = id;
          ++i;
        } else {
          s[out++] = s[i];
        }
      }
      s.resize(out);
      count_pairs(w, +1);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != id && s[i + 1] != id) continue;
        uint64_t pair = token_pair_key(s[i], s[i + 1]);
        created.push_back(pair);
        where_[pair].push_back(w);
      }
    }
    std::sort(created.begin(), created.end());
    created.erase(std::unique(created.begin(), created.end()), created.end());
    for (uint64_t pair : created) heap_.push({counts_[pair], pair});
    counts_.erase(merged_pair);
  }

  std::vector<Word> words_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int64_t> counts_;
  // The words each pair occurs in; may list a word twice, or one the pair has left since.
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
  std::priority_queue<Candidate> heap_;
};

}  // namespace

nlohmann::ordered_json train_bpe(std::span<const std::string_view> texts, const BpeTrainerOptions& options) {
  TITAN_CHECK(options.vocab_size >= 258, "tokenizer train: vocab size ", options.vocab_size,
              " is too small; it holds the 256 bytes and the two specials at least");
  TITAN_CHECK(
      options.bos_token != options.eos_token && !options.bos_token.empty() && !options.eos_token.empty(),
      "tokenizer train: bos and eos must be two different, non-empty tokens");
  nlohmann::ordered_json pre_tokenizer = pre_tokenizer_config();
  Pretokenizer pretokenizer(pre_tokenizer, "tokenizer train");
  // Its pre-tokenizer has no Metaspace, so the words are views into the texts, which outlive them.
  std::unordered_map<std::string_view, int64_t> counts;
  for (std::string_view text : texts)
    pretokenizer.split(text, /*at_start=*/true, [&](std::string_view w) { ++counts[w]; });
  // In byte order, so that the ids (and the ties they break) do not depend on hashing.
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [text, count] : sorted)
    words.push_back({std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                          reinterpret_cast<const unsigned char*>(text.data()) + text.size()),
                     count});

  Trainer trainer(std::move(words));
  trainer.run(static_cast<size_t>(options.vocab_size) - 2, options.min_frequency);

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  const std::vector<std::string>& tokens = trainer.tokens();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[byte_level_encode(tokens[id])] = id;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  // "left right": byte-level tokens hold no space, and every version of Hugging Face reads it.
  for (const auto& [left, right] : trainer.merges())
    merges.push_back(byte_level_encode(tokens[left]) + " " + byte_level_encode(tokens[right]));
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (const std::string& special : {options.bos_token, options.eos_token}) {
    added.push_back({{"id", tokens.size() + added.size()},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

void save_trained_tokenizer(const nlohmann::ordered_json& tokenizer, const BpeTrainerOptions& options,
                            const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const nlohmann::ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                         {"bos_token", options.bos_token},
                                         {"eos_token", options.eos_token},
                                         {"add_bos_token", true},
                                         {"add_eos_token", false},
                                         {"clean_up_tokenization_spaces", false}};
  for (const auto& [name, doc] :
       {std::pair{"tokenizer.json", &tokenizer}, std::pair{"tokenizer_config.json", &config}}) {
    std::filesystem::path path = dir / name;
    std::ofstream out(path, std::ios::binary);
    out << doc->dump(2) << "\n";
    TITAN_CHECK(out.good(), "tokenizer train: cannot write ", path.string());
  }
}

}  // namespace titan::data
