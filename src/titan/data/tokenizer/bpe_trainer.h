#pragma once
// Trains a byte-level BPE tokenizer and writes it as Hugging Face files: tokenizer.json (Llama 3's
// pre-tokenizer regex, the 256 bytes, the learned merges, then the special tokens) and
// tokenizer_config.json (bos and eos), which BpeTokenizer::load and Hugging Face tokenizers read.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace titan::data {

struct BpeTrainerOptions {
  // Of the whole tokenizer: 256 bytes + merges + the two specials. Training stops sooner when no
  // pair of tokens occurs min_frequency times.
  int32_t vocab_size = 2048;
  int64_t min_frequency = 2;
  std::string bos_token = "<|begin_of_text|>";
  std::string eos_token = "<|end_of_text|>";
};

// The tokenizer.json document learned from `texts`, with merges chosen by pair frequency over
// the pre-tokenized words (ties go to the pair of smaller ids, so the result is reproducible).
nlohmann::ordered_json train_bpe(std::span<const std::string_view> texts, const BpeTrainerOptions& options);

// Writes `tokenizer` (from train_bpe) as dir/tokenizer.json, and dir/tokenizer_config.json naming
// options' bos and eos; creates `dir` if needed.
void save_trained_tokenizer(const nlohmann::ordered_json& tokenizer, const BpeTrainerOptions& options,
                            const std::filesystem::path& dir);

}  // namespace titan::data
