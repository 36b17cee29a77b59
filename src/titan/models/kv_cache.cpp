#include "titan/models/kv_cache.h"

#include "titan/autograd/node.h"
#include "titan/ops/update_slice.h"

namespace titan::models {

KVCache::KVCache(int64_t batch, int64_t max_len, Allocate allocate)
    : batch_(batch), max_len_(max_len), allocate_(std::move(allocate)) {
  TITAN_CHECK(batch >= 1 && max_len >= 1, "KVCache: batch and max_len must be at least 1, got batch ", batch,
              ", max_len ", max_len);
}

int64_t KVCache::length() const {
  TITAN_CHECK(!placed_.defined() && !spent_,
              "KVCache::length: the cache was placed at a position that is a value of the program being "
              "captured (place_at), which only that program knows; read position() instead");
  return length_;
}

Tensor KVCache::position() const {
  TITAN_CHECK(!spent_, "KVCache: the forward placed at a program's position has ended; a placed cache serves one "
              "forward (clear() it, or place it again)");
  return placed_.defined() ? placed_ : Tensor::scalar<int64_t>(length_);
}

void KVCache::place_at(const Tensor& position) {
  TITAN_CHECK(position.defined() && position.dim() == 0 && position.dtype() == kI64 && position.is_lazy(),
              "KVCache::place_at: expected a 0-d i64 value of the program being captured, got ",
              position.defined() ? position.desc() : std::string("none"),
              "; a cache on the host knows its own position");
  TITAN_CHECK(length_ == 0, "KVCache::place_at: the cache already holds ", length_,
              " positions of its own; place a cleared one");
  placed_ = position;
  spent_ = false;
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
  TITAN_CHECK(reach(S) <= max_len_ && S <= max_len_, "KVCache::append: ", S, " new positions after ", length_,
              " would overflow the cache of max_len ", max_len_, "; make the cache larger");
  const Tensor at = position();
  if (static_cast<size_t>(layer) >= layers_.size()) layers_.resize(static_cast<size_t>(layer) + 1);
  Layer& l = layers_[static_cast<size_t>(layer)];
  TITAN_CHECK(l.filled == length_, "KVCache::append: layer ", layer, " already holds ", l.filled,
              " positions, the cache ", length_,
              "; each layer appends once per forward, and advance() ends the forward");
  if (!l.k.defined()) {
    const Shape shape = {batch_, max_len_, k.size(2), k.size(3)};
    l.k = allocate_ ? allocate_(layer, "k", shape, k.dtype()) : Tensor::empty(shape, k.options());
    l.v = allocate_ ? allocate_(layer, "v", shape, k.dtype()) : Tensor::empty(shape, k.options());
  }
  TITAN_CHECK(l.k.size(2) == k.size(2) && l.k.size(3) == k.size(3) && l.k.dtype() == k.dtype(),
              "KVCache::append: layer ", layer, " holds ", l.k.desc(), " but now gets k ", k.desc(),
              "; heads, head_dim and dtype must stay the same (clear() keeps the buffers; use a new "
              "cache for another model)");
  l.filled = length_ + S;
  if (k.is_lazy() || l.k.is_lazy()) {
    // A program's values are never written in place: the buffers' new values replace them.
    TITAN_CHECK(l.k.is_lazy() && k.is_lazy(), "KVCache::append: layer ", layer, "'s buffers ", l.k.desc(),
                " and its new keys ", k.desc(), " must both be values of the program being captured; give the "
                "cache an Allocate that declares its buffers inputs of the program");
    l.k = ops::update_slice(l.k, k, 1, at);
    l.v = ops::update_slice(l.v, v, 1, at);
    if (placed_.defined()) return {l.k, l.v};
  } else {
    l.k.narrow(1, length_, S).copy_(k);
    l.v.narrow(1, length_, S).copy_(v);
  }
  return {l.k.narrow(1, 0, l.filled), l.v.narrow(1, 0, l.filled)};
}

void KVCache::advance(int64_t S) {
  TITAN_CHECK(S >= 1, "KVCache::advance: S must be at least 1, got ", S);
  TITAN_CHECK(!layers_.empty(), "KVCache::advance: no layer has appended its keys and values");
  for (size_t i = 0; i < layers_.size(); ++i)
    TITAN_CHECK(layers_[i].filled == length_ + S, "KVCache::advance(", S, "): layer ", i, " holds ",
                layers_[i].filled, " positions, expected ", length_ + S,
                "; every layer must append the forward's tokens before it ends");
  if (placed_.defined()) {
    placed_ = Tensor();
    spent_ = true;
    for (Layer& l : layers_) l.filled = 0;
    return;
  }
  length_ += S;
}

void KVCache::clear() {
  length_ = 0;
  placed_ = Tensor();
  spent_ = false;
  for (Layer& l : layers_) l.filled = 0;
}

std::pair<Tensor, Tensor> KVCache::buffers(int64_t layer) const {
  TITAN_CHECK(layer >= 0 && layer < layers(), "KVCache::buffers: layer ", layer, " has not appended; the cache holds ",
              layers(), " layers");
  const Layer& l = layers_[static_cast<size_t>(layer)];
  return {l.k, l.v};
}

}  // namespace titan::models
