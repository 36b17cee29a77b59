#pragma once
// What datasets, the trainer and generation need of a tokenizer, whichever kind the config names:
// model.tokenizer_path empty means the byte tokenizer, else a Hugging Face tokenizer.json (a
// folder holding one, or the file): byte-level BPE (Llama 3, Qwen, CLIP), SentencePiece-style BPE
// (Llama 2, Mistral, Gemma) or Unigram (T5), told apart by the file (data/tokenizer/bpe_tokenizer.h).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text`, no special tokens added.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // encode() of each text; in parallel where the tokenizer is worth it.
  virtual std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts) const;
  // A text encoder's fixed-length input (T5's, CLIP's): the ids with the special tokens the
  // tokenizer.json's post_processor adds, truncated to `length` keeping them, then padded with the
  // pad token, as transformers' tokenizer(text, padding="max_length", max_length=length,
  // truncation=True).input_ids. Throws for a tokenizer that has no such form.
  virtual std::vector<int32_t> encode_for_model(std::string_view text, int64_t length) const;
  // Special tokens as their text. Throws on an id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // For log lines: what it is and where it came from.
  virtual std::string description() const = 0;
  // The same ids for the same text exactly when the fingerprints agree (a CRC-32C of the files
  // that define the ids), so token shards can be checked against the tokenizer a run trains with.
  virtual uint32_t fingerprint() const = 0;
};

// `path` empty: the byte tokenizer. Otherwise a Hugging Face tokenizer.json folder or file; a
// relative path that does not exist from the working directory is also looked up in the source
// tree, as bundled data is.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path);

}  // namespace titan::data
