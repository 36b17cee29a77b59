#pragma once
// The trace span of a public op's forward, named after the op, with its inputs' shapes: one line
// at the top of the op, `const OpSpan span("matmul", a, b);`. The shapes are gathered only while
// a trace is recorded, out of line, so that the check is all that is inlined into the op.
#include <initializer_list>

#include "titan/core/tensor.h"
#include "titan/core/trace.h"

namespace titan::ops {

class OpSpan : public trace::Span {
 public:
  template <typename... Inputs>
  explicit OpSpan(const char* name, const Inputs&... inputs) : Span(name, "op") {
    if (active()) [[unlikely]]
      add_inputs({&inputs...});
  }

 private:
  // An absent optional input (a linear layer without bias) shows as [].
  void add_inputs(std::initializer_list<const Tensor*> inputs);
};

}  // namespace titan::ops
