#include "titan/data/token_shard.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "titan/core/checked.h"
#include "titan/core/crc32c.h"
#include "titan/core/error.h"

namespace titan::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kHeaderBytes = 64, kCheckedBytes = 36;
constexpr char kMagic[8] = {'T', 'I', 'T', 'A', 'N', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;

template <typename T>
void put(std::array<char, kHeaderBytes>& h, size_t at, T v) {
  std::memcpy(h.data() + at, &v, sizeof(T));
}
template <typename T>
T get(const char* h, size_t at) {
  T v;
  std::memcpy(&v, h + at, sizeof(T));
  return v;
}

std::array<char, kHeaderBytes> header(const TokenShardInfo& info, uint64_t num_tokens) {
  std::array<char, kHeaderBytes> h{};
  std::memcpy(h.data(), kMagic, sizeof(kMagic));
  put(h, 8, kVersion);
  put(h, 12, static_cast<uint32_t>(info.vocab_size));
  put(h, 16, num_tokens);
  put(h, 24, info.bos);
  put(h, 28, info.eos);
  put(h, 32, info.tokenizer_fingerprint);
  put(h, 36, crc32c(std::string_view(h.data(), kCheckedBytes)));
  return h;
}

}  // namespace

TokenShard::TokenShard(const fs::path& path) : file_(path) {
  const std::string where = "token shard " + path.string();
  const std::string_view bytes = file_.bytes();
  TITAN_CHECK(bytes.size() >= kHeaderBytes && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0, where,
              ": not a titan token shard (expected a 64-byte header starting \"TITANTOK\", found ",
              bytes.size(), " bytes", bytes.size() >= 8 ? " starting otherwise" : "",
              "); make shards with `titan tokenize`");
  const char* h = bytes.data();
  TITAN_CHECK(get<uint32_t>(h, 36) == crc32c(bytes.substr(0, kCheckedBytes)), where,
              ": the header's checksum does not match; the file is damaged: make it again");
  TITAN_CHECK(get<uint32_t>(h, 8) == kVersion, where, ": format version ", get<uint32_t>(h, 8),
              " is not the version ", kVersion, " this titan reads");
  info_ = {.vocab_size = static_cast<int32_t>(get<uint32_t>(h, 12)),
           .bos = get<int32_t>(h, 24),
           .eos = get<int32_t>(h, 28),
           .tokenizer_fingerprint = get<uint32_t>(h, 32)};
  TITAN_CHECK(info_.vocab_size > 0, where, ": header gives vocab_size ", get<uint32_t>(h, 12),
              "; expected a positive size below 2^31");
  const uint64_t n = get<uint64_t>(h, 16), have = (bytes.size() - kHeaderBytes) / 4;
  // A damaged count can make 64 + 4n wrap around to the file's size; it is refused before any
  // size is computed from it.
  const std::optional<uint64_t> id_bytes = product<uint64_t>(n, 4);
  const std::optional<uint64_t> promised = id_bytes ? sum<uint64_t>(*id_bytes, kHeaderBytes) : std::nullopt;
  TITAN_CHECK(promised.has_value(), where, ": the header promises ", n,
              " ids, more bytes than any file holds, and the file holds ", bytes.size(), " bytes (", have,
              " ids); the header is damaged: make the shard again");
  TITAN_CHECK(bytes.size() == *promised, where, ": truncated or overlong: the header promises ", n, " ids (",
              *promised, " bytes) and the file holds ", bytes.size(), " bytes (", have,
              " ids); make the shard again");
  num_tokens_ = static_cast<int64_t>(n);
  // The header is 64 bytes and a mapping is page-aligned, so the ids are 4-byte aligned.
  ids_ = reinterpret_cast<const int32_t*>(h + kHeaderBytes);
  const auto* raw = reinterpret_cast<const uint32_t*>(ids_);
  const auto vocab = static_cast<uint32_t>(info_.vocab_size);
  const uint32_t* bad = std::find_if(raw, raw + n, [vocab](uint32_t id) { return id >= vocab; });
  TITAN_CHECK(bad == raw + n, where, ": id ", bad == raw + n ? 0 : *bad, " at position ", bad - raw,
              " is not below the shard's vocab_size ", vocab, "; the file is damaged: make it again");
}

std::shared_ptr<const TokenShard> TokenShard::open(const fs::path& path) {
  return std::make_shared<const TokenShard>(path);
}

TokenShardWriter::TokenShardWriter(fs::path dir, TokenShardInfo info, int64_t tokens_per_shard)
    : dir_(std::move(dir)), info_(info), tokens_per_shard_(tokens_per_shard) {
  TITAN_CHECK(tokens_per_shard_ > 0, "token shards: tokens per shard must be positive, got ",
              tokens_per_shard_);
  TITAN_CHECK(info_.vocab_size > 0, "token shards: vocab_size must be positive, got ", info_.vocab_size);
  fs::create_directories(dir_);
  for (const auto& e : fs::directory_iterator(dir_))
    TITAN_CHECK(e.path().extension() != kTokenShardExtension, "token shards: ", dir_.string(),
                " already holds shards (", e.path().filename().string(),
                "); write into an empty folder, or remove the old shards first");
}

void TokenShardWriter::append(std::span<const int32_t> ids) {
  for (int32_t id : ids)
    TITAN_CHECK(id >= 0 && id < info_.vocab_size, "token shards: id ", id, " is outside the vocabulary [0, ",
                info_.vocab_size, ")");
  while (!ids.empty()) {
    const size_t room = static_cast<size_t>(tokens_per_shard_) - buffer_.size();
    const size_t take = std::min(room, ids.size());
    buffer_.insert(buffer_.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take));
    ids = ids.subspan(take);
    if (buffer_.size() == static_cast<size_t>(tokens_per_shard_)) flush();
  }
}

void TokenShardWriter::finish() {
  if (!buffer_.empty()) flush();
  sync_directory(dir_);
}

void TokenShardWriter::flush() {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05zu", shards_.size());
  const fs::path final_path = dir_ / (std::string(name) + kTokenShardExtension);
  const fs::path tmp = dir_ / (std::string(name) + kTokenShardExtension + ".tmp");
  {
    OutFile out(tmp);
    const auto h = header(info_, buffer_.size());
    out.write(h.data(), h.size());
    out.write(buffer_.data(), buffer_.size() * sizeof(uint32_t));
    out.sync();
    out.close();
  }
  fs::rename(tmp, final_path);
  shards_.push_back(final_path);
  tokens_written_ += static_cast<int64_t>(buffer_.size());
  buffer_.clear();
}

}  // namespace titan::data
