#pragma once
// CLIP's text encoder (transformers' CLIPTextModel): token plus learned position embeddings,
// pre-norm blocks of causal self-attention (LayerNorms and projections with biases, scores scaled
// by 1/sqrt(head_dim)) and a quick_gelu (or gelu) MLP, a final LayerNorm; the pooled output is the
// final hidden state at the end-of-text position. Attention dropout is not applied: the encoder
// runs frozen, as inference.
#include <cstdint>
#include <memory>
#include <vector>

#include "titan/models/clip/model_args.h"
#include "titan/models/common/encoder_block.h"
#include "titan/nn/embedding.h"
#include "titan/nn/norm.h"

namespace titan::models::clip {

struct ClipTextOutput {
  Tensor last_hidden_state;  // [B, S, dim], after the final norm
  Tensor pooler_output;      // [B, dim]: last_hidden_state at pooled_positions(ids)
};

class ClipTextModel : public nn::Module {
 public:
  explicit ClipTextModel(const ModelArgs& args, TensorOptions opts = {});

  // ids [B, S] (i32 or i64, S <= max_positions). `attention_mask` [B, S] (1 a token, 0 padding;
  // i32 or i64) hides padded keys besides the causal mask, as transformers' attention_mask;
  // undefined: causal only. Eager mode (masks and pooled positions are read on the host).
  ClipTextOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor());
  // Per row of ids, the position transformers pools: with eos_token_id 2 (the configs written
  // before transformers fixed the id) the first position of the row's largest id, which is the
  // end-of-text token in CLIP's vocabulary; otherwise the first position holding eos_token_id, and
  // 0 in a row without one (torch's argmax of all zeros).
  std::vector<int64_t> pooled_positions(const Tensor& ids) const;

  const ModelArgs& args() const { return args_; }

  std::shared_ptr<nn::Embedding> tok_embeddings, pos_embeddings;
  // Feed-forward w1 = fc1, w2 = fc2, not gated.
  std::shared_ptr<nn::ModuleList<common::EncoderBlock>> layers;
  std::shared_ptr<nn::Norm> norm;

 private:
  ModelArgs args_;
};

}  // namespace titan::models::clip
