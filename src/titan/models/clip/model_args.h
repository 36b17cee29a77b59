#pragma once
// CLIP's text encoder hyperparameters (transformers' CLIPTextConfig, as CLIPTextModel reads them)
// and the flavor FLUX conditions on.
#include <cstdint>
#include <string>
#include <vector>

#include "titan/models/common/feed_forward.h"

namespace titan::models::clip {

struct ModelArgs {
  int64_t vocab_size = 49408;
  int64_t dim = 768;       // hidden_size
  int64_t ffn_dim = 3072;  // intermediate_size
  int64_t n_layers = 12;
  int64_t n_heads = 12;
  int64_t max_positions = 77;  // max_position_embeddings: the learned position table's rows
  double norm_eps = 1e-5;
  common::Activation activation = common::Activation::quick_gelu;  // quick_gelu or gelu
  // Which position pools the sequence: 2 means transformers' legacy rule (the largest id's
  // position), any other id the first position holding it (see ClipTextModel::pooled_positions).
  int64_t eos_token_id = 49407;

  int64_t head_dim() const { return dim / n_heads; }
  // FLOPs (2 per multiply-add) of the matrix products of one sequence's forward over `seq` tokens,
  // as t5::ModelArgs counts them; the causal scores are counted whole, as they are computed.
  double forward_matmul_flops(int64_t seq) const;
  // Throws, naming the field, when the sizes cannot make a model.
  void validate() const;
};

// "vit-large-patch14": openai/clip-vit-large-patch14's text model, FLUX's text_encoder. An
// unknown name is an error listing the flavors.
ModelArgs flavor(const std::string& name);
std::vector<std::string> flavor_names();

}  // namespace titan::models::clip
