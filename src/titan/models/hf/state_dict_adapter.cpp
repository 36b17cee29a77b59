#include "titan/models/hf/state_dict_adapter.h"

#include <vector>

#include "titan/core/error.h"

namespace titan::models::hf {

namespace {

// How one HF tensor is made of ours.
enum class Join {
  one,          // it is ours[0]
  expert,       // it is slice `expert` of ours[0], whose dim 0 counts the experts (Mixtral's)
  stacked,      // ours concatenated along dim 0
  interleaved,  // per head, one slice of each of ours (GPT-NeoX's query_key_value)
};

struct Entry {
  std::string hf;
  std::vector<std::string> ours;
  std::vector<Shape> our_shapes;
  Join join = Join::one;
  int64_t expert = 0;
};

Shape hf_shape(const Entry& e) {
  Shape s = e.our_shapes[0];
  if (e.join == Join::expert) return Shape(s.begin() + 1, s.end());
  for (size_t i = 1; i < e.our_shapes.size(); ++i) s[0] += e.our_shapes[i][0];
  return s;
}

std::vector<Entry> entries(const DecoderSpec& s) {
  const bool neox = s.model_type == "gpt_neox";
  const std::string model = neox ? "gpt_neox." : "model.";
  const int64_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
  std::vector<Entry> out;
  auto one = [&](const std::string& hf, const std::string& ours, Shape shape) {
    out.push_back({hf, {ours}, {std::move(shape)}, Join::one});
  };
  // A Linear or a norm: weight, and bias where it has one.
  auto linear = [&](const std::string& hf, const std::string& ours, int64_t rows, int64_t cols, bool bias) {
    one(hf + ".weight", ours + ".weight", {rows, cols});
    if (bias) one(hf + ".bias", ours + ".bias", {rows});
  };
  const bool norm_bias = s.norm.kind == common::NormArgs::Kind::layer && s.norm.bias;
  auto norm = [&](const std::string& hf, const std::string& ours, int64_t dim) {
    one(hf + ".weight", ours + ".weight", {dim});
    if (norm_bias) one(hf + ".bias", ours + ".bias", {dim});
  };
  one(model + (neox ? "embed_in.weight" : "embed_tokens.weight"), "tok_embeddings.weight", {s.vocab_size, s.dim});
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string hl = model + "layers." + std::to_string(i) + ".", ol = "layers." + std::to_string(i) + ".";
    const std::string ha = hl + (neox ? "attention." : "self_attn."), oa = ol + "attention.";
    const std::vector<std::string> qkv{oa + "wq", oa + "wk", oa + "wv"};
    const std::vector<int64_t> rows{q_dim, kv_dim, kv_dim};
    if (s.fused_qkv == FusedQkv::none) {
      for (size_t p = 0; p < 3; ++p)
        linear(ha + std::string("qkv").substr(p, 1) + "_proj", qkv[p], rows[p], s.dim, s.qkv_bias);
    } else {
      const std::string fused = ha + (s.fused_qkv == FusedQkv::stacked ? "qkv_proj" : "query_key_value");
      const Join join = s.fused_qkv == FusedQkv::stacked ? Join::stacked : Join::interleaved;
      out.push_back({fused + ".weight",
                     {qkv[0] + ".weight", qkv[1] + ".weight", qkv[2] + ".weight"},
                     {{q_dim, s.dim}, {kv_dim, s.dim}, {kv_dim, s.dim}},
                     join});
      if (s.qkv_bias)
        out.push_back({fused + ".bias", {qkv[0] + ".bias", qkv[1] + ".bias", qkv[2] + ".bias"},
                       {{q_dim}, {kv_dim}, {kv_dim}}, join});
    }
    linear(ha + (neox ? "dense" : "o_proj"), oa + "wo", s.dim, q_dim, s.out_bias);
    if (s.qk_norm != DecoderSpec::QkNorm::none) {
      const bool full = s.qk_norm == DecoderSpec::QkNorm::full_width;
      one(ha + "q_norm.weight", oa + "q_norm.weight", {full ? q_dim : s.head_dim});
      one(ha + "k_norm.weight", oa + "k_norm.weight", {full ? kv_dim : s.head_dim});
    }
    const std::string hm = hl + "mlp.", of = ol + "feed_forward.";
    const bool b = s.feed_forward.bias;
    if (s.moe) {
      const std::string hx = hl + "block_sparse_moe.", ox = ol + "moe.";
      const int64_t E = s.moe->num_experts, H = s.moe->hidden_dim;
      one(hx + "gate.weight", ox + "router.gate.weight", {E, s.dim});
      for (int64_t e = 0; e < E; ++e)
        for (const auto& [w, shape] : {std::pair<const char*, Shape>{"w1", {E, H, s.dim}},
                                       std::pair<const char*, Shape>{"w2", {E, s.dim, H}},
                                       std::pair<const char*, Shape>{"w3", {E, H, s.dim}}})
          out.push_back({hx + "experts." + std::to_string(e) + "." + w + ".weight", {ox + "experts." + w},
                         {shape}, Join::expert, e});
    } else if (neox) {
      linear(hm + "dense_h_to_4h", of + "w1", s.ffn_dim, s.dim, b);
      linear(hm + "dense_4h_to_h", of + "w2", s.dim, s.ffn_dim, b);
    } else {
      if (s.fused_gate_up) {
        out.push_back({hm + "gate_up_proj.weight", {of + "w1.weight", of + "w3.weight"},
                       {{s.ffn_dim, s.dim}, {s.ffn_dim, s.dim}}, Join::stacked});
        TITAN_CHECK(!b, "hf adapter: a fused gate_up_proj with biases is not a layout titan knows");
      } else {
        linear(hm + "gate_proj", of + "w1", s.ffn_dim, s.dim, b);
        linear(hm + "up_proj", of + "w3", s.ffn_dim, s.dim, b);
      }
      linear(hm + "down_proj", of + "w2", s.dim, s.ffn_dim, b);
    }
    switch (s.residual) {
      case Residual::pre_norm:
      case Residual::parallel:
        norm(hl + "input_layernorm", ol + "attention_norm", s.dim);
        norm(hl + "post_attention_layernorm", ol + "ffn_norm", s.dim);
        break;
      case Residual::sandwich:
        norm(hl + "input_layernorm", ol + "attention_norm", s.dim);
        norm(hl + "post_attention_layernorm", ol + "post_attention_norm", s.dim);
        norm(hl + "pre_feedforward_layernorm", ol + "ffn_norm", s.dim);
        norm(hl + "post_feedforward_layernorm", ol + "post_ffn_norm", s.dim);
        break;
      case Residual::post_norm:
        norm(hl + "post_attention_layernorm", ol + "post_attention_norm", s.dim);
        norm(hl + "post_feedforward_layernorm", ol + "post_ffn_norm", s.dim);
        break;
    }
  }
  norm(model + (neox ? "final_layer_norm" : "norm"), "norm", s.dim);
  if (!s.tie_embeddings) one(neox ? "embed_out.weight" : "lm_head.weight", "output.weight", {s.vocab_size, s.dim});
  return out;
}

const Tensor& find(const nn::StateDict& dict, const std::string& name, const Shape& shape, const char* side) {
  auto it = dict.find(name);
  TITAN_CHECK(it != dict.end(), "hf adapter: ", side, " state dict has no tensor \"", name, "\" (expected of shape ",
              shape_str(shape), ")");
  TITAN_CHECK(it->second.sizes() == shape, "hf adapter: tensor \"", name, "\" is ", it->second.desc(),
              ", expected shape ", shape_str(shape), " from config.json");
  return it->second;
}

// A head's slice of GPT-NeoX's query_key_value rows: [heads, 3, head_dim, rest].
Tensor by_head(const Tensor& fused, int64_t heads) {
  Shape shape = fused.sizes();
  const int64_t rest = fused.numel() / shape[0];
  return fused.view({heads, 3, shape[0] / (3 * heads), rest});
}

}  // namespace

std::map<std::string, Shape> hf_shapes(const DecoderSpec& spec) {
  std::map<std::string, Shape> out;
  for (const Entry& e : entries(spec)) out.emplace(e.hf, hf_shape(e));
  return out;
}

nn::StateDict to_hf(const nn::StateDict& ours, const DecoderSpec& spec) {
  nn::StateDict out;
  for (const Entry& e : entries(spec)) {
    std::vector<Tensor> parts;
    for (size_t p = 0; p < e.ours.size(); ++p) parts.push_back(find(ours, e.ours[p], e.our_shapes[p], "titan's"));
    if (e.join == Join::one || e.join == Join::expert) {
      out.emplace(e.hf, e.join == Join::one ? parts[0].detach() : parts[0].detach().narrow(0, e.expert, 1).squeeze(0));
      continue;
    }
    Tensor fused = Tensor::empty(hf_shape(e), parts[0].options());
    if (e.join == Join::stacked) {
      int64_t row = 0;
      for (const Tensor& t : parts) {
        fused.narrow(0, row, t.size(0)).copy_(t.detach());
        row += t.size(0);
      }
    } else {
      const Tensor heads = by_head(fused, spec.n_heads);
      for (int64_t p = 0; p < 3; ++p)
        heads.narrow(1, p, 1).copy_(parts[static_cast<size_t>(p)].detach().reshape(
            {spec.n_heads, 1, spec.head_dim, heads.size(3)}));
    }
    out.emplace(e.hf, fused);
  }
  return out;
}

nn::StateDict from_hf(const nn::StateDict& hf, const DecoderSpec& spec) {
  nn::StateDict out;
  const std::vector<Entry> all = entries(spec);
  for (const Entry& e : all) {
    const Tensor& t = find(hf, e.hf, hf_shape(e), "the Hugging Face");
    if (e.join == Join::one) {
      out.emplace(e.ours[0], t);
      continue;
    }
    if (e.join == Join::expert) {
      auto it = out.find(e.ours[0]);
      if (it == out.end()) it = out.emplace(e.ours[0], Tensor::empty(e.our_shapes[0], {.dtype = t.dtype()})).first;
      it->second.narrow(0, e.expert, 1).copy_(t.unsqueeze(0));
      continue;
    }
    int64_t row = 0;
    for (size_t p = 0; p < e.ours.size(); ++p) {
      const Shape& shape = e.our_shapes[p];
      if (e.join == Join::stacked) {
        out.emplace(e.ours[p], t.narrow(0, row, shape[0]).contiguous());
        row += shape[0];
      } else {
        out.emplace(e.ours[p], by_head(t.contiguous(), spec.n_heads)
                                   .narrow(1, static_cast<int64_t>(p), 1)
                                   .contiguous()
                                   .view(shape));
      }
    }
  }
  TITAN_CHECK(hf.size() == all.size(), "hf adapter: the Hugging Face state dict holds ", hf.size(),
              " tensors, config.json describes ", all.size(), "; the extra ones are not read");
  return out;
}

}  // namespace titan::models::hf
