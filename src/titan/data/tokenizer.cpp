#include "titan/data/tokenizer.h"

#include <filesystem>

#include "titan/core/crc32c.h"
#include "titan/core/error.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/tokenizer/bpe_tokenizer.h"

namespace titan::data {

namespace fs = std::filesystem;

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string_view> texts) const {
  std::vector<std::vector<int32_t>> out;
  out.reserve(texts.size());
  for (std::string_view t : texts) out.push_back(encode(t));
  return out;
}

std::vector<int32_t> Tokenizer::encode_for_model(std::string_view, int64_t) const {
  TITAN_CHECK(false, description(), " has no fixed-length form for a text encoder (no post_processor, no pad "
              "token); set model.tokenizer_path to the text encoder's tokenizer.json folder");
  return {};
}

namespace {

class Bytes final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    return bytes_.encode(text, false, false);
  }
  std::string decode(std::span<const int32_t> ids) const override { return bytes_.decode(ids); }
  int32_t vocab_size() const override { return bytes_.vocab_size(); }
  std::optional<int32_t> bos_id() const override { return bytes_.bos_id(); }
  std::optional<int32_t> eos_id() const override { return bytes_.eos_id(); }
  std::string description() const override {
    return "byte tokenizer (" + std::to_string(vocab_size()) + " ids)";
  }
  // Its ids are fixed by this code, so a constant names them.
  uint32_t fingerprint() const override { return crc32c("titan byte tokenizer v1"); }

 private:
  ByteTokenizer bytes_;
};

class Bpe final : public Tokenizer {
 public:
  Bpe(BpeTokenizer bpe, std::string source) : bpe_(std::move(bpe)), source_(std::move(source)) {}
  std::vector<int32_t> encode(std::string_view text) const override { return bpe_.encode(text); }
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts) const override {
    return bpe_.encode_batch(texts);
  }
  std::vector<int32_t> encode_for_model(std::string_view text, int64_t length) const override {
    return bpe_.encode_for_model(text, length);
  }
  std::string decode(std::span<const int32_t> ids) const override { return bpe_.decode(ids); }
  int32_t vocab_size() const override { return bpe_.vocab_size(); }
  std::optional<int32_t> bos_id() const override { return bpe_.bos_id(); }
  std::optional<int32_t> eos_id() const override { return bpe_.eos_id(); }
  std::string description() const override {
    return "tokenizer " + source_ + " (" + (bpe_.byte_level() ? "byte-level" : "SentencePiece-style") +
           ", " + std::to_string(vocab_size()) + " ids)";
  }
  uint32_t fingerprint() const override { return bpe_.fingerprint(); }

 private:
  BpeTokenizer bpe_;
  std::string source_;
};

}  // namespace

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  if (path.empty()) return std::make_shared<Bytes>();
  fs::path p(path);
  if (p.is_relative() && !fs::exists(p) && fs::exists(fs::path(TITAN_SOURCE_DIR) / p))
    p = fs::path(TITAN_SOURCE_DIR) / p;
  TITAN_CHECK(fs::exists(p), "model.tokenizer_path: '", path, "' does not exist (looked in ",
              fs::current_path().string(), " and ", TITAN_SOURCE_DIR,
              "); name a folder holding tokenizer.json, or leave it empty for the byte tokenizer");
  return std::make_shared<Bpe>(BpeTokenizer::load(p), p.string());
}

}  // namespace titan::data
