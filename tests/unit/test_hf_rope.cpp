// config.json's RoPE (either layout) read into ops::RopeSpec as transformers 5.24 reads it: every
// rope_type, the precedences of partial_rotary_factor and original_max_position_embeddings, and the
// errors, which name the key and its value. The tables these specs give are checked against
// transformers itself in tests/parity/test_parity_rope.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <variant>

#include "support/test_util.h"
#include "titan/models/common/hf_rope.h"

namespace titan {
namespace {

namespace hf = models::common::hf;
using json = nlohmann::json;

hf::RopeModelFields model(int64_t head_dim = 64, int64_t max_position_embeddings = 4096) {
  return {.architecture = "TestForCausalLM",
          .head_dim = head_dim,
          .max_position_embeddings = max_position_embeddings,
          .partial_rotary_factor = std::nullopt,
          .original_max_position_embeddings = std::nullopt};
}

ops::RopeSpec spec(const json& config, const hf::RopeModelFields& m = model()) {
  return hf::rope_spec(hf::ConfigFields(config, m.architecture).rope(10000.0), m);
}

json v5(json parameters) {
  return {{"rope_parameters", std::move(parameters)}};
}

TEST(HfRope, DefaultInBothLayouts) {
  for (const json& config : {v5({{"rope_type", "default"}, {"rope_theta", 5e5}}),
                             json{{"rope_theta", 5e5}, {"rope_scaling", nullptr}}}) {
    const ops::RopeSpec s = spec(config);
    EXPECT_EQ(s.head_dim, 64);
    EXPECT_EQ(s.rotary_dim, 64);
    EXPECT_EQ(s.theta, 5e5);
    EXPECT_TRUE(std::holds_alternative<std::monostate>(s.scaling)) << config.dump();
  }
}

TEST(HfRope, TypeOrRopeType) {
  const json by_type = {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}};
  const json by_rope_type = {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  const json v5_linear = v5({{"rope_type", "linear"}, {"factor", 2.0}});
  for (const json& config : {by_type, by_rope_type, v5_linear})
    EXPECT_EQ(std::get<ops::RopeLinear>(spec(config).scaling).factor, 2.0) << config.dump();
}

TEST(HfRope, EveryType) {
  const auto dynamic =
      std::get<ops::RopeDynamic>(spec(v5({{"rope_type", "dynamic"}, {"factor", 3.0}})).scaling);
  EXPECT_EQ(dynamic.factor, 3.0);
  EXPECT_EQ(dynamic.max_position_embeddings, 4096);

  const auto yarn = std::get<ops::RopeYarn>(spec(v5({{"rope_type", "yarn"},
                                                     {"factor", 4.0},
                                                     {"original_max_position_embeddings", 1024},
                                                     {"beta_fast", 0},
                                                     {"beta_slow", 2},
                                                     {"mscale", 0.7},
                                                     {"mscale_all_dim", 0.5},
                                                     {"truncate", false},
                                                     {"attention_factor", 1.5}}))
                                                .scaling);
  EXPECT_EQ(yarn.factor, 4.0);
  EXPECT_EQ(yarn.original_max_position, 1024);
  EXPECT_EQ(yarn.beta_fast, 32.0) << "transformers' `beta_fast or 32`";
  EXPECT_EQ(yarn.beta_slow, 2.0);
  EXPECT_EQ(yarn.mscale, 0.7);
  EXPECT_EQ(yarn.mscale_all_dim, 0.5);
  EXPECT_FALSE(yarn.truncate);
  EXPECT_EQ(yarn.attention_factor, 1.5);

  // factor null: max_position_embeddings over the original; no original: max_position_embeddings.
  const auto derived = std::get<ops::RopeYarn>(
      spec(v5({{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 1024}}))
          .scaling);
  EXPECT_EQ(derived.factor, 4.0);
  EXPECT_FALSE(derived.attention_factor.has_value());
  EXPECT_EQ(std::get<ops::RopeYarn>(spec(v5({{"rope_type", "yarn"}, {"factor", 2.0}})).scaling)
                .original_max_position,
            4096);

  const auto llama3 = std::get<ops::RopeScaling>(spec(v5({{"rope_type", "llama3"},
                                                          {"factor", 8.0},
                                                          {"low_freq_factor", 1.0},
                                                          {"high_freq_factor", 4.0},
                                                          {"original_max_position_embeddings", 8192}}))
                                                     .scaling);
  EXPECT_EQ(llama3.factor, 8.0);
  EXPECT_EQ(llama3.original_max_position, 8192);
}

TEST(HfRope, LongropeAsPhi3WritesIt) {
  // Phi-3: original_max_position_embeddings at the top level wins over the RoPE object's; the
  // partial factor at the top level applies where the object has none.
  hf::RopeModelFields phi3 = model(96, 131072);
  phi3.original_max_position_embeddings = 4096;
  phi3.partial_rotary_factor = 0.5;
  const std::vector<double> shorts(24, 1.0), longs(24, 2.0);
  const json config = {{"rope_theta", 10000.0},
                       {"rope_scaling",
                        {{"type", "longrope"},
                         {"short_factor", shorts},
                         {"long_factor", longs},
                         {"original_max_position_embeddings", 2048}}}};
  const ops::RopeSpec s = spec(config, phi3);
  EXPECT_EQ(s.rotary_dim, 48);
  const auto& longrope = std::get<ops::RopeLongrope>(s.scaling);
  EXPECT_EQ(longrope.original_max_position, 4096);
  EXPECT_EQ(longrope.factor, 32.0);
  EXPECT_EQ(longrope.short_factor, shorts);
  EXPECT_EQ(longrope.long_factor, longs);
  EXPECT_FALSE(longrope.attention_factor.has_value());
}

TEST(HfRope, PartialRotaryFactor) {
  hf::RopeModelFields neox = model(128);
  neox.partial_rotary_factor = 0.25;  // rotary_pct
  EXPECT_EQ(spec(v5({{"rope_type", "default"}}), neox).rotary_dim, 32);
  // The RoPE object's own factor wins, as transformers' setdefault leaves it.
  EXPECT_EQ(spec(v5({{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}), neox).rotary_dim, 64);
  // Truncated as Python's int(): 80 * 0.4 = 32.
  EXPECT_EQ(spec(v5({{"partial_rotary_factor", 0.4}}), model(80)).rotary_dim, 32);
}

TEST(HfRope, ErrorsNameTheKeyAndValue) {
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "proportional"}})), "\"rope_parameters.rope_type\"",
                     "\"proportional\"", "default, linear, dynamic, yarn, longrope and llama3");
  EXPECT_TITAN_ERROR(spec({{"rope_scaling", {{"type", "su"}}}}), "\"rope_scaling.type\"", "\"su\"");
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "linear"}})), "\"rope_parameters.factor\"", "missing");
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "linear"}, {"factor", -2.0}})), "\"rope_parameters.factor\"",
                     "positive", "-2");
  EXPECT_TITAN_ERROR(spec({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", "2"}}}}),
                     "\"rope_scaling.factor\"", "number", "\"2\"");
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "yarn"}, {"original_max_position_embeddings", 1024}})),
                     "\"rope_parameters.factor\"", "missing", "yarn");
  EXPECT_TITAN_ERROR(
      spec(v5(
          {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0}})),
      "\"rope_parameters.high_freq_factor\" (1)", "\"rope_parameters.low_freq_factor\" (4)");
  EXPECT_TITAN_ERROR(
      spec(v5({{"rope_type", "longrope"}, {"short_factor", {1.0, 2.0}}, {"long_factor", {1.0, 2.0}}})),
      "\"rope_parameters.short_factor\"", "32 positive numbers", "[1.0,2.0]");
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "default"}, {"mrope_section", {8, 12, 12}}})),
                     "\"rope_parameters.mrope_section\"", "[8,12,12]", "not read", "\"default\"");
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "linear"}, {"factor", 2.0}, {"low_freq_factor", 1.0}})),
                     "\"rope_parameters.low_freq_factor\"", "[\"factor\"]");
  EXPECT_TITAN_ERROR(spec(v5({{"partial_rotary_factor", 1.5}})), "\"rope_parameters.partial_rotary_factor\"",
                     "(0, 1]", "1.5");
  hf::RopeModelFields odd = model(64);
  odd.partial_rotary_factor = 0.3;  // 19 dims
  EXPECT_TITAN_ERROR(spec(v5({{"rope_type", "default"}}), odd), "\"partial_rotary_factor\" 0.3",
                     "head_dim 64", "rotates 19 dims");
  EXPECT_TITAN_ERROR(spec(v5({{"rope_theta", 0.0}})), "\"rope_theta\"", "positive", "0");
  EXPECT_TITAN_ERROR(spec(v5({}), model(0)), "head_dim 0");
}

}  // namespace
}  // namespace titan
