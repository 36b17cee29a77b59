#pragma once
// The keys and values a decoder has computed for the tokens it has seen, per layer, so that each
// new token attends over them instead of recomputing the prefix. Positions [0, length()) are
// filled; a forward over S new tokens writes theirs at [length(), length() + S) in every layer,
// then advance(S) moves length() on. What to generate, and when to stop, is rl/'s business.
//
// In graph mode the buffers are values of the program being captured (an Allocate declares them
// its inputs), a forward's writes are new values of them, and a decoding step's position is an
// input of the program too (place_at): the model's code is the same in both modes.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::models {

class KVCache {
 public:
  // Room for `max_len` positions of `batch` sequences. A layer's buffers are allocated at its
  // first append, [batch, max_len, heads, head_dim] in the keys' dtype, so the cache needs no
  // model sizes: a tensor-parallel shard that computes some of the heads stores just those.
  // How a layer's buffers are made: `which` is "k" or "v". By default, uninitialised host tensors.
  using Allocate = std::function<Tensor(int64_t layer, const char* which, const Shape& shape, DType dtype)>;
  KVCache(int64_t batch, int64_t max_len, Allocate allocate = {});

  int64_t batch() const { return batch_; }
  int64_t max_len() const { return max_len_; }
  // Positions filled: the position of the next token. Refused for a cache placed at a program's
  // value (place_at), whose length the program alone knows.
  int64_t length() const;
  // The position of the next token as a 0-d i64 tensor: length() on the host, or place_at's value.
  Tensor position() const;
  // Whether the next forward's tokens start the sequence (nothing before them is cached): they
  // then attend among themselves only, as in training.
  bool starts_sequence() const { return !placed_.defined() && length_ == 0; }
  // The positions a forward of S tokens reaches: length() + S, or max_len() for a placed cache.
  int64_t reach(int64_t S) const { return placed_.defined() ? max_len_ : length_ + S; }

  // The next forward's tokens start at `position`, a 0-d i64 value of the program being captured
  // (graph mode's decoding step, one program for every position). append() then writes there and
  // returns the whole buffers, past the position included, so the forward must attend with
  // decode_attention(q, k, v, position()). The program cannot check the position: whoever runs it
  // keeps position + S within max_len(). A placed cache serves one forward.
  void place_at(const Tensor& position);

  // Stores layer `layer`'s k and v [batch, S, heads, head_dim] at positions [position(),
  // position() + S) and returns its keys and values for positions [0, length() + S): views of the
  // buffers, valid until the next append to this layer (in a capture: the buffers' new values,
  // whole for a placed cache). Once per layer per forward.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // Ends a forward over S tokens; every layer must have appended them.
  void advance(int64_t S);
  // Forgets every position; the buffers stay for the next sequence.
  void clear();

  // Layers that have appended, and a layer's buffers [batch, max_len, heads, head_dim] (in a
  // capture, their latest values: what a program returns as the cache's new contents).
  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
  std::pair<Tensor, Tensor> buffers(int64_t layer) const;

 private:
  struct Layer {
    Tensor k, v;
    int64_t filled = 0;  // positions this layer holds: length_, or length_ + S after its append
  };
  int64_t batch_, max_len_, length_ = 0;
  Allocate allocate_;
  Tensor placed_;  // place_at's position, until the forward ends
  bool spent_ = false;  // a placed forward has ended
  std::vector<Layer> layers_;
};

}  // namespace titan::models
