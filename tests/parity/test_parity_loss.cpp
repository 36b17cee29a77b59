// titan vs PyTorch: embedding and cross-entropy, f32, forward and gradients. Bound: 1e-5
// relative to the reference's largest magnitude (max_rel_error), for outputs and gradients alike.
#include <gtest/gtest.h>

#include <cmath>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/ops/embedding.h"
#include "titan/ops/loss.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

TEST(ParityLoss, Embedding) {
  for (const char* name : {"embedding_i64", "embedding_i32_odd"}) {
    ParityCase c = load_parity_case(name);
    Tensor ids = c["in.ids"], w = c.input("in.w");
    Tensor y = ops::embedding(ids, w);
    EXPECT_TRUE(tensors_close(y, c["out.y"], kTol, std::string(name) + " forward"));
    y.backward(c["cot.y"]);
    EXPECT_TRUE(tensors_close(w.grad(), c["grad.w"], kTol, std::string(name) + " grad w"));
  }
}

TEST(ParityLoss, CrossEntropy) {
  for (const char* name : {"ce_mean_129", "ce_sum_129_3d", "ce_mean_5000_i32", "ce_sum_5000", "ce_mean_32000",
                           "ce_sum_32000", "ce_mean_100003_few_rows", "ce_mean_all_ignored"}) {
    ParityCase c = load_parity_case(name);
    Tensor x = c.input("in.x");
    auto reduction = c.attr("sum") != 0 ? ops::Reduction::sum : ops::Reduction::mean;
    Tensor loss = ops::cross_entropy(x, c["in.t"], static_cast<int64_t>(c.attr("ignore_index")), reduction);
    EXPECT_TRUE(tensors_close(loss, c["out.loss"], kTol, std::string(name) + " forward"));
    loss.backward(c["cot.loss"]);
    EXPECT_TRUE(tensors_close(x.grad(), c["grad.x"], kTol, std::string(name) + " grad x"));
  }
}

TEST(ParityLoss, AllIgnoredMeanIsNanWithZeroGradient) {
  ParityCase c = load_parity_case("ce_mean_all_ignored");
  EXPECT_TRUE(std::isnan(c["out.loss"].item()));
  Tensor x = c.input("in.x");
  Tensor loss = ops::cross_entropy(x, c["in.t"]);
  EXPECT_TRUE(std::isnan(loss.item()));
  loss.backward();
  for (float g : x.grad().to_vector<float>()) EXPECT_EQ(g, 0.f);
}

}  // namespace
}  // namespace titan::test
