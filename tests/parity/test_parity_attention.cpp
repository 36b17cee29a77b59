// titan vs PyTorch: attention with logit soft-capping (cases_attention.py, transformers' eager
// form of Gemma 2's attn_logit_softcapping), GQA, causal and under a sliding window: splash
// attention forward and input gradients, the reference path (causal), and decoding's last rows.
// Bound: 1e-5 relative to the reference's largest magnitude (f32 kernels against an f64 reference;
// the worst seen is 3.3e-7).
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/decode.h"
#include "titan/attention/mask.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/autograd/grad_mode.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

void check(const std::string& name) {
  SCOPED_TRACE(name);
  const ParityCase c = load_parity_case(name);
  const double scale = c.attr("scale"), softcap = c.attr("softcap");
  const auto left = static_cast<int64_t>(c.attr("window_left"));
  Tensor q = c.input("in.q"), k = c.input("in.k"), v = c.input("in.v");
  const int64_t B = q.size(0), S = q.size(1);
  const attention::Mask mask = left < 0 ? attention::Mask::causal() : attention::Mask::sliding_window(left);
  Tensor out = attention::splash_attention(q, k, v, attention::BlockMask::build(mask, B, S, 16, 16),
                                           {.scale = scale, .softcap = softcap});
  EXPECT_TRUE(tensors_close(out, c["out.y"], kTol, "splash forward"));
  out.backward(c["cot.y"]);
  EXPECT_TRUE(tensors_close(q.grad(), c["grad.q"], kTol, "splash grad q"));
  EXPECT_TRUE(tensors_close(k.grad(), c["grad.k"], kTol, "splash grad k"));
  EXPECT_TRUE(tensors_close(v.grad(), c["grad.v"], kTol, "splash grad v"));

  if (left < 0) {
    Tensor rq = c.input("in.q"), rk = c.input("in.k"), rv = c.input("in.v");
    Tensor ref = attention::attention_reference(rq, rk, rv, {.scale = scale, .softcap = softcap});
    EXPECT_TRUE(tensors_close(ref, c["out.y"], kTol, "reference forward"));
    ref.backward(c["cot.y"]);
    EXPECT_TRUE(tensors_close(rq.grad(), c["grad.q"], kTol, "reference grad q"));
    EXPECT_TRUE(tensors_close(rk.grad(), c["grad.k"], kTol, "reference grad k"));
  }

  const autograd::NoGradGuard no_grad;
  const attention::DecodeOptions opts{.scale = scale,
                                      .softcap = softcap,
                                      .window_left = left < 0 ? std::nullopt : std::optional<int64_t>(left)};
  const Tensor last = attention::decode_attention(c["in.q"].narrow(1, S - 3, 3), c["in.k"], c["in.v"], opts);
  EXPECT_TRUE(tensors_close(last, c["out.y"].narrow(1, S - 3, 3).contiguous(), kTol, "decode's last rows"));
}

TEST(ParityAttention, SoftcapCausal) {
  check("attention_softcap_causal");
}
TEST(ParityAttention, SoftcapSlidingWindow) {
  check("attention_softcap_window");
}

}  // namespace
}  // namespace titan::test
