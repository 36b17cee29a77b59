#pragma once
// T5 v1.1's encoder hyperparameters (transformers' T5Config, as T5EncoderModel reads them) and the
// flavors FLUX conditions on.
#include <cstdint>
#include <string>
#include <vector>

namespace titan::models::t5 {

struct ModelArgs {
  int64_t vocab_size = 32128;
  int64_t d_model = 4096;
  int64_t d_kv = 64;  // per head; n_heads * d_kv need not be d_model
  int64_t d_ff = 10240;
  int64_t n_layers = 24;
  int64_t n_heads = 64;
  int64_t num_buckets = 32;    // relative_attention_num_buckets
  int64_t max_distance = 128;  // relative_attention_max_distance
  double norm_eps = 1e-6;      // layer_norm_epsilon

  int64_t inner_dim() const { return n_heads * d_kv; }
  // FLOPs (2 per multiply-add) of the matrix products of one sequence's forward over `seq` tokens:
  // Q, K, V and output projections, scores and their product with V, the gated feed-forward.
  // Norms, softmax and GELU are left out: what a GEMM-bound encoder's time is measured against.
  double forward_matmul_flops(int64_t seq) const;
  // Throws, naming the field, when the sizes cannot make a model.
  void validate() const;
};

// "xxl": google/t5-v1_1-xxl's encoder, FLUX's text_encoder_2. An unknown name is an error listing
// the flavors.
ModelArgs flavor(const std::string& name);
std::vector<std::string> flavor_names();

}  // namespace titan::models::t5
