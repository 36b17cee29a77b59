#include "titan/models/autoencoder/state_dict_adapter.h"

#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/core/meta.h"
#include "titan/models/autoencoder/model.h"

namespace titan::models::autoencoder {

namespace {

using json = nlohmann::json;
namespace jf = json_fields;

constexpr const char* kClassName = "AutoencoderKL";
constexpr const char* kDownBlock = "DownEncoderBlock2D";
constexpr const char* kUpBlock = "UpDecoderBlock2D";

// AutoencoderKL's keys that change nothing titan computes: tiling's tile size and the pipelines'
// hint to run the model in f32.
const std::set<std::string> kIgnoredKeys = {"sample_size", "force_upcast"};
const std::set<std::string> kReadKeys = {"in_channels",
                                         "out_channels",
                                         "latent_channels",
                                         "block_out_channels",
                                         "layers_per_block",
                                         "norm_num_groups",
                                         "scaling_factor",
                                         "shift_factor",
                                         "use_quant_conv",
                                         "use_post_quant_conv",
                                         "mid_block_add_attention",
                                         "down_block_types",
                                         "up_block_types",
                                         "act_fn",
                                         "latents_mean",
                                         "latents_std"};

// The block types, each of which must be `type`, one per level.
void check_block_types(const json& config, const std::string& key, const char* type, size_t levels,
                       const jf::JsonPath& at) {
  const json& v = jf::optional_member(config, key, at);
  if (v.is_null()) {
    TITAN_CHECK(levels == 1, at.str(), ": \"", key, "\" is absent, which diffusers reads as one ", type,
                ", but block_out_channels lists ", levels, " levels; give one block type per level");
    return;
  }
  const json& list = jf::array(v, at / key);
  TITAN_CHECK(list.size() == levels, (at / key).str(), " lists ", list.size(),
              " blocks but block_out_channels ", levels, "; give one block type per level");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string t = jf::as<std::string>(list[i], (at / key)[i]);
    TITAN_CHECK(t == type, (at / key)[i].str(), " is \"", t, "\"; titan's autoencoder has only ", type,
                " levels (FLUX's), no attention levels or other block types");
  }
}

// Our name -> BFL's, per the layout in state_dict_adapter.h. `parts` is our name split at dots.
std::string bfl_name(const std::vector<std::string>& parts, int64_t levels) {
  std::vector<std::string> out;
  auto rest = [&](size_t from) {
    for (size_t i = from; i < parts.size(); ++i) {
      const std::string& p = parts[i];
      out.push_back(p == "conv_shortcut" ? "nin_shortcut" : p);
    }
  };
  out.push_back(parts[0]);  // encoder / decoder
  const std::string& part = parts[1];
  if (part == "down_blocks" || part == "up_blocks") {
    const bool down = part == "down_blocks";
    const int64_t i = std::stoll(parts[2]);
    out.push_back(down ? "down" : "up");
    out.push_back(std::to_string(down ? i : levels - 1 - i));
    if (parts[3] == "resnets") {
      out.push_back("block");
      rest(4);
    } else {  // {down,up}samplers.0.conv...
      out.push_back(down ? "downsample" : "upsample");
      rest(5);
    }
  } else if (part == "mid_block") {
    out.push_back("mid");
    if (parts[2] == "resnets") {
      out.push_back(parts[3] == "0" ? "block_1" : "block_2");
      rest(4);
    } else {  // attentions.0.<projection>
      out.push_back("attn_1");
      const std::string& proj = parts[4];
      if (proj == "to_out") {
        out.push_back("proj_out");
        rest(6);
      } else {
        out.push_back(proj == "group_norm" ? "norm" : proj.substr(3));  // to_q -> q
        rest(5);
      }
    }
  } else if (part == "conv_norm_out") {
    out.push_back("norm_out");
    rest(2);
  } else {
    rest(1);
  }
  std::string name;
  for (const std::string& p : out) name += (name.empty() ? "" : ".") + p;
  return name;
}

std::vector<std::string> split(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream in(name);
  for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
  return parts;
}

bool is_attention_projection(const std::string& ours) {
  return ours.find(".attentions.0.to_") != std::string::npos && ours.ends_with(".weight");
}

// (our name, BFL's name) for every tensor.
std::vector<std::pair<std::string, std::string>> bfl_names(const ModelArgs& args) {
  std::vector<std::pair<std::string, std::string>> names;
  for (const auto& [ours, shape] : shapes(args))
    names.emplace_back(ours, bfl_name(split(ours), args.levels()));
  return names;
}

void check_no_quant_convs(const ModelArgs& args) {
  TITAN_CHECK(
      !args.use_quant_conv && !args.use_post_quant_conv,
      "autoencoder: BFL's ae.safetensors layout has no quant_conv or post_quant_conv, but this model has ",
      args.use_quant_conv ? "quant_conv" : "post_quant_conv",
      "; save it as a diffusers folder (config.json + diffusion_pytorch_model.safetensors) instead");
}

}  // namespace

ModelArgs parse_diffusers_config(const json& config, const std::string& where) {
  const jf::JsonPath at{where, ""};
  jf::object(config, at);
  for (const auto& [key, value] : config.items())
    TITAN_CHECK(key.starts_with("_") || kReadKeys.count(key) || kIgnoredKeys.count(key), (at / key).str(),
                " is not a key of diffusers' AutoencoderKL that titan knows; titan refuses it rather than "
                "ignore what it may change");
  const std::string cls = jf::field_or<std::string>(config, "_class_name", kClassName, at);
  TITAN_CHECK(cls == kClassName, (at / "_class_name").str(), " is \"", cls, "\"; titan reads ", kClassName,
              " folders only");
  const std::string act = jf::field_or<std::string>(config, "act_fn", "silu", at);
  TITAN_CHECK(act == "silu", (at / "act_fn").str(), " is \"", act, "\"; titan's autoencoder uses silu only");
  for (const char* key : {"latents_mean", "latents_std"})
    TITAN_CHECK(jf::optional_member(config, key, at).is_null(), (at / key).str(),
                " is set; titan's autoencoder normalises latents by scaling_factor and shift_factor only");

  ModelArgs a;
  a.in_channels = jf::field_or<int64_t>(config, "in_channels", 3, at);
  a.out_channels = jf::field_or<int64_t>(config, "out_channels", 3, at);
  a.latent_channels = jf::field_or<int64_t>(config, "latent_channels", 4, at);
  a.layers_per_block = jf::field_or<int64_t>(config, "layers_per_block", 1, at);
  a.norm_num_groups = jf::field_or<int64_t>(config, "norm_num_groups", 32, at);
  a.scaling_factor = jf::field_or<double>(config, "scaling_factor", 0.18215, at);
  a.shift_factor = jf::field_or<double>(config, "shift_factor", 0.0, at);  // diffusers' None: no shift
  a.use_quant_conv = jf::field_or<bool>(config, "use_quant_conv", true, at);
  a.use_post_quant_conv = jf::field_or<bool>(config, "use_post_quant_conv", true, at);
  a.mid_block_add_attention = jf::field_or<bool>(config, "mid_block_add_attention", true, at);
  a.block_out_channels = {64};
  if (const json& v = jf::optional_member(config, "block_out_channels", at); !v.is_null()) {
    const json& list = jf::array(v, at / "block_out_channels");
    a.block_out_channels.clear();
    for (size_t i = 0; i < list.size(); ++i)
      a.block_out_channels.push_back(jf::as<int64_t>(list[i], (at / "block_out_channels")[i]));
  }
  check_block_types(config, "down_block_types", kDownBlock, a.block_out_channels.size(), at);
  check_block_types(config, "up_block_types", kUpBlock, a.block_out_channels.size(), at);
  try {
    a.validate();
  } catch (const Error& e) {
    TITAN_CHECK(false, where, " describes no model titan can build: ", e.what());
  }
  return a;
}

json to_diffusers_config(const ModelArgs& a) {
  a.validate();
  return {{"_class_name", kClassName},
          {"in_channels", a.in_channels},
          {"out_channels", a.out_channels},
          {"down_block_types", std::vector<std::string>(a.block_out_channels.size(), kDownBlock)},
          {"up_block_types", std::vector<std::string>(a.block_out_channels.size(), kUpBlock)},
          {"block_out_channels", a.block_out_channels},
          {"layers_per_block", a.layers_per_block},
          {"act_fn", "silu"},
          {"latent_channels", a.latent_channels},
          {"norm_num_groups", a.norm_num_groups},
          {"scaling_factor", a.scaling_factor},
          {"shift_factor", a.shift_factor},
          {"latents_mean", nullptr},
          {"latents_std", nullptr},
          {"use_quant_conv", a.use_quant_conv},
          {"use_post_quant_conv", a.use_post_quant_conv},
          {"mid_block_add_attention", a.mid_block_add_attention}};
}

std::map<std::string, Shape> shapes(const ModelArgs& args) {
  const MetaScope meta;  // shapes only: FLUX's 84M parameters need no memory for this
  const Autoencoder model(args);
  std::map<std::string, Shape> out;
  for (const auto& [name, t] : model.state_dict()) out.emplace(name, t.sizes());
  return out;
}

std::map<std::string, Shape> bfl_shapes(const ModelArgs& args) {
  check_no_quant_convs(args);
  const std::map<std::string, Shape> ours = shapes(args);
  std::map<std::string, Shape> out;
  for (const auto& [name, bfl] : bfl_names(args)) {
    Shape s = ours.at(name);
    if (is_attention_projection(name)) s = {s[0], s[1], 1, 1};
    out.emplace(bfl, s);
  }
  return out;
}

nn::StateDict to_bfl(const nn::StateDict& ours, const ModelArgs& args) {
  check_no_quant_convs(args);
  nn::StateDict out;
  for (const auto& [name, bfl] : bfl_names(args)) {
    auto it = ours.find(name);
    TITAN_CHECK(it != ours.end(), "autoencoder to_bfl: tensor '", name, "' is missing from the state dict");
    const Tensor& t = it->second;
    out.emplace(bfl, is_attention_projection(name) ? t.reshape({t.size(0), t.size(1), 1, 1}) : t);
  }
  return out;
}

nn::StateDict from_bfl(const nn::StateDict& bfl, const ModelArgs& args) {
  const std::map<std::string, Shape> expected = bfl_shapes(args);
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    auto it = bfl.find(name);
    if (it == bfl.end())
      problems.push_back("missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
    else if (it->second.sizes() != shape)
      problems.push_back("tensor '" + name + "' is " + it->second.desc() + ", expected shape " +
                         shape_str(shape));
  }
  for (const auto& [name, t] : bfl)
    if (!expected.count(name)) problems.push_back("unexpected tensor '" + name + "'");
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 12; ++i) list += "\n  - " + problems[i];
    if (problems.size() > 12) list += "\n  - ... and " + std::to_string(problems.size() - 12) + " more";
    TITAN_CHECK(false, "autoencoder from_bfl: the tensors are not BFL's autoencoder of these sizes:", list,
                "\nThe file holds another model, or the model arguments differ from the file's");
  }
  nn::StateDict out;
  for (const auto& [name, b] : bfl_names(args)) {
    const Tensor& t = bfl.at(b);
    out.emplace(name, is_attention_projection(name) ? t.reshape({t.size(0), t.size(1)}) : t);
  }
  return out;
}

}  // namespace titan::models::autoencoder
