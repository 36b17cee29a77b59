#pragma once
// The parameters of a StableHLO module's `main`, read from its text: the C API says nothing about
// an executable's inputs, so this is how execute() checks its arguments before the plugin sees
// them, and learns which parameters the module donates (`tf.aliasing_output`).
#include <optional>
#include <string>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/shape.h"

namespace titan::graph::pjrt {

struct Parameter {
  std::string type = {};            // as written: "tensor<2x3xf32>"
  std::optional<DType> dtype = {};  // nullopt: an element type titan has no DType for
  std::optional<Shape> dims = {};   // nullopt: not a ranked tensor of static shape
  int aliased_output = -1;          // the output this parameter's buffer becomes, or -1
};

// Throws when the text has no `func.func ... @main(...)` whose parameter list closes.
std::vector<Parameter> main_parameters(const std::string& stablehlo_text);

}  // namespace titan::graph::pjrt
