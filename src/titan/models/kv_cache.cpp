#include "titan/models/kv_cache.h"

#include "titan/autograd/node.h"

namespace titan::models {

KVCache::KVCache(int64_t batch, int64_t max_len) : batch_(batch), max_len_(max_len) {
  TITAN_CHECK(batch >= 1 && max_len >= 1, "KVCache: batch and max_len must be at least 1, got batch ", batch,
              ", max_len ", max_len);
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  TITAN_CHECK(layer >= 0, "KVCache::append: layer must be >= 0, got ", layer);
  TITAN_CHECK(k.dim() == 4 && k.sizes() == v.sizes() && k.dtype() == v.dtype() && k.size(0) == batch_ &&
                  k.size(1) >= 1,
              "KVCache::append: expected k and v [batch ", batch_,
              ", S >= 1, heads, head_dim] of one dtype, got k ", k.desc(), ", v ", v.desc());
  // The buffers are written in place, which autograd cannot follow: gradients would stop here.
  TITAN_CHECK(!autograd::needs_grad({&k, &v}), "KVCache::append: k ", k.desc(),
              " requires grad, but the cache cannot carry gradients; run inference under "
              "autograd::NoGradGuard");
  const int64_t S = k.size(1);
  TITAN_CHECK(length_ + S <= max_len_, "KVCache::append: ", S, " new positions after ", length_,
              " would overflow the cache of max_len ", max_len_, "; make the cache larger");
  if (static_cast<size_t>(layer) >= layers_.size()) layers_.resize(static_cast<size_t>(layer) + 1);
  Layer& l = layers_[static_cast<size_t>(layer)];
  TITAN_CHECK(l.filled == length_, "KVCache::append: layer ", layer, " already holds ", l.filled,
              " positions, the cache ", length_,
              "; each layer appends once per forward, and advance() ends the forward");
  if (!l.k.defined()) {
    const Shape shape = {batch_, max_len_, k.size(2), k.size(3)};
    l.k = Tensor::empty(shape, k.options());
    l.v = Tensor::empty(shape, k.options());
  }
  TITAN_CHECK(l.k.size(2) == k.size(2) && l.k.size(3) == k.size(3) && l.k.dtype() == k.dtype(),
              "KVCache::append: layer ", layer, " holds ", l.k.desc(), " but now gets k ", k.desc(),
              "; heads, head_dim and dtype must stay the same (clear() keeps the buffers; use a new "
              "cache for another model)");
  l.k.narrow(1, length_, S).copy_(k);
  l.v.narrow(1, length_, S).copy_(v);
  l.filled = length_ + S;
  return {l.k.narrow(1, 0, l.filled), l.v.narrow(1, 0, l.filled)};
}

void KVCache::advance(int64_t S) {
  TITAN_CHECK(S >= 1, "KVCache::advance: S must be at least 1, got ", S);
  TITAN_CHECK(!layers_.empty(), "KVCache::advance: no layer has appended its keys and values");
  for (size_t i = 0; i < layers_.size(); ++i)
    TITAN_CHECK(layers_[i].filled == length_ + S, "KVCache::advance(", S, "): layer ", i, " holds ",
                layers_[i].filled, " positions, expected ", length_ + S,
                "; every layer must append the forward's tokens before it ends");
  length_ += S;
}

void KVCache::clear() {
  length_ = 0;
  for (Layer& l : layers_) l.filled = 0;
}

}  // namespace titan::models
