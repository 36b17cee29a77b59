#pragma once
// A deterministic, resumable loader over a packed token stream. The stream is cut into windows
// of seq_len + 1 tokens, window w starting at token w * seq_len, so each token is a label exactly
// once per epoch. Each epoch visits the windows in a permutation that is a pure function of
// (seed, epoch); a global batch is the next dp_world * local_batch_size windows of that order,
// of which rank r takes the r-th slice. The position is two integers, the same on every rank.
//
// With a loss mask (SFT's packed examples, sft_dataset.h), a label whose token carries no loss is
// -100, ops::cross_entropy's ignore_index. A window's last label is the next window's first token,
// so the mask must give none of those loss: no label that carries loss is read across a window's end.
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/data/token_stream.h"

namespace titan::data {

struct LoaderOptions {
  int64_t seq_len = 0;
  int64_t local_batch_size = 0;
  uint64_t seed = 0;
  // Off: windows in stream order every epoch (an evaluation pass that reads the text in order).
  bool shuffle = true;
  int64_t dp_rank = 0;
  int64_t dp_world = 1;
  // >= 0: batches carry document ids, a new document starting after each eos token (packing puts
  // one at the end of every document), for attention masks that keep documents apart.
  int32_t eos_id = -1;
};

// Windows handed out so far in epoch `epoch`, counted over all ranks. Independent of dp_rank and
// dp_world, so one copy in a checkpoint resumes every rank, even under another dp_world.
struct LoaderState {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const LoaderState&) const = default;
};

// i64 [local_batch_size, seq_len]; labels[b, t] is the token after inputs[b, t], or -100 where
// the loss mask says that token carries no loss.
struct Batch {
  Tensor inputs;
  Tensor labels;
  // i32 [local_batch_size, seq_len] when LoaderOptions::eos_id is set, else undefined: the
  // document of inputs[b, t], counted from 0 at the start of each row.
  Tensor document_ids = {};
};

class DataLoader {
 public:
  // Throws when the stream is shorter than one window (seq_len + 1 tokens), an option is out of
  // range, or `loss_mask` (when given) is not one flag per token or gives a window's first token loss.
  DataLoader(TokenStream tokens, LoaderOptions options, LossMask loss_mask = nullptr);

  // The next batch; at the end of an epoch it carries on into the next one's order, so a global
  // batch may hold windows of two epochs. Ranks read disjoint windows while a global batch is no
  // larger than an epoch (dp_world * local_batch_size <= num_windows()).
  Batch next();

  LoaderState get_state() const { return state_; }
  // Throws on a state that is not a position of this stream (index outside [0, num_windows())).
  void set_state(LoaderState state);

  int64_t num_windows() const { return num_windows_; }
  int64_t num_tokens() const { return tokens_.size(); }

 private:
  // Window (index into the stream) at `position` of epoch `epoch`'s order.
  int64_t window_at(int64_t epoch, int64_t position);

  TokenStream tokens_;
  LoaderOptions options_;
  LossMask loss_mask_;
  int64_t num_windows_;
  LoaderState state_;
  // The order of one epoch, kept because a batch reads many positions of it.
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
};

}  // namespace titan::data
