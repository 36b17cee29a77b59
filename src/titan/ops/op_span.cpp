#include "titan/ops/op_span.h"

#include <vector>

namespace titan::ops {

void OpSpan::add_inputs(std::initializer_list<const Tensor*> inputs) {
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  for (const Tensor* t : inputs) shapes.push_back(t->defined() ? t->sizes() : Shape{});
  arg("inputs", shapes);
}

}  // namespace titan::ops
