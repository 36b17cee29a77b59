// titan vs PyTorch: arithmetic, reductions, matmul, linear. f32 bound: 1e-5 relative (of the
// reference's max magnitude); gradients 1e-5 except long reductions (1e-4 for k >= 129 GEMMs).
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/reduce.h"

namespace titan::test {
namespace {

void check_binary(const std::string& name, Tensor (*op)(const Tensor&, const Tensor&), double tol) {
  ParityCase c = load_parity_case(name);
  Tensor a = c.input("in.a"), b = c.input("in.b");
  Tensor y = op(a, b);
  EXPECT_TRUE(tensors_close(y, c["out.y"], tol, name + " forward"));
  y.backward(c["cot.y"]);
  EXPECT_TRUE(tensors_close(a.grad(), c["grad.a"], tol, name + " grad a"));
  EXPECT_TRUE(tensors_close(b.grad(), c["grad.b"], tol, name + " grad b"));
}

TEST(ParityCore, Arithmetic) {
  check_binary("add_broadcast", ops::add, 1e-6);
  check_binary("sub_broadcast", ops::sub, 1e-6);
  check_binary("mul_broadcast", ops::mul, 1e-6);
  check_binary("div_broadcast", ops::div, 1e-6);
}

TEST(ParityCore, Matmul) {
  check_binary("matmul_2d", ops::matmul, 1e-5);
  check_binary("matmul_batched_broadcast", ops::matmul, 1e-5);
}

TEST(ParityCore, Linear) {
  for (const char* name : {"linear_bias", "linear_nobias"}) {
    ParityCase c = load_parity_case(name);
    bool bias = c.file.tensors.count("in.b") > 0;
    Tensor x = c.input("in.x"), w = c.input("in.w"), b = bias ? c.input("in.b") : Tensor();
    Tensor y = ops::linear(x, w, b);
    EXPECT_TRUE(tensors_close(y, c["out.y"], 1e-5, std::string(name) + " forward"));
    y.backward(c["cot.y"]);
    EXPECT_TRUE(tensors_close(x.grad(), c["grad.x"], 1e-5, std::string(name) + " grad x"));
    EXPECT_TRUE(tensors_close(w.grad(), c["grad.w"], 1e-5, std::string(name) + " grad w"));
    if (bias) {
      EXPECT_TRUE(tensors_close(b.grad(), c["grad.b"], 1e-5, std::string(name) + " grad b"));
    }
  }
}

TEST(ParityCore, Reductions) {
  for (const char* op : {"sum", "mean", "max", "var"}) {
    for (int d = 0; d < 3; ++d) {
      std::string name = std::string(op) + "_dim" + std::to_string(d);
      ParityCase c = load_parity_case(name);
      Tensor x = c.input("in.x");
      std::string o = op;
      Tensor y = o == "sum" ? ops::sum(x, d) : o == "mean" ? ops::mean(x, d)
               : o == "max" ? ops::max(x, d) : ops::var(x, d);
      EXPECT_TRUE(tensors_close(y, c["out.y"], 1e-5, name + " forward"));
      y.backward(c["cot.y"]);
      EXPECT_TRUE(tensors_close(x.grad(), c["grad.x"], 1e-5, name + " grad"));
    }
  }
}

}  // namespace
}  // namespace titan::test
