#include "titan/models/flux/model.h"

#include <cmath>

#include "titan/attention/splash.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/models/common/run_blocks.h"
#include "titan/nn/init.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/cat.h"
#include "titan/ops/norm.h"
#include "titan/ops/sinusoid.h"

namespace titan::models::flux {

namespace {

constexpr double kNormEps = 1e-6;  // BFL's LayerNorms and Q/K RMSNorms
constexpr int64_t kTimeDim = 256;

// (1 + scale) x + shift, scale and shift [B, 1, D] over x [B, L, D].
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  return x * (scale + 1.0) + shift;
}

Tensor layer_norm(const Tensor& x) {
  return ops::layer_norm(x, Tensor(), Tensor(), kNormEps);
}

// A [B, L, H * D] part of a fused projection as [B, L, H, D].
Tensor heads_of(const Tensor& part, int64_t heads) {
  return part.reshape({part.size(0), part.size(1), heads, part.size(2) / heads});
}

// softmax(q k^T / sqrt(D)) v over every pair of tokens, q/k/v [B, L, H, D] after their norms;
// RoPE rotates q and k first. -> [B, L, H * D].
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const BlockContext& ctx) {
  const int64_t batch = q.size(0), seq = q.size(1);
  const Tensor qr = ops::rope(q, ctx.pe, ops::RopeLayout::interleaved);
  const Tensor kr = ops::rope(k, ctx.pe, ops::RopeLayout::interleaved);
  Tensor out;
  if (ctx.attend) {
    out = ctx.attend(qr, kr, v.contiguous());
  } else {
    out = attention::splash_attention(qr, kr, v.contiguous(),
                                      attention::BlockMask::build(attention::Mask::every_pair(seq), batch, seq));
  }
  return out.reshape({batch, seq, q.size(2) * q.size(3)});
}

// f_i = exp(-log(10000) i / half) in T, in torch's order of operations (BFL's timestep_embedding,
// diffusers' get_timestep_embedding), so that each rounding is theirs.
template <typename T>
Tensor timestep_freqs(int64_t half) {
  const T neg_log_period = static_cast<T>(-std::log(10000.0));
  std::vector<T> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    freqs[i] = std::exp(neg_log_period * static_cast<T>(i) / static_cast<T>(half));
  return Tensor::from_vector<T>(freqs, {half});
}

}  // namespace

Tensor timestep_embedding(const Tensor& t, int64_t dim, DType dtype, double time_factor) {
  TITAN_CHECK(t.dim() == 1 && dim > 0 && dim % 2 == 0,
              "flux timestep embedding: expected t [B] and an even dim, got ", t.desc(), " and ", dim);
  const DType compute = dtype == kF64 ? kF64 : kF32;
  const Tensor freqs = compute == kF64 ? timestep_freqs<double>(dim / 2) : timestep_freqs<float>(dim / 2);
  return ops::sinusoid(ops::scale(t.detach().to(compute), time_factor), freqs).to(dtype);
}

ops::RopeTable rope_table(const Tensor& ids, const std::vector<int64_t>& axes_dim, double theta) {
  TITAN_CHECK(ids.dim() == 2 && ids.size(1) == static_cast<int64_t>(axes_dim.size()),
              "flux rope: ids must be [L, ", axes_dim.size(), "] (one column per RoPE axis), got ",
              ids.desc());
  TITAN_CHECK(!ids.is_lazy(), "flux rope: the token ids ", ids.desc(),
              " are values of the program being captured; keep img_ids and txt_ids host tensors (they "
              "fix the RoPE table, which enters the program as an input)");
  const std::vector<double> pos = ids.to(kF64).to_vector<double>();
  const int64_t seq = ids.size(0), n_axes = ids.size(1);
  // Column c of a row rotates by ids[axis[c]] * omega[c].
  std::vector<double> omega;
  std::vector<int64_t> axis;
  for (int64_t a = 0; a < n_axes; ++a)
    for (int64_t j = 0; j < axes_dim[a] / 2; ++j) {
      omega.push_back(1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(axes_dim[a])));
      axis.push_back(a);
    }
  const int64_t half = static_cast<int64_t>(omega.size());
  std::vector<float> cos(static_cast<size_t>(seq * half)), sin(cos.size());
  for (int64_t l = 0; l < seq; ++l)
    for (int64_t c = 0; c < half; ++c) {
      const double angle = pos[l * n_axes + axis[c]] * omega[c];
      cos[l * half + c] = static_cast<float>(std::cos(angle));
      sin[l * half + c] = static_cast<float>(std::sin(angle));
    }
  ops::RopeTable table;
  table.cos = Tensor::from_vector<float>(cos, {seq, half});
  table.sin = Tensor::from_vector<float>(sin, {seq, half});
  table.head_dim = 2 * half;
  table.rotary_dim = 2 * half;
  return table;
}

MLPEmbedder::MLPEmbedder(int64_t in_dim, int64_t hidden_dim, TensorOptions opts) {
  in_layer = register_module("in_layer", std::make_shared<nn::Linear>(in_dim, hidden_dim, true, opts));
  out_layer = register_module("out_layer", std::make_shared<nn::Linear>(hidden_dim, hidden_dim, true, opts));
}

Tensor MLPEmbedder::forward(const Tensor& x) const {
  return (*out_layer)(ops::silu((*in_layer)(x)));
}

HeadRMSNorm::HeadRMSNorm(int64_t head_dim, TensorOptions opts) {
  scale = register_parameter("scale", Tensor::ones({head_dim}, opts));
}

Tensor HeadRMSNorm::forward(const Tensor& x) const {
  return ops::rms_norm(x, scale, kNormEps);
}

// Through nn::init, which writes a sharded parameter's shard under deferred initialisation.
void HeadRMSNorm::reset_parameters(Generator&) { nn::init::ones_(scale); }

QKNorm::QKNorm(int64_t head_dim, TensorOptions opts) {
  query_norm = register_module("query_norm", std::make_shared<HeadRMSNorm>(head_dim, opts));
  key_norm = register_module("key_norm", std::make_shared<HeadRMSNorm>(head_dim, opts));
}

SelfAttention::SelfAttention(int64_t dim, int64_t num_heads, bool qkv_bias, TensorOptions opts) {
  qkv = register_module("qkv", std::make_shared<nn::Linear>(dim, 3 * dim, qkv_bias, opts));
  norm = register_module("norm", std::make_shared<QKNorm>(dim / num_heads, opts));
  proj = register_module("proj", std::make_shared<nn::Linear>(dim, dim, true, opts));
}

Mlp::Mlp(int64_t dim, int64_t hidden, TensorOptions opts) {
  fc1 = register_module("0", std::make_shared<nn::Linear>(dim, hidden, true, opts));
  fc2 = register_module("2", std::make_shared<nn::Linear>(hidden, dim, true, opts));
}

Tensor Mlp::forward(const Tensor& x) const {
  return (*fc2)(ops::gelu((*fc1)(x), ops::GeluApproximation::tanh));
}

Modulation::Modulation(int64_t dim, int64_t multiplier, TensorOptions opts) {
  lin = register_module("lin", std::make_shared<nn::Linear>(dim, multiplier * dim, true, opts));
}

std::vector<Tensor> Modulation::forward(const Tensor& vec) const {
  const Tensor out = (*lin)(ops::silu(vec)).unsqueeze(1);
  const int64_t dim = lin->in_features();
  return ops::split(out, std::vector<int64_t>(static_cast<size_t>(lin->out_features() / dim), dim), 2);
}

DoubleStreamBlock::DoubleStreamBlock(const FluxModelArgs& a, TensorOptions opts) : num_heads_(a.num_heads) {
  const int64_t h = a.hidden_size, m = a.mlp_hidden_dim();
  img_mod = register_module("img_mod", std::make_shared<Modulation>(h, 6, opts));
  img_attn = register_module("img_attn", std::make_shared<SelfAttention>(h, a.num_heads, a.qkv_bias, opts));
  img_mlp = register_module("img_mlp", std::make_shared<Mlp>(h, m, opts));
  txt_mod = register_module("txt_mod", std::make_shared<Modulation>(h, 6, opts));
  txt_attn = register_module("txt_attn", std::make_shared<SelfAttention>(h, a.num_heads, a.qkv_bias, opts));
  txt_mlp = register_module("txt_mlp", std::make_shared<Mlp>(h, m, opts));
}

Tensor DoubleStreamBlock::forward(const Tensor& x, const BlockContext& ctx) const {
  const int64_t txt_len = ctx.txt_len, img_len = x.size(1) - 1 - txt_len, h = x.size(2);
  // A block's input is [vec; txt; img]: the conditioning vector rides along as token 0.
  const std::vector<Tensor> parts = ops::split(x, {1, txt_len, img_len}, 1);
  const Tensor &vec_token = parts[0], &txt = parts[1], &img = parts[2];
  const Tensor vec = vec_token.reshape({x.size(0), h});
  const std::vector<Tensor> im = img_mod->forward(vec), tm = txt_mod->forward(vec);
  const std::vector<Tensor> img_qkv =
      ops::split((*img_attn->qkv)(modulate(layer_norm(img), im[0], im[1])), {h, h, h}, 2);
  const std::vector<Tensor> txt_qkv =
      ops::split((*txt_attn->qkv)(modulate(layer_norm(txt), tm[0], tm[1])), {h, h, h}, 2);
  auto qk = [&](const Tensor& part, const HeadRMSNorm& norm) {
    return norm.forward(heads_of(part, num_heads_));
  };
  const Tensor q =
      ops::cat({qk(txt_qkv[0], *txt_attn->norm->query_norm), qk(img_qkv[0], *img_attn->norm->query_norm)}, 1);
  const Tensor k =
      ops::cat({qk(txt_qkv[1], *txt_attn->norm->key_norm), qk(img_qkv[1], *img_attn->norm->key_norm)}, 1);
  const Tensor v = ops::cat({heads_of(txt_qkv[2], num_heads_), heads_of(img_qkv[2], num_heads_)}, 1);
  const std::vector<Tensor> attn = ops::split(attend(q, k, v, ctx), {txt_len, img_len}, 1);

  Tensor img_out = img + im[2] * (*img_attn->proj)(attn[1]);
  img_out = img_out + im[5] * img_mlp->forward(modulate(layer_norm(img_out), im[3], im[4]));
  Tensor txt_out = txt + tm[2] * (*txt_attn->proj)(attn[0]);
  txt_out = txt_out + tm[5] * txt_mlp->forward(modulate(layer_norm(txt_out), tm[3], tm[4]));
  return ops::cat({vec_token, txt_out, img_out}, 1);
}

SingleStreamBlock::SingleStreamBlock(const FluxModelArgs& a, TensorOptions opts)
    : num_heads_(a.num_heads), hidden_(a.hidden_size), mlp_hidden_(a.mlp_hidden_dim()) {
  linear1 = register_module("linear1",
                            std::make_shared<nn::Linear>(hidden_, 3 * hidden_ + mlp_hidden_, true, opts));
  linear2 =
      register_module("linear2", std::make_shared<nn::Linear>(hidden_ + mlp_hidden_, hidden_, true, opts));
  norm = register_module("norm", std::make_shared<QKNorm>(a.head_dim(), opts));
  modulation = register_module("modulation", std::make_shared<Modulation>(hidden_, 3, opts));
}

Tensor SingleStreamBlock::forward(const Tensor& x_vec, const BlockContext& ctx) const {
  const std::vector<Tensor> parts = ops::split(x_vec, {1, x_vec.size(1) - 1}, 1);
  const Tensor &vec_token = parts[0], &x = parts[1];
  const std::vector<Tensor> mod = modulation->forward(vec_token.reshape({x_vec.size(0), hidden_}));
  const std::vector<Tensor> fused = ops::split((*linear1)(modulate(layer_norm(x), mod[0], mod[1])),
                                               {hidden_, hidden_, hidden_, mlp_hidden_}, 2);
  const Tensor q = norm->query_norm->forward(heads_of(fused[0], num_heads_));
  const Tensor k = norm->key_norm->forward(heads_of(fused[1], num_heads_));
  const Tensor mlp = ops::gelu(fused[3], ops::GeluApproximation::tanh);
  const Tensor out = (*linear2)(ops::cat({attend(q, k, heads_of(fused[2], num_heads_), ctx), mlp}, 2));
  return ops::cat({vec_token, x + mod[2] * out}, 1);
}

LastLayer::LastLayer(int64_t hidden, int64_t out_channels, TensorOptions opts) {
  linear = register_module("linear", std::make_shared<nn::Linear>(hidden, out_channels, true, opts));
  const auto sequential = register_module("adaLN_modulation", std::make_shared<nn::Module>());
  modulation = sequential->register_module("1", std::make_shared<nn::Linear>(hidden, 2 * hidden, true, opts));
}

Tensor LastLayer::forward(const Tensor& x, const Tensor& vec) const {
  const int64_t h = x.size(2);
  const std::vector<Tensor> mod = ops::split((*modulation)(ops::silu(vec)).unsqueeze(1), {h, h}, 2);
  return (*linear)(modulate(layer_norm(x), mod[0], mod[1]));
}

FluxTransformer::FluxTransformer(const FluxModelArgs& args, TensorOptions opts) : args_(args) {
  args.validate();
  const int64_t h = args.hidden_size;
  img_in = register_module("img_in", std::make_shared<nn::Linear>(args.in_channels, h, true, opts));
  time_in = register_module("time_in", std::make_shared<MLPEmbedder>(kTimeDim, h, opts));
  vector_in = register_module("vector_in", std::make_shared<MLPEmbedder>(args.vec_in_dim, h, opts));
  if (args.guidance_embed)
    guidance_in = register_module("guidance_in", std::make_shared<MLPEmbedder>(kTimeDim, h, opts));
  txt_in = register_module("txt_in", std::make_shared<nn::Linear>(args.context_in_dim, h, true, opts));
  double_blocks = register_module("double_blocks", std::make_shared<nn::ModuleList<DoubleStreamBlock>>());
  for (int64_t i = 0; i < args.depth; ++i)
    double_blocks->push_back(std::make_shared<DoubleStreamBlock>(args, opts));
  single_blocks = register_module("single_blocks", std::make_shared<nn::ModuleList<SingleStreamBlock>>());
  for (int64_t i = 0; i < args.depth_single_blocks; ++i)
    single_blocks->push_back(std::make_shared<SingleStreamBlock>(args, opts));
  final_layer = register_module("final_layer", std::make_shared<LastLayer>(h, args.in_channels, opts));
}

Tensor FluxTransformer::operator()(const FluxInputs& in) {
  const FluxModelArgs& a = args_;
  TITAN_CHECK(in.img.dim() == 3 && in.img.size(2) == a.in_channels, "flux: img must be [B, L_img, ",
              a.in_channels, "] (packed latent tokens), got ", in.img.desc());
  const int64_t batch = in.img.size(0), img_len = in.img.size(1);
  TITAN_CHECK(in.txt.dim() == 3 && in.txt.size(0) == batch && in.txt.size(2) == a.context_in_dim,
              "flux: txt must be [", batch, ", L_txt, ", a.context_in_dim, "], got ", in.txt.desc());
  const int64_t txt_len = in.txt.size(1);
  TITAN_CHECK(in.img_ids.dim() == 2 && in.img_ids.size(0) == img_len && in.txt_ids.dim() == 2 &&
                  in.txt_ids.size(0) == txt_len,
              "flux: img_ids must be [", img_len, ", 3] and txt_ids [", txt_len, ", 3], got ",
              in.img_ids.desc(), " and ", in.txt_ids.desc());
  TITAN_CHECK(in.timesteps.dim() == 1 && in.timesteps.size(0) == batch, "flux: timesteps must be [", batch,
              "], got ", in.timesteps.desc());
  TITAN_CHECK(in.y.dim() == 2 && in.y.size(0) == batch && in.y.size(1) == a.vec_in_dim, "flux: y must be [",
              batch, ", ", a.vec_in_dim, "] (CLIP pooled), got ", in.y.desc());
  TITAN_CHECK(in.guidance.defined() == a.guidance_embed,
              a.guidance_embed
                  ? "flux: this model embeds a guidance scale (guidance_embed); pass guidance [B]"
                  : "flux: this model has no guidance_in (guidance_embed false); leave guidance undefined");

  // Through the root's hooks: FSDP gathers the root unit (embedders, final layer) around the call.
  return run_forward([&] {
    const DType dtype = in.img.dtype();
    Tensor vec = (*time_in)(timestep_embedding(in.timesteps, kTimeDim, dtype));
    if (a.guidance_embed) {
      TITAN_CHECK(in.guidance.dim() == 1 && in.guidance.size(0) == batch, "flux: guidance must be [", batch,
                  "], got ", in.guidance.desc());
      vec = vec + (*guidance_in)(timestep_embedding(in.guidance, kTimeDim, dtype));
    }
    vec = vec + (*vector_in)(in.y);

    const BlockContext ctx{
        .pe = rope_table(ops::cat({in.txt_ids.to(kF32), in.img_ids.to(kF32)}, 0), a.axes_dim, a.theta),
        .txt_len = txt_len,
        .attend = attend_};
    Tensor x = ops::cat({vec.unsqueeze(1), (*txt_in)(in.txt), (*img_in)(in.img)}, 1);
    x = common::run_blocks(*double_blocks, 0, static_cast<int64_t>(double_blocks->size()), x,
                           [ctx](DoubleStreamBlock& block, const Tensor& h) { return block(h, ctx); });
    x = common::run_blocks(*single_blocks, 0, static_cast<int64_t>(single_blocks->size()), x,
                           [ctx](SingleStreamBlock& block, const Tensor& h) { return block(h, ctx); });
    const std::vector<Tensor> parts = ops::split(x, {1, txt_len, img_len}, 1);
    return final_layer->forward(parts[2], parts[0].reshape({batch, a.hidden_size}));
  });
}

Tensor pack_latents(const Tensor& latents, int64_t p) {
  TITAN_CHECK(latents.dim() == 4 && p > 0 && latents.size(2) % p == 0 && latents.size(3) % p == 0,
              "flux pack_latents: expected latents [B, C, H, W] with H and W multiples of the patch size ", p,
              ", got ", latents.desc());
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2) / p, w = latents.size(3) / p;
  return latents.reshape({b, c, h, p, w, p}).permute({0, 2, 4, 1, 3, 5}).reshape({b, h * w, c * p * p});
}

Tensor unpack_latents(const Tensor& tokens, int64_t height, int64_t width, int64_t p) {
  TITAN_CHECK(p > 0 && height % p == 0 && width % p == 0, "flux unpack_latents: height ", height,
              " and width ", width, " must be multiples of the patch size ", p);
  const int64_t h = height / p, w = width / p;
  TITAN_CHECK(tokens.dim() == 3 && tokens.size(1) == h * w && tokens.size(2) % (p * p) == 0,
              "flux unpack_latents: expected tokens [B, ", h * w, ", C * ", p * p, "] for ", height, " x ",
              width, " latents, got ", tokens.desc());
  const int64_t b = tokens.size(0), c = tokens.size(2) / (p * p);
  return tokens.reshape({b, h, w, c, p, p}).permute({0, 3, 1, 4, 2, 5}).reshape({b, c, height, width});
}

Tensor image_ids(int64_t height, int64_t width, int64_t p) {
  TITAN_CHECK(p > 0 && height % p == 0 && width % p == 0, "flux image_ids: height ", height, " and width ",
              width, " must be multiples of the patch size ", p);
  const int64_t h = height / p, w = width / p;
  std::vector<float> ids(static_cast<size_t>(h * w * 3), 0.0f);
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c) {
      ids[(r * w + c) * 3 + 1] = static_cast<float>(r);
      ids[(r * w + c) * 3 + 2] = static_cast<float>(c);
    }
  return Tensor::from_vector<float>(ids, {h * w, 3});
}

Tensor text_ids(int64_t length) {
  return Tensor::zeros({length, 3});
}

}  // namespace titan::models::flux
