#pragma once
// The trace span of a public op's forward, named after the op, with its inputs' shapes: one line
// at the top of the op, `const OpSpan span("matmul", a, b);`. The shapes are gathered only while
// a trace is recorded.
#include <vector>

#include "titan/core/tensor.h"
#include "titan/core/trace.h"

namespace titan::ops {

class OpSpan : public trace::Span {
 public:
  template <typename... Inputs>
  explicit OpSpan(const char* name, const Inputs&... inputs) : Span(name, "op") {
    if (active()) arg("inputs", std::vector<Shape>{shape_of(inputs)...});
  }

 private:
  // An absent optional input (a linear layer without bias) shows as [].
  static Shape shape_of(const Tensor& t) { return t.defined() ? t.sizes() : Shape{}; }
};

}  // namespace titan::ops
