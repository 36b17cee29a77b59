#pragma once
// FLUX.1's rectified-flow transformer as BFL wrote it (black-forest-labs/flux, src/flux/model.py):
// the module tree and so the parameter names are BFL's ("double_blocks.0.img_attn.qkv.weight"),
// so BFL checkpoints load as they are; state_dict_adapter.h maps diffusers' names. Math only.
//
//   vec = time_in(sinusoid(1000 t)) [+ guidance_in(sinusoid(1000 g))] + vector_in(y)
//   img = img_in(img), txt = txt_in(txt)
//   double blocks: each stream modulated by its own adaLN, joint attention over [txt; img]
//   single blocks: over [txt; img] as one stream, attention and MLP side by side
//   out = final_layer(img part, vec)
// Attention is splash attention with every pair visible; RoPE rotates interleaved pairs of each
// head by angles from the tokens' 3-axis ids.
#include <functional>
#include <memory>
#include <vector>

#include "titan/models/flux/model_args.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"
#include "titan/ops/rope.h"

namespace titan::models::flux {

struct FluxInputs {
  Tensor img;  // f32 [B, L_img, in_channels]: packed latent tokens (x_t)
  // The ids stay host tensors in a capture (graph mode): they fix the RoPE table, which enters the
  // program as an input, while every other field may be a value of the program.
  Tensor img_ids;    // f32 [L_img, 3]: (0, row, col) per token, BFL's / diffusers' ids
  Tensor txt;        // f32 [B, L_txt, context_in_dim]: T5's last hidden state
  Tensor txt_ids;    // f32 [L_txt, 3]: zeros
  Tensor timesteps;  // f32 [B] in [0, 1] (the model multiplies by 1000, as BFL and diffusers do)
  Tensor y;          // f32 [B, vec_in_dim]: CLIP pooled
  Tensor guidance;  // f32 [B] (flux-dev's distilled guidance scale), undefined for models without guidance_in
};

// sinusoid(time_factor * t, dim) as BFL's timestep_embedding (= diffusers' Timesteps with
// flip_sin_to_cos, shift 0): [cos(t f_i); sin(t f_i)], f_i = 10000^(-i / (dim/2)). t [B] -> [B, dim]
// in `dtype`; a constant (no gradient flows to t). Computed in f32 as BFL and diffusers compute it
// (their f32 rounding of 1000 t ~ 1000 moves entries by up to ~1e-4, so parity needs the same
// steps), and in f64 for an f64 model. t may be a value of a captured program (ops::sinusoid).
Tensor timestep_embedding(const Tensor& t, int64_t dim, DType dtype = kF32, double time_factor = 1000.0);

// The RoPE table of the tokens whose ids are `ids` [L, n_axes]: row l holds, axis after axis, the
// angles ids[l, a] * theta^(-2j / axes_dim[a]) (j < axes_dim[a] / 2), computed in f64 and stored
// f32 as BFL and diffusers do; with RopeLayout::interleaved, token l uses row l (start_pos 0).
ops::RopeTable rope_table(const Tensor& ids, const std::vector<int64_t>& axes_dim, double theta);

// Linear -> SiLU -> Linear (time_in, vector_in, guidance_in).
class MLPEmbedder : public nn::Module {
 public:
  MLPEmbedder(int64_t in_dim, int64_t hidden_dim, TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  std::shared_ptr<nn::Linear> in_layer, out_layer;
};

// RMSNorm over each head (eps 1e-6) whose weight BFL calls `scale`.
class HeadRMSNorm : public nn::Module {
 public:
  HeadRMSNorm(int64_t head_dim, TensorOptions opts);
  Tensor forward(const Tensor& x) const;           // x [..., head_dim]
  void reset_parameters(Generator& gen) override;  // scale = 1
  Tensor scale;
};

class QKNorm : public nn::Module {
 public:
  QKNorm(int64_t head_dim, TensorOptions opts);
  std::shared_ptr<HeadRMSNorm> query_norm, key_norm;
};

// One stream's attention weights in a double block: qkv (fused [q; k; v]), Q/K norms, proj.
class SelfAttention : public nn::Module {
 public:
  SelfAttention(int64_t dim, int64_t num_heads, bool qkv_bias, TensorOptions opts);
  std::shared_ptr<nn::Linear> qkv;
  std::shared_ptr<QKNorm> norm;
  std::shared_ptr<nn::Linear> proj;
};

// Linear (named "0") -> tanh GELU -> Linear (named "2"), BFL's nn.Sequential indices.
class Mlp : public nn::Module {
 public:
  Mlp(int64_t dim, int64_t hidden, TensorOptions opts);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// lin(silu(vec)) split into `multiplier` chunks of width dim (shift, scale, gate, ...).
class Modulation : public nn::Module {
 public:
  Modulation(int64_t dim, int64_t multiplier, TensorOptions opts);
  // vec [B, dim] -> multiplier tensors [B, 1, dim]
  std::vector<Tensor> forward(const Tensor& vec) const;
  std::shared_ptr<nn::Linear> lin;
};

// What runs attention on q, k, v [B, L, H, D] (RoPE applied) and gives [B, L, H, D]: unset, splash
// attention over every pair of the tokens given; a parallel plan sets another (context
// parallelism's ring over the ranks' tokens).
using AttendFn = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;

// What every block of one forward shares besides its input: the RoPE table of [txt; img], the
// text length and the attention. Blocks capture it by value (activation checkpointing reruns them).
struct BlockContext {
  ops::RopeTable pe;
  int64_t txt_len = 0;
  AttendFn attend;
};

// A block's input and output: [vec; txt; img] along the sequence, [B, 1 + L_txt + L_img, hidden],
// the conditioning vector riding as a first token that each block reads and passes on unchanged.
// So the blocks are functions of one tensor and their parameters: activation checkpointing and FSDP
// wrap the call, and graph mode runs them as a loop (autograd::scan_blocks), which carries vec and
// its gradient from block to block.
// Both streams, one joint attention.
class DoubleStreamBlock : public nn::Module {
 public:
  DoubleStreamBlock(const FluxModelArgs& args, TensorOptions opts);
  Tensor forward(const Tensor& x, const BlockContext& ctx) const;
  Tensor operator()(const Tensor& x, const BlockContext& ctx) {
    return run_forward(x, [this, ctx](const Tensor& in) { return forward(in, ctx); });
  }
  std::shared_ptr<Modulation> img_mod, txt_mod;
  std::shared_ptr<SelfAttention> img_attn, txt_attn;
  std::shared_ptr<Mlp> img_mlp, txt_mlp;

 private:
  int64_t num_heads_;
};

// linear1 -> [q; k; v; mlp], linear2([attention; gelu(mlp)]), one modulation (shift, scale, gate).
class SingleStreamBlock : public nn::Module {
 public:
  SingleStreamBlock(const FluxModelArgs& args, TensorOptions opts);
  Tensor forward(const Tensor& x, const BlockContext& ctx) const;
  Tensor operator()(const Tensor& x, const BlockContext& ctx) {
    return run_forward(x, [this, ctx](const Tensor& in) { return forward(in, ctx); });
  }
  std::shared_ptr<nn::Linear> linear1, linear2;
  std::shared_ptr<QKNorm> norm;
  std::shared_ptr<Modulation> modulation;

 private:
  int64_t num_heads_, hidden_, mlp_hidden_;
};

// adaLN_modulation (SiLU, Linear) -> (shift, scale); linear(norm(x) (1 + scale) + shift).
class LastLayer : public nn::Module {
 public:
  LastLayer(int64_t hidden, int64_t out_channels, TensorOptions opts);
  Tensor forward(const Tensor& x, const Tensor& vec) const;
  std::shared_ptr<nn::Linear> linear;
  std::shared_ptr<nn::Linear> modulation;  // registered as "adaLN_modulation.1" (BFL's Sequential index)
};

class FluxTransformer : public nn::Module {
 public:
  // Parameters start at zero; init_weights(gen) gives PyTorch's Linear defaults and unit Q/K norm
  // scales (BFL's and diffusers' initialisation).
  explicit FluxTransformer(const FluxModelArgs& args, TensorOptions opts = {});
  // -> f32 [B, L_img, in_channels]: the predicted velocity (noise - x0).
  Tensor operator()(const FluxInputs& in);
  const FluxModelArgs& args() const { return args_; }
  void set_attend(AttendFn fn) { attend_ = std::move(fn); }

  std::shared_ptr<nn::Linear> img_in, txt_in;
  std::shared_ptr<MLPEmbedder> time_in, vector_in;
  std::shared_ptr<MLPEmbedder> guidance_in;  // null unless args.guidance_embed
  std::shared_ptr<nn::ModuleList<DoubleStreamBlock>> double_blocks;
  std::shared_ptr<nn::ModuleList<SingleStreamBlock>> single_blocks;
  std::shared_ptr<LastLayer> final_layer;

 private:
  FluxModelArgs args_;
  AttendFn attend_;
};

// diffusers' _pack_latents / BFL's rearrange "b c (h ph) (w pw) -> b (h w) (c ph pw)" and back.
Tensor pack_latents(const Tensor& latents /*[B, C, H, W]*/, int64_t patch_size);
// H, W in latent pixels.
Tensor unpack_latents(const Tensor& tokens /*[B, L, C*p*p]*/, int64_t height, int64_t width,
                      int64_t patch_size);
Tensor image_ids(int64_t height, int64_t width, int64_t patch_size);  // [H/p * W/p, 3]
Tensor text_ids(int64_t length);                                      // [length, 3] zeros

}  // namespace titan::models::flux
