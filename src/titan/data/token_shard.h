#pragma once
// Token shards: a corpus tokenized once (`titan tokenize`) and memory-mapped by every later run.
// A shard file (*.tok) is a 64-byte header, then the ids as little-endian uint32:
//   0  "TITANTOK"        8  u32 version (1)       12 u32 vocab_size     16 u64 num_tokens
//   24 i32 bos (-1: none) 28 i32 eos (-1: none)   32 u32 tokenizer fingerprint
//   36 u32 CRC-32C of bytes [0, 36)               40 zeros up to 64
// The ids are documents packed as the trainer packs text ([bos] ids eos, see pack_document), so a
// shard stream and the same text tokenized at start-up are the same stream.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "titan/core/file_io.h"

namespace titan::data {

// What the ids of a shard mean: the tokenizer that made them.
struct TokenShardInfo {
  int32_t vocab_size = 0;
  int32_t bos = -1;
  int32_t eos = -1;
  uint32_t tokenizer_fingerprint = 0;
  bool operator==(const TokenShardInfo&) const = default;
};

inline constexpr const char* kTokenShardExtension = ".tok";

class TokenShard {
 public:
  // Maps the file and checks it: header, size (a truncated shard is an error, naming how many
  // bytes are missing) and every id below vocab_size. Errors name the file.
  static std::shared_ptr<const TokenShard> open(const std::filesystem::path& path);

  const TokenShardInfo& info() const { return info_; }
  int64_t num_tokens() const { return num_tokens_; }
  // uint32 on disk, each checked below vocab_size (< 2^31) at open, so readable as int32.
  const int32_t* ids() const { return ids_; }
  const std::filesystem::path& path() const { return file_.path(); }

  explicit TokenShard(const std::filesystem::path& path);

 private:
  MappedFile file_;
  TokenShardInfo info_;
  int64_t num_tokens_ = 0;
  const int32_t* ids_ = nullptr;
};

// Writes shard-00000.tok, shard-00001.tok, ... into `dir`, each of `tokens_per_shard` ids (the
// last may hold fewer). A shard is written to a temporary name, synced, then renamed, so a shard
// file that exists is whole. Refuses a folder that already holds shards, so none are overwritten.
class TokenShardWriter {
 public:
  TokenShardWriter(std::filesystem::path dir, TokenShardInfo info, int64_t tokens_per_shard);
  void append(std::span<const int32_t> ids);
  // Writes what is buffered. Call once, at the end; the destructor does not, so an exception
  // part-way leaves only whole shards behind.
  void finish();

  int64_t tokens_written() const { return tokens_written_; }
  const std::vector<std::filesystem::path>& shards() const { return shards_; }

 private:
  void flush();

  std::filesystem::path dir_;
  TokenShardInfo info_;
  int64_t tokens_per_shard_;
  std::vector<uint32_t> buffer_;
  std::vector<std::filesystem::path> shards_;
  int64_t tokens_written_ = 0;
};

}  // namespace titan::data
