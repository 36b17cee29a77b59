#include "titan/models/flux/state_dict_adapter.h"

#include <set>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/core/meta.h"
#include "titan/models/flux/model.h"

namespace titan::models::flux {

namespace {

using json = nlohmann::json;
namespace jf = json_fields;

constexpr const char* kClassName = "FluxTransformer2DModel";
const std::set<std::string> kReadKeys = {
    "patch_size",          "in_channels",         "out_channels",
    "num_layers",          "num_single_layers",   "attention_head_dim",
    "num_attention_heads", "joint_attention_dim", "pooled_projection_dim",
    "guidance_embeds",     "axes_dims_rope"};

// Rows [bfl_row, bfl_row + rows) of BFL's tensor are rows [diffusers_row, ...) of diffusers'.
struct Piece {
  std::string diffusers, bfl;
  int64_t bfl_row = 0, rows = 0, diffusers_row = 0;
};

class PieceList {
 public:
  explicit PieceList(const std::map<std::string, Shape>& ours) : ours_(ours) {}
  // A whole tensor renamed.
  void same(const std::string& d, const std::string& b) { slice(d, b, 0, ours_.at(b)[0], 0); }
  // Weight and bias (when the model has one) of a linear renamed, or rows of it.
  void linear(const std::string& d, const std::string& b, int64_t row = 0, int64_t rows = -1,
              int64_t d_row = 0) {
    for (const char* s : {".weight", ".bias"})
      if (ours_.count(b + s)) slice(d + s, b + s, row, rows < 0 ? ours_.at(b + s)[0] : rows, d_row);
  }
  void slice(const std::string& d, const std::string& b, int64_t row, int64_t rows, int64_t d_row) {
    pieces_.push_back({d, b, row, rows, d_row});
  }
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  const std::map<std::string, Shape>& ours_;
  std::vector<Piece> pieces_;
};

std::vector<Piece> pieces(const FluxModelArgs& a) {
  const std::map<std::string, Shape> ours = shapes(a);
  PieceList p(ours);
  const int64_t h = a.hidden_size, m = a.mlp_hidden_dim();
  p.linear("x_embedder", "img_in");
  p.linear("context_embedder", "txt_in");
  p.linear("time_text_embed.timestep_embedder.linear_1", "time_in.in_layer");
  p.linear("time_text_embed.timestep_embedder.linear_2", "time_in.out_layer");
  p.linear("time_text_embed.text_embedder.linear_1", "vector_in.in_layer");
  p.linear("time_text_embed.text_embedder.linear_2", "vector_in.out_layer");
  if (a.guidance_embed) {
    p.linear("time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer");
    p.linear("time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer");
  }
  for (int64_t i = 0; i < a.depth; ++i) {
    const std::string d = "transformer_blocks." + std::to_string(i) + ".";
    const std::string b = "double_blocks." + std::to_string(i) + ".";
    p.linear(d + "norm1.linear", b + "img_mod.lin");
    p.linear(d + "norm1_context.linear", b + "txt_mod.lin");
    const char* qkv[] = {"q", "k", "v"};
    for (int64_t j = 0; j < 3; ++j) {
      p.linear(d + "attn.to_" + qkv[j], b + "img_attn.qkv", j * h, h);
      p.linear(d + "attn.add_" + qkv[j] + "_proj", b + "txt_attn.qkv", j * h, h);
    }
    p.same(d + "attn.norm_q.weight", b + "img_attn.norm.query_norm.scale");
    p.same(d + "attn.norm_k.weight", b + "img_attn.norm.key_norm.scale");
    p.same(d + "attn.norm_added_q.weight", b + "txt_attn.norm.query_norm.scale");
    p.same(d + "attn.norm_added_k.weight", b + "txt_attn.norm.key_norm.scale");
    p.linear(d + "attn.to_out.0", b + "img_attn.proj");
    p.linear(d + "attn.to_add_out", b + "txt_attn.proj");
    p.linear(d + "ff.net.0.proj", b + "img_mlp.0");
    p.linear(d + "ff.net.2", b + "img_mlp.2");
    p.linear(d + "ff_context.net.0.proj", b + "txt_mlp.0");
    p.linear(d + "ff_context.net.2", b + "txt_mlp.2");
  }
  for (int64_t i = 0; i < a.depth_single_blocks; ++i) {
    const std::string d = "single_transformer_blocks." + std::to_string(i) + ".";
    const std::string b = "single_blocks." + std::to_string(i) + ".";
    const char* qkv[] = {"q", "k", "v"};
    for (int64_t j = 0; j < 3; ++j) p.linear(d + "attn.to_" + qkv[j], b + "linear1", j * h, h);
    p.linear(d + "proj_mlp", b + "linear1", 3 * h, m);
    p.linear(d + "proj_out", b + "linear2");
    p.linear(d + "norm.linear", b + "modulation.lin");
    p.same(d + "attn.norm_q.weight", b + "norm.query_norm.scale");
    p.same(d + "attn.norm_k.weight", b + "norm.key_norm.scale");
  }
  // BFL's (shift, scale) is diffusers' (scale, shift).
  p.linear("norm_out.linear", "final_layer.adaLN_modulation.1", h, h, 0);
  p.linear("norm_out.linear", "final_layer.adaLN_modulation.1", 0, h, h);
  p.linear("proj_out", "final_layer.linear");
  return p.pieces();
}

void check_tensors(const nn::StateDict& state, const std::map<std::string, Shape>& expected,
                   const std::string& what) {
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    auto it = state.find(name);
    if (it == state.end())
      problems.push_back("missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
    else if (it->second.sizes() != shape)
      problems.push_back("tensor '" + name + "' is " + it->second.desc() + ", expected shape " +
                         shape_str(shape));
  }
  for (const auto& [name, t] : state)
    if (!expected.count(name)) problems.push_back("unexpected tensor '" + name + "'");
  if (problems.empty()) return;
  std::string list;
  for (size_t i = 0; i < problems.size() && i < 12; ++i) list += "\n  - " + problems[i];
  if (problems.size() > 12) list += "\n  - ... and " + std::to_string(problems.size() - 12) + " more";
  TITAN_CHECK(false, "flux transformer: the tensors are not ", what, " of these sizes:", list,
              "\nThe file holds another model, or the model arguments differ from the file's");
}

// Each target tensor assembled from its pieces of the source (to_diffusers: source BFL's).
nn::StateDict convert(const nn::StateDict& src, const std::map<std::string, Shape>& target_shapes,
                      const FluxModelArgs& a, bool to_diffusers) {
  nn::StateDict out;
  for (const auto& [name, shape] : target_shapes) out.emplace(name, Tensor());
  for (const Piece& p : pieces(a)) {
    const std::string& from = to_diffusers ? p.bfl : p.diffusers;
    const std::string& to = to_diffusers ? p.diffusers : p.bfl;
    const Tensor& s = src.at(from);
    Tensor& t = out.at(to);
    if (!t.defined()) t = Tensor::empty(target_shapes.at(to), s.options());
    const int64_t from_row = to_diffusers ? p.bfl_row : p.diffusers_row;
    const int64_t to_row = to_diffusers ? p.diffusers_row : p.bfl_row;
    t.narrow(0, to_row, p.rows).copy_(s.detach().narrow(0, from_row, p.rows));
  }
  return out;
}

}  // namespace

FluxModelArgs parse_diffusers_config(const json& config, const std::string& where, int64_t patch_size) {
  const jf::JsonPath at{where, ""};
  jf::object(config, at);
  for (const auto& [key, value] : config.items())
    TITAN_CHECK(
        key.starts_with("_") || kReadKeys.count(key), (at / key).str(),
        " is not a key of diffusers' FluxTransformer2DModel that titan knows; titan refuses it rather than "
        "ignore what it may change");
  const std::string cls = jf::field_or<std::string>(config, "_class_name", kClassName, at);
  TITAN_CHECK(cls == kClassName, (at / "_class_name").str(), " is \"", cls, "\"; titan reads ", kClassName,
              " folders only");
  const int64_t dpatch = jf::field_or<int64_t>(config, "patch_size", 1, at);
  TITAN_CHECK(
      dpatch == 1, (at / "patch_size").str(), " is ", dpatch,
      "; diffusers' patch_size widens proj_out to patch_size^2 x out_channels, which no FLUX checkpoint does "
      "(they pack 2 x 2 in the pipeline and say 1 here); titan's transformer needs 1");
  FluxModelArgs a;
  a.in_channels = jf::field_or<int64_t>(config, "in_channels", 64, at);
  if (const json& v = jf::optional_member(config, "out_channels", at); !v.is_null()) {
    const int64_t out = jf::as<int64_t>(v, at / "out_channels");
    TITAN_CHECK(out == a.in_channels, (at / "out_channels").str(), " is ", out, " but in_channels is ",
                a.in_channels, "; titan's transformer predicts a velocity as wide as its input");
  }
  a.depth = jf::field_or<int64_t>(config, "num_layers", 19, at);
  a.depth_single_blocks = jf::field_or<int64_t>(config, "num_single_layers", 38, at);
  a.num_heads = jf::field_or<int64_t>(config, "num_attention_heads", 24, at);
  a.hidden_size = a.num_heads * jf::field_or<int64_t>(config, "attention_head_dim", 128, at);
  a.context_in_dim = jf::field_or<int64_t>(config, "joint_attention_dim", 4096, at);
  a.vec_in_dim = jf::field_or<int64_t>(config, "pooled_projection_dim", 768, at);
  a.guidance_embed = jf::field_or<bool>(config, "guidance_embeds", false, at);
  if (const json& v = jf::optional_member(config, "axes_dims_rope", at); !v.is_null()) {
    const json& list = jf::array(v, at / "axes_dims_rope");
    a.axes_dim.clear();
    for (size_t i = 0; i < list.size(); ++i)
      a.axes_dim.push_back(jf::as<int64_t>(list[i], (at / "axes_dims_rope")[i]));
  }
  a.patch_size = patch_size;
  TITAN_CHECK(patch_size > 0 && a.in_channels % (patch_size * patch_size) == 0, where, ": in_channels ",
              a.in_channels, " is not a multiple of the packing patch ", patch_size,
              "^2; pass the pipeline's patch size");
  a.latent_channels = a.in_channels / (patch_size * patch_size);
  try {
    a.validate();
  } catch (const Error& e) {
    TITAN_CHECK(false, where, " describes no model titan can build: ", e.what());
  }
  return a;
}

json to_diffusers_config(const FluxModelArgs& a) {
  a.validate();
  return {{"_class_name", kClassName},
          {"patch_size", 1},
          {"in_channels", a.in_channels},
          {"out_channels", nullptr},
          {"num_layers", a.depth},
          {"num_single_layers", a.depth_single_blocks},
          {"attention_head_dim", a.head_dim()},
          {"num_attention_heads", a.num_heads},
          {"joint_attention_dim", a.context_in_dim},
          {"pooled_projection_dim", a.vec_in_dim},
          {"guidance_embeds", a.guidance_embed},
          {"axes_dims_rope", a.axes_dim}};
}

std::map<std::string, Shape> shapes(const FluxModelArgs& args) {
  const MetaScope meta;  // shapes only: flux-dev's 12B parameters need no memory for this
  const FluxTransformer model(args);
  std::map<std::string, Shape> out;
  for (const auto& [name, t] : model.state_dict()) out.emplace(name, t.sizes());
  return out;
}

std::map<std::string, Shape> diffusers_shapes(const FluxModelArgs& args) {
  const std::map<std::string, Shape> ours = shapes(args);
  std::map<std::string, Shape> out;
  for (const Piece& p : pieces(args)) {
    auto [it, fresh] = out.emplace(p.diffusers, ours.at(p.bfl));
    if (fresh)
      it->second[0] = p.rows;
    else
      it->second[0] += p.rows;
  }
  return out;
}

nn::StateDict to_diffusers(const nn::StateDict& ours, const FluxModelArgs& args) {
  check_tensors(ours, shapes(args), "titan's FLUX transformer");
  return convert(ours, diffusers_shapes(args), args, true);
}

nn::StateDict from_diffusers(const nn::StateDict& diffusers, const FluxModelArgs& args) {
  check_tensors(diffusers, diffusers_shapes(args), "diffusers' FluxTransformer2DModel");
  return convert(diffusers, shapes(args), args, false);
}

nn::StateDict from_bfl(const nn::StateDict& bfl, const FluxModelArgs& args) {
  check_tensors(bfl, shapes(args), "BFL's FLUX transformer");
  return bfl;
}

}  // namespace titan::models::flux
