#pragma once
// Apart from registry.h so that a family's model code can compute it without seeing the
// TrainSpec, whose parallelize() brings in parallel/ (docs/architecture.md: nothing in models/
// but its wiring files knows a process group).
#include <cstdint>
#include <cstdio>
#include <string>

namespace titan::models {

// Sizes computed from the config alone, without allocating the model (405B must work).
struct ModelSummary {
  int64_t num_params = 0;
  int64_t num_embedding_params = 0;
  // Training FLOPs per token at this sequence length: 6 * (params - embedding) for the matmuls
  // forward + backward, plus 12 * layers * dim * seq for attention scores and values (as
  // TorchTitan and the PaLM appendix count them). A mixture of experts counts only the
  // parameters a token goes through (its k experts), so that MFU stays honest.
  double flops_per_token = 0;
  std::string description;  // one line: dims, layers, heads, ...
  int64_t n_layers = 0;
  // What a tensor-parallel plan splits, so that a layout can be checked before the model is
  // built: head counts, the dense feed-forward's hidden size (0 when every block is MoE), the
  // vocabulary.
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden_dim = 0;
  int64_t vocab_size = 0;
  // What an expert-parallel plan splits: the experts of each MoE layer; 0 without MoE layers.
  int64_t num_experts = 0;
};

// A parameter count as a description shows it: "123.46M", "8.03B".
inline std::string fmt_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  return buf;
}

}  // namespace titan::models
