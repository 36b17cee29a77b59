#pragma once
// The training stream: one sequence of token ids made of pieces, ids held in memory (text
// tokenized at start-up) and ids in memory-mapped token shards, so a corpus larger than memory
// is read from the page cache as the loader goes. Windows may straddle pieces.
#include <cstdint>
#include <memory>
#include <vector>

namespace titan::data {

// One flag per token of a stream: 1 when the token, as a label, carries loss. Null where every
// label does.
using LossMask = std::shared_ptr<const std::vector<uint8_t>>;

class TokenStream {
 public:
  TokenStream() = default;
  explicit TokenStream(std::vector<int32_t> ids) { append(std::move(ids)); }

  void append(std::vector<int32_t> ids);
  // `n` ids at `ids`, kept valid by `owner` (a mapped shard) for as long as the stream lives.
  void append(const int32_t* ids, int64_t n, std::shared_ptr<const void> owner);

  int64_t size() const { return size_; }
  // ids [start, start + n) into out; throws when the range is not inside the stream.
  void read(int64_t start, int64_t n, int32_t* out) const;

 private:
  struct Piece {
    int64_t begin;
    int64_t size;
    const int32_t* ids;
    std::shared_ptr<const void> owner;
  };
  std::vector<Piece> pieces_;
  int64_t size_ = 0;
};

}  // namespace titan::data
