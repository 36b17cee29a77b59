#pragma once
// Loads a PyTorch reference case written by tests/parity/make_reference.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/error.h"
#include "titan/nn/module.h"
#include "titan/optim/adamw.h"

namespace titan::test {

struct ParityCase {
  checkpoint::SafetensorsFile file;
  const Tensor& operator[](const std::string& name) const {
    auto it = file.tensors.find(name);
    TITAN_CHECK(it != file.tensors.end(), "parity case lacks tensor '", name, "'");
    return it->second;
  }
  double attr(const std::string& key) const {
    auto it = file.metadata.find(key);
    TITAN_CHECK(it != file.metadata.end(), "parity case lacks attribute '", key, "'");
    return std::stod(it->second);
  }
  // Copies the reference's initial weights ("in.<parameter name>") into `model`.
  void load_initial_weights(nn::Module& model) const {
    nn::StateDict initial;
    for (auto& [name, t] : model.state_dict()) initial[name] = (*this)["in." + name];
    model.load_state_dict(initial);
  }
  // The reference optimizer's hyperparameters (attributes lr, beta1, beta2, eps, weight_decay).
  optim::AdamWOptions adamw_options() const {
    return {.lr = attr("lr"),
            .beta1 = attr("beta1"),
            .beta2 = attr("beta2"),
            .eps = attr("eps"),
            .weight_decay = attr("weight_decay")};
  }
  // A reference input as a fresh leaf that requires grad.
  Tensor input(const std::string& name) const {
    Tensor t = (*this)[name].clone();
    if (is_floating(t.dtype())) t.requires_grad_();
    return t;
  }
};

inline ParityCase load_parity_case(const std::string& name) {
  return ParityCase{
      checkpoint::read_safetensors(std::string(TITAN_PARITY_DIR) + "/" + name + ".safetensors")};
}

// An op's case: `op(c, inputs)` on the case's inputs (absent ones undefined) against "out.y", then,
// after a backward of "cot.y", each defined input's gradient against "grad.<input>", within `tol`
// relative to the reference's largest magnitude.
template <typename Op>
void expect_op_parity(const ParityCase& c, const std::string& name, const std::vector<std::string>& inputs,
                      const Op& op, double tol) {
  std::vector<Tensor> in;
  for (const std::string& i : inputs)
    in.push_back(c.file.tensors.count("in." + i) ? c.input("in." + i) : Tensor());
  Tensor y = op(c, in);
  EXPECT_TRUE(tensors_close(y, c["out.y"], tol, name + " forward"));
  y.backward(c["cot.y"]);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (in[k].defined()) {
      EXPECT_TRUE(tensors_close(in[k].grad(), c["grad." + inputs[k]], tol, name + " grad " + inputs[k]));
    }
  }
}

}  // namespace titan::test
