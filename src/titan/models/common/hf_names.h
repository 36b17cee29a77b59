#pragma once
// Hugging Face's names and shapes for what the decoder families here share (common/'s attention,
// QK-norms and feed-forward, the block norms, embedding, final norm and output projection), as
// LlamaForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM all have them, so that a family's
// state dict adapter lists only what is its own.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::models::common::hf {

// One tensor's name, ours and HF's: in a block, after "layers.<i>." (ours) and "model.layers.<i>."
// (HF's); outside the blocks, the whole name.
struct Rename {
  std::string_view ours;
  std::string_view hf;
};

inline constexpr std::string_view kOursBlock = "layers.";
inline constexpr std::string_view kHfBlock = "model.layers.";

inline constexpr Rename kAttention[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
};
inline constexpr Rename kQkNorm[] = {
    {"attention.q_norm.weight", "self_attn.q_norm.weight"},
    {"attention.k_norm.weight", "self_attn.k_norm.weight"},
};
inline constexpr Rename kBlockNorms[] = {
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};
inline constexpr Rename kFeedForward[] = {
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
};
inline constexpr Rename kTop[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// A family's block table: the shared lists it has, in one.
std::vector<Rename> join(std::initializer_list<std::span<const Rename>> lists);

// "<prefix><i>.<rest>" as {i, rest}; nullopt for names of another form. Blocks are numbered so,
// and so are the experts of an MoE block.
struct BlockName {
  int64_t index;
  std::string rest;
};
std::optional<BlockName> split_block(std::string_view name, std::string_view prefix);

// "model.layers.<layer>.<rest>".
std::string hf_block_name(int64_t layer, std::string_view rest);

// A family's names: its blocks' tensors after "layers.<i>." (ours) and "<hf_block><i>." (HF's),
// and the rest by whole name.
struct NameTable {
  std::string_view hf_block;
  std::span<const Rename> block;
  std::span<const Rename> top;
};
// `name` (ours when `from_ours`, else HF's) renamed by the table; nullopt when it has no such name.
std::optional<std::string> rename(const std::string& name, bool from_ours, const NameTable& table);
// The decoders' names: `block` under "model.layers.", kTop for the rest.
std::optional<std::string> rename(const std::string& name, bool from_ours, std::span<const Rename> block);

// The sizes that fix the shapes of what the families share.
struct DecoderDims {
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  bool tie_embeddings = false;  // no lm_head
};

// HF's shapes of the embedding, the final norm, lm_head (unless tied) and, per block, the
// attention projections and the two norms.
std::map<std::string, Shape> decoder_shapes(const DecoderDims& dims);
// HF's shapes of a SwiGLU feed-forward, "<prefix>{gate,up,down}_proj.weight", added to `out`:
// prefix "model.layers.<i>.mlp." for a dense block, "model.layers.<i>.mlp.experts.<e>." for an
// expert of a mixture.
void add_swiglu_shapes(std::map<std::string, Shape>& out, const std::string& prefix, int64_t dim,
                       int64_t hidden);

}  // namespace titan::models::common::hf
