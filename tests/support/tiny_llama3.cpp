#include "support/tiny_llama3.h"

namespace titan::test {

models::llama3::ModelArgs tiny_llama3_args(int64_t max_seq_len) {
  models::llama3::ModelArgs a;
  a.dim = 16;
  a.n_layers = 2;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 11;
  a.multiple_of = 16;
  a.max_seq_len = max_seq_len;
  return a;
}

std::shared_ptr<models::llama3::Transformer> generation_llama3(int64_t max_seq_len) {
  models::llama3::ModelArgs a = tiny_llama3_args(max_seq_len);
  a.dim = 32;
  a.vocab_size = 37;
  auto model =
      std::make_shared<models::llama3::Transformer>(a, TensorOptions{}, models::llama3::AttentionKernel{true, 8, 8});
  Generator gen(11);
  model->init_weights(gen);
  return model;
}

}  // namespace titan::test
