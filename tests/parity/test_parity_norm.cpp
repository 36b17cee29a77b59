// titan vs PyTorch: RMSNorm, LayerNorm, rotary embeddings. f32 bound: 1e-5 relative (of the
// reference's max magnitude) for outputs, input gradients and parameter gradients.
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

TEST(ParityNorm, RmsNorm) {
  for (const char* name : {"rms_norm_weight", "rms_norm_noweight", "rms_norm_wide", "rms_norm_many_rows"}) {
    expect_op_parity(
        load_parity_case(name), name, {"x", "w"},
        [](const ParityCase& c, const std::vector<Tensor>& in) {
          return ops::rms_norm(in[0], in[1], c.attr("eps"));
        },
        kTol);
  }
}

TEST(ParityNorm, LayerNorm) {
  for (const char* name :
       {"layer_norm_affine", "layer_norm_plain", "layer_norm_weight_only", "layer_norm_bias_only",
        "layer_norm_wide", "layer_norm_many_rows", "layer_norm_offset"}) {
    expect_op_parity(
        load_parity_case(name), name, {"x", "w", "b"},
        [](const ParityCase& c, const std::vector<Tensor>& in) {
          return ops::layer_norm(in[0], in[1], in[2], c.attr("eps"));
        },
        kTol);
  }
}

TEST(ParityNorm, Rope) {
  for (const char* name :
       {"rope_half", "rope_interleaved", "rope_half_llama31", "rope_interleaved_llama31"}) {
    ParityCase c = load_parity_case(name);
    std::optional<ops::RopeScaling> scaling;
    if (c.attr("scaled") != 0) {
      scaling = ops::RopeScaling{c.attr("factor"), c.attr("low_freq_factor"), c.attr("high_freq_factor"),
                                 static_cast<int64_t>(c.attr("original_max_position"))};
    }
    const int64_t head_dim = c["in.x"].size(3);
    ops::RopeTable table =
        ops::RopeTable::build(head_dim, static_cast<int64_t>(c.attr("max_seq")), c.attr("theta"), scaling);
    EXPECT_TRUE(tensors_close(table.cos, c["out.cos"], kTol, std::string(name) + " cos table"));
    EXPECT_TRUE(tensors_close(table.sin, c["out.sin"], kTol, std::string(name) + " sin table"));
    const auto layout =
        c.attr("interleaved") != 0 ? ops::RopeLayout::interleaved : ops::RopeLayout::rotate_half;
    expect_op_parity(
        c, name, {"x"},
        [&](const ParityCase&, const std::vector<Tensor>& in) {
          return ops::rope(in[0], table, layout, static_cast<int64_t>(c.attr("start_pos")));
        },
        kTol);
  }
}

}  // namespace
}  // namespace titan::test
