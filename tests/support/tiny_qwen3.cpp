#include "support/tiny_qwen3.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/rng.h"

namespace titan::test {

models::qwen3::ModelArgs tiny_qwen3_args(bool moe, int64_t n_layers) {
  models::qwen3::ModelArgs a;
  a.dim = 6;
  a.n_layers = n_layers;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.head_dim = 4;
  a.ffn_dim = 10;
  a.vocab_size = 11;
  a.max_seq_len = 8;
  if (moe) {
    a.moe = nn::moe::MoEArgs{.num_experts = 4, .top_k = 2, .hidden_dim = 5, .norm_topk_prob = true};
    a.aux_loss_coeff = 0.5;
  }
  return a;
}

Tensor tokens_of(const std::vector<int64_t>& ids, int64_t batch) {
  return Tensor::from_vector(ids, {batch, static_cast<int64_t>(ids.size()) / batch});
}

void randomise(models::qwen3::Transformer& m, uint64_t seed) {
  Generator gen(seed);
  m.init_weights(gen);
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters())
    if (p.dim() >= 2 && name != "tok_embeddings.weight")
      Tensor(p).copy_(Tensor::randn(p.sizes(), gen, {.dtype = p.dtype()}, 0, 0.4));
}

}  // namespace titan::test
