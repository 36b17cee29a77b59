// titan vs PyTorch: sigmoid, silu, gelu (erf and tanh forms), quick_gelu, swiglu, softmax and
// log_softmax, forward and input gradients under a random cotangent, f32. Bound: 1e-5 relative to the
// reference's largest magnitude, for every op: all are single-pass pointwise or row kernels
// whose only differences from PyTorch are a few ulp in exp/erf and the order of a row sum (the
// worst seen is below 1e-6).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/ops/activation.h"
#include "titan/ops/softmax.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

void check_unary(const std::string& name, const std::function<Tensor(const Tensor&, const ParityCase&)>& op) {
  ParityCase c = load_parity_case(name);
  Tensor x = c.input("in.x");
  Tensor y = op(x, c);
  EXPECT_TRUE(tensors_close(y, c["out.y"], kTol, name + " forward"));
  y.backward(c["cot.y"]);
  EXPECT_TRUE(tensors_close(x.grad(), c["grad.x"], kTol, name + " grad x"));
}

TEST(ParityActivation, Pointwise) {
  check_unary("sigmoid", [](const Tensor& x, const ParityCase&) { return ops::sigmoid(x); });
  check_unary("silu", [](const Tensor& x, const ParityCase&) { return ops::silu(x); });
  check_unary("gelu", [](const Tensor& x, const ParityCase&) { return ops::gelu(x); });
  check_unary("gelu_tanh", [](const Tensor& x, const ParityCase&) {
    return ops::gelu(x, ops::GeluApproximation::tanh);
  });
  check_unary("quick_gelu", [](const Tensor& x, const ParityCase&) { return ops::quick_gelu(x); });
}

TEST(ParityActivation, Swiglu) {
  ParityCase c = load_parity_case("swiglu");
  Tensor gate = c.input("in.gate"), up = c.input("in.up");
  Tensor y = ops::swiglu(gate, up);
  EXPECT_TRUE(tensors_close(y, c["out.y"], kTol, "swiglu forward"));
  y.backward(c["cot.y"]);
  EXPECT_TRUE(tensors_close(gate.grad(), c["grad.gate"], kTol, "swiglu grad gate"));
  EXPECT_TRUE(tensors_close(up.grad(), c["grad.up"], kTol, "swiglu grad up"));
}

TEST(ParityActivation, Softmax) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (const char* suffix : {"_dim0", "_dim1", "_dim2", "_dim-1", "_long_row"}) {
      bool log = std::string(op) == "log_softmax";
      check_unary(std::string(op) + suffix, [log](const Tensor& x, const ParityCase& c) {
        auto dim = static_cast<int64_t>(c.attr("dim"));
        return log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
      });
    }
  }
}

}  // namespace
}  // namespace titan::test
