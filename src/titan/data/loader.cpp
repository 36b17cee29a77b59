#include "titan/data/loader.h"

#include <numeric>
#include <utility>

#include "titan/core/error.h"
#include "titan/core/rng.h"
#include "titan/core/trace.h"

namespace titan::data {

namespace {
// ops::cross_entropy's ignore_index.
constexpr int64_t kIgnoreLabel = -100;

// Uniform in [0, bound) from one Philox block at counter (i, epoch): a pure function of
// (seed, epoch, i), so an epoch's order never depends on how far earlier epochs were read.
uint64_t draw_below(uint64_t seed, int64_t epoch, int64_t i, uint64_t bound) {
  auto e = static_cast<uint64_t>(epoch), n = static_cast<uint64_t>(i);
  std::array<uint32_t, 4> r = philox4x32({static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32),
                                          static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32)},
                                         {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  // Multiply-shift instead of modulo: the bias is below bound / 2^64, far under anything a
  // training run could notice, and there is no rejection loop.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
}
}  // namespace

DataLoader::DataLoader(TokenStream tokens, LoaderOptions options, LossMask loss_mask)
    : tokens_(std::move(tokens)), options_(options), loss_mask_(std::move(loss_mask)) {
  const LoaderOptions& o = options_;
  TITAN_CHECK(o.seq_len >= 1, "DataLoader: seq_len must be at least 1, got ", o.seq_len);
  TITAN_CHECK(o.local_batch_size >= 1, "DataLoader: local_batch_size must be at least 1, got ",
              o.local_batch_size);
  TITAN_CHECK(o.dp_world >= 1 && o.dp_rank >= 0 && o.dp_rank < o.dp_world,
              "DataLoader: dp_rank must lie in [0, dp_world) with dp_world >= 1, got dp_rank ", o.dp_rank,
              " and dp_world ", o.dp_world);
  // Without computing seq_len + 1, which overflows for the largest seq_len.
  TITAN_CHECK(
      num_tokens() - 1 >= o.seq_len, "DataLoader: seq_len ", o.seq_len,
      " is larger than the corpus: a window needs seq_len + 1 tokens (the labels reach one further) and "
      "the stream holds ",
      num_tokens(), "; lower seq_len to at most ", std::max<int64_t>(num_tokens() - 1, 1),
      " or give more text");
  num_windows_ = (num_tokens() - 1) / o.seq_len;
  if (loss_mask_) {
    const std::vector<uint8_t>& mask = *loss_mask_;
    TITAN_CHECK(static_cast<int64_t>(mask.size()) == num_tokens(), "DataLoader: the loss mask holds ",
                mask.size(), " flags for a stream of ", num_tokens(), " tokens; it needs one per token");
    for (int64_t w = 1; w <= num_windows_; ++w)
      TITAN_CHECK(mask[static_cast<size_t>(w * o.seq_len)] == 0, "DataLoader: token ", w * o.seq_len,
                  " starts a window and is the label of the one before it, yet the loss mask gives it loss; "
                  "pack examples so that none crosses a multiple of seq_len = ", o.seq_len);
  }
}

int64_t DataLoader::window_at(int64_t epoch, int64_t position) {
  if (!options_.shuffle) return position;
  if (order_epoch_ != epoch) {
    // Fisher-Yates from the back: slot i swaps with a uniform slot in [0, i].
    order_.resize(static_cast<size_t>(num_windows_));
    std::iota(order_.begin(), order_.end(), int64_t{0});
    for (int64_t i = num_windows_ - 1; i > 0; --i) {
      auto j = static_cast<int64_t>(draw_below(options_.seed, epoch, i, static_cast<uint64_t>(i) + 1));
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(position)];
}

Batch DataLoader::next() {
  const int64_t batch = options_.local_batch_size, seq = options_.seq_len;
  trace::Span span("DataLoader::next", "data");
  span.arg("batch", batch).arg("seq_len", seq).arg("epoch", state_.epoch).arg("index", state_.index);
  Batch out{Tensor::empty({batch, seq}, {.dtype = kI64}), Tensor::empty({batch, seq}, {.dtype = kI64})};
  int64_t* inputs = out.inputs.data<int64_t>();
  int64_t* labels = out.labels.data<int64_t>();
  const int32_t eos = options_.eos_id;
  int32_t* docs = nullptr;
  if (eos >= 0) {
    out.document_ids = Tensor::empty({batch, seq}, {.dtype = kI32});
    docs = out.document_ids.data<int32_t>();
  }
  std::vector<int32_t> window_ids(static_cast<size_t>(seq + 1));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t global = state_.index + options_.dp_rank * batch + b;
    int64_t window = window_at(state_.epoch + global / num_windows_, global % num_windows_);
    tokens_.read(window * seq, seq + 1, window_ids.data());
    const int32_t* src = window_ids.data();
    const uint8_t* loss = loss_mask_ ? loss_mask_->data() + window * seq : nullptr;
    for (int64_t t = 0; t < seq; ++t) {
      inputs[b * seq + t] = src[t];
      labels[b * seq + t] = !loss || loss[t + 1] ? src[t + 1] : kIgnoreLabel;
    }
    if (docs) {
      int32_t doc = 0;
      for (int64_t t = 0; t < seq; ++t) {
        docs[b * seq + t] = doc;
        if (src[t] == eos) ++doc;
      }
    }
  }
  int64_t advanced = state_.index + options_.dp_world * batch;
  state_ = {state_.epoch + advanced / num_windows_, advanced % num_windows_};
  return out;
}

void DataLoader::set_state(LoaderState state) {
  TITAN_CHECK(state.epoch >= 0 && state.index >= 0 && state.index < num_windows_,
              "DataLoader::set_state: expected epoch >= 0 and index in [0, ", num_windows_, "), got epoch ",
              state.epoch, ", index ", state.index, "; was the state saved for another corpus or seq_len?");
  state_ = state;
}

}  // namespace titan::data
