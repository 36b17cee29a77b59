// titan's RoPE against transformers 5.24's (cases_rope.py): each rope_type's cos/sin table, read
// from a config.json by hf::rope_spec, within 1e-6 of transformers' rotary embedding evaluated in
// f64 at positions past the original context; and partial rotary, forward and backward, against
// Phi-3's, GPT-NeoX's and GPT-J's apply_rotary_pos_emb (f32: 1e-5 of the largest magnitude).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/models/common/hf_rope.h"
#include "titan/ops/rope.h"

namespace titan::test {
namespace {

namespace hf = models::common::hf;
using json = nlohmann::json;

constexpr double kTableTol = 1e-6;
constexpr double kTol = 1e-5;

// The spec a family's config.json gives, its top-level keys read as the family reads them.
ops::RopeSpec spec_of(const ParityCase& c) {
  const json config = json::parse(c.file.metadata.at("config"));
  const std::string arch = c.file.metadata.at("architecture");
  const hf::ConfigFields f(config, arch);
  hf::RopeModelFields model{
      .architecture = arch,
      .head_dim = f.integer("head_dim", f.integer("hidden_size") / f.integer("num_attention_heads")),
      .max_position_embeddings = f.integer("max_position_embeddings"),
      .partial_rotary_factor = std::nullopt,
      .original_max_position_embeddings = std::nullopt};
  if (f.find("partial_rotary_factor")) model.partial_rotary_factor = f.number("partial_rotary_factor");
  if (f.find("original_max_position_embeddings"))
    model.original_max_position_embeddings = f.integer("original_max_position_embeddings");
  return hf::rope_spec(f.rope(10000.0), model);
}

// titan's forward and backward against the family's apply_rotary_pos_emb, where the case has them.
void check_apply(const ParityCase& c, const ops::RopeTable& table, ops::RopeLayout layout,
                 const std::string& name) {
  if (!c.file.tensors.count("in.x")) return;
  Tensor x = c.input("in.x");
  Tensor y = ops::rope(x, table, layout, static_cast<int64_t>(c.attr("start_pos")));
  EXPECT_TRUE(tensors_close(y, c["out.y"], kTol, name + " forward"));
  y.backward(c["cot.y"]);
  EXPECT_TRUE(tensors_close(x.grad(), c["grad.x"], kTol, name + " grad x"));
}

TEST(ParityRope, EveryRopeTypeFromConfigJsonMatchesTransformers) {
  for (const char* name :
       {"rope_hf_default", "rope_hf_linear", "rope_hf_dynamic_past", "rope_hf_dynamic_within", "rope_hf_yarn",
        "rope_hf_yarn_mscale", "rope_hf_yarn_attention_factor", "rope_hf_longrope_long",
        "rope_hf_longrope_short", "rope_hf_llama3", "rope_hf_neox_partial"}) {
    SCOPED_TRACE(name);
    const ParityCase c = load_parity_case(name);
    const ops::RopeTable table = ops::RopeTable::build(spec_of(c), static_cast<int64_t>(c.attr("max_seq")));
    EXPECT_TRUE(tensors_close(table.cos, c["out.cos"], kTableTol, std::string(name) + " cos table"));
    EXPECT_TRUE(tensors_close(table.sin, c["out.sin"], kTableTol, std::string(name) + " sin table"));
    check_apply(c, table, ops::RopeLayout::rotate_half, name);
  }
}

TEST(ParityRope, PartialInterleavedMatchesGptJ) {
  const ParityCase c = load_parity_case("rope_gptj_partial_interleaved");
  const int64_t head_dim = c["in.x"].size(3);
  const ops::RopeSpec spec{.head_dim = head_dim,
                           .rotary_dim = static_cast<int64_t>(c.attr("rotary_dim")),
                           .theta = c.attr("theta")};
  const ops::RopeTable table = ops::RopeTable::build(spec, static_cast<int64_t>(c.attr("max_seq")));
  EXPECT_TRUE(tensors_close(table.cos, c["out.cos"], kTableTol, "GPT-J cos table"));
  EXPECT_TRUE(tensors_close(table.sin, c["out.sin"], kTableTol, "GPT-J sin table"));
  check_apply(c, table, ops::RopeLayout::interleaved, "GPT-J");
}

}  // namespace
}  // namespace titan::test
