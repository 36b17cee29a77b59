#pragma once
// Generation in graph mode: the model's forward over a prompt (prefill) and over one token at a
// position (decode) each captured as one StableHLO program and compiled through a PJRT plugin. The
// weights are uploaded once; the KV cache lives on the device as one buffer per layer for keys and
// one for values, donated to each run and replaced by its results (written in place); the decoding
// position is an input, so one decode program serves every position. The logits of the last token
// come back to the host, where generate() samples as it does in eager mode.
//
// Under bf16 autocast the linear layers' weights are read as a bf16 copy uploaded once (the
// products round them to bf16 anyway, so the logits are those of the f32 weights under autocast),
// which halves what each decoding step reads; other weights (norms, an embedding, tied or not) stay
// f32, as autocast leaves them.
//
// Programs are compiled once per shape: prefill per prompt length and cache size, decode per
// cache size. The cache is sized to the sequence's length rounded up to a power of two (at least
// 16, at most the model's context), so that sequences of similar lengths share the decode program.
#include <cstdint>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "titan/graph/runner.h"
#include "titan/rl/generate.h"

namespace titan::rl {

struct GraphDecoderOptions {
  graph::RuntimeOptions runtime = {};
  // compile.custom_kernels: titan's CPU kernels as custom calls where the plugin can run them.
  bool custom_kernels = true;
  // compile.cudnn_attention: on a CUDA plugin, attention as cuDNN's custom calls where it can.
  bool cudnn_attention = true;
};

class GraphDecoder : public Decoder {
 public:
  // Uploads `model`'s weights as they are now. `log` (may be null) gets the plugin, the kernels
  // used and each capture and compile.
  GraphDecoder(models::CausalLM& model, const GraphDecoderOptions& options, std::ostream* log = nullptr);

  Tensor prefill(std::span<const int64_t> prompt, int64_t max_len) override;
  Tensor decode(int64_t token) override;

  // Uploads the model's weights and buffers as they are now, for the programs compiled so far and
  // any later (GRPO's weight sync after its updates); a bf16 copy is made again at first use.
  void reload_weights();

  // Positions the cache holds on the device for the current sequence.
  int64_t cache_len() const { return cache_len_; }
  // Programs compiled so far (one per shape and precision).
  int64_t compiles() const { return runner_.compiles(); }
  bool custom_kernels() const { return custom_kernels_; }
  const graph::Runner& runner() const { return runner_; }

 private:
  // What feeds one parameter of a captured program.
  struct Feed {
    enum class Source : uint8_t { weight, weight_bf16, buffer, host, tokens, position, cache };
    Source source;
    size_t index = 0;  // into weights_, buffers_, the program's host tables, or the cache's buffers
  };
  struct Compiled {
    graph::pjrt::Executable* executable = nullptr;
    std::vector<Feed> feeds;
    std::vector<int> donated;                    // the cache's parameters, aliased to results 1..
    std::vector<graph::pjrt::Buffer> host;       // the tables read from the host (RoPE's)
    std::vector<std::pair<Shape, DType>> cache;  // the cache's buffers: layer 0 k, v, layer 1 ...
  };
  // The program for `tokens` tokens over a cache of cache_len positions: a prefill from position
  // 0, or (`decode`) a step at the position given as an input. Captured and compiled at first use.
  Compiled& program(int64_t tokens, int64_t cache_len, bool decode);
  // Runs `p` on these tokens (and position), the cache's buffers donated and replaced; returns the
  // last token's logits.
  Tensor run(Compiled& p, const std::vector<int64_t>& tokens, int64_t position);

  GraphDecoderOptions options_;
  std::ostream* log_;
  graph::Runner runner_;
  bool custom_kernels_ = false;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<graph::pjrt::Buffer> weights_;
  // Whether params_[i] is read only by matrix products (a linear layer's weight, not shared with
  // an embedding), and its bf16 copy once a bf16 program needs it.
  std::vector<bool> product_only_;
  std::vector<graph::pjrt::Buffer> weights_bf16_;
  std::vector<Tensor> buffer_tensors_;  // the model's persistent buffers (MoE's expert bias)
  std::vector<graph::pjrt::Buffer> buffers_;
  std::map<std::string, Compiled> programs_;
  std::vector<graph::pjrt::Buffer> cache_;  // the current sequence's, on the device
  int64_t cache_len_ = 0, position_ = 0;
};

}  // namespace titan::rl
