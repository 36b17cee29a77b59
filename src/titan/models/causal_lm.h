#pragma once
// What the trainer sees of any decoder-only language model (Llama 3, Qwen 3, HF decoders).
#include <cstdint>

#include "titan/nn/module.h"

namespace titan::models {

class CausalLM : public nn::Module {
 public:
  // tokens [batch, seq] (i64) -> logits [batch, seq, vocab].
  virtual Tensor operator()(const Tensor& tokens) = 0;
  virtual int64_t vocab_size() const = 0;
};

}  // namespace titan::models
