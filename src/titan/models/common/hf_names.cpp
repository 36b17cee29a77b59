#include "titan/models/common/hf_names.h"

namespace titan::models::common::hf {

std::vector<Rename> join(std::initializer_list<std::span<const Rename>> lists) {
  std::vector<Rename> out;
  for (std::span<const Rename> list : lists) out.insert(out.end(), list.begin(), list.end());
  return out;
}

std::optional<BlockName> split_block(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string_view::npos || dot == prefix.size()) return std::nullopt;
  const std::string_view index = name.substr(prefix.size(), dot - prefix.size());
  // Digits only, and few enough to fit: anything else is another name, not a block's.
  if (index.size() > 9 || index.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return BlockName{std::stoll(std::string(index)), std::string(name.substr(dot + 1))};
}

std::string hf_block_name(int64_t layer, std::string_view rest) {
  return std::string(kHfBlock) + std::to_string(layer) + "." + std::string(rest);
}

std::optional<std::string> rename(const std::string& name, bool from_ours, const NameTable& table) {
  const std::string_view from_block = from_ours ? kOursBlock : table.hf_block;
  const std::string_view to_block = from_ours ? table.hf_block : kOursBlock;
  if (auto b = split_block(name, from_block))
    for (const Rename& r : table.block)
      if (b->rest == (from_ours ? r.ours : r.hf))
        return std::string(to_block) + std::to_string(b->index) + "." +
               std::string(from_ours ? r.hf : r.ours);
  for (const Rename& r : table.top)
    if (name == (from_ours ? r.ours : r.hf)) return std::string(from_ours ? r.hf : r.ours);
  return std::nullopt;
}

std::optional<std::string> rename(const std::string& name, bool from_ours, std::span<const Rename> block) {
  return rename(name, from_ours, NameTable{kHfBlock, block, kTop});
}

std::map<std::string, Shape> decoder_shapes(const DecoderDims& d) {
  const int64_t q = d.n_heads * d.head_dim, kv = d.n_kv_heads * d.head_dim;
  std::map<std::string, Shape> out{{"model.embed_tokens.weight", {d.vocab_size, d.dim}},
                                   {"model.norm.weight", {d.dim}}};
  if (!d.tie_embeddings) out["lm_head.weight"] = {d.vocab_size, d.dim};
  for (int64_t i = 0; i < d.n_layers; ++i) {
    out[hf_block_name(i, "self_attn.q_proj.weight")] = {q, d.dim};
    out[hf_block_name(i, "self_attn.k_proj.weight")] = {kv, d.dim};
    out[hf_block_name(i, "self_attn.v_proj.weight")] = {kv, d.dim};
    out[hf_block_name(i, "self_attn.o_proj.weight")] = {d.dim, q};
    out[hf_block_name(i, "input_layernorm.weight")] = {d.dim};
    out[hf_block_name(i, "post_attention_layernorm.weight")] = {d.dim};
  }
  return out;
}

void add_swiglu_shapes(std::map<std::string, Shape>& out, const std::string& prefix, int64_t dim,
                       int64_t hidden) {
  out[prefix + "gate_proj.weight"] = {hidden, dim};
  out[prefix + "up_proj.weight"] = {hidden, dim};
  out[prefix + "down_proj.weight"] = {dim, hidden};
}

}  // namespace titan::models::common::hf
