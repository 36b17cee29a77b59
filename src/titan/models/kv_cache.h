#pragma once
// The keys and values a decoder has computed for the tokens it has seen, per layer, so that each
// new token attends over them instead of recomputing the prefix. Positions [0, length()) are
// filled; a forward over S new tokens writes theirs at [length(), length() + S) in every layer,
// then advance(S) moves length() on. What to generate, and when to stop, is rl/'s business.
#include <cstdint>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::models {

class KVCache {
 public:
  // Room for `max_len` positions of `batch` sequences. A layer's buffers are allocated at its
  // first append, [batch, max_len, heads, head_dim] in the keys' dtype, so the cache needs no
  // model sizes: a tensor-parallel shard that computes some of the heads stores just those.
  KVCache(int64_t batch, int64_t max_len);

  int64_t batch() const { return batch_; }
  int64_t max_len() const { return max_len_; }
  // Positions filled: the position of the next token.
  int64_t length() const { return length_; }

  // Stores layer `layer`'s k and v [batch, S, heads, head_dim] at positions [length(),
  // length() + S) and returns its keys and values for positions [0, length() + S): views of the
  // buffers, valid until the next append to this layer. Once per layer per forward.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // Ends a forward over S tokens; every layer must have appended them.
  void advance(int64_t S);
  // Forgets every position; the buffers stay for the next sequence.
  void clear();

 private:
  struct Layer {
    Tensor k, v;
    int64_t filled = 0;  // positions this layer holds: length_, or length_ + S after its append
  };
  int64_t batch_, max_len_, length_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace titan::models
