#include "titan/autograd/scan.h"

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"

namespace titan::autograd {

namespace {

namespace hlo = graph::hlo;


bool loopable(const Tensor& x, const std::vector<std::vector<Tensor>>& blocks) {
  const graph::Program* program = graph::current_program_or_null();
  if (!x.is_lazy() || program == nullptr || !program->scan_layers() || blocks.size() < 2 || blocks[0].empty())
    return false;
  for (const auto& block : blocks) {
    if (block.size() != blocks[0].size()) return false;
    for (size_t j = 0; j < block.size(); ++j)
      if (!block[j].is_lazy() || block[j].sizes() != blocks[0][j].sizes() || block[j].dtype() != blocks[0][j].dtype())
        return false;
  }
  return true;
}

Shape with_leading(int64_t n, const Shape& shape) {
  Shape out{n};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// Row i (a scalar i64 value) of a stacked value [n, ...], as a value of the row's shape.
graph::Value row(const graph::Value& stacked, const graph::Value& i) {
  std::vector<graph::Value> starts{i};
  const graph::Value zero = hlo::scalar(0.0, kI64);
  Shape sizes = stacked.shape;
  sizes[0] = 1;
  for (size_t d = 1; d < stacked.shape.size(); ++d) starts.push_back(zero);
  return hlo::reshape(hlo::dynamic_slice(stacked, starts, sizes), Shape(stacked.shape.begin() + 1, stacked.shape.end()));
}

graph::Value set_row(const graph::Value& stacked, const graph::Value& value, const graph::Value& i) {
  std::vector<graph::Value> starts{i};
  const graph::Value zero = hlo::scalar(0.0, kI64);
  for (size_t d = 1; d < stacked.shape.size(); ++d) starts.push_back(zero);
  return hlo::dynamic_update_slice(stacked, hlo::reshape(value, with_leading(1, value.shape)), starts);
}

// Every block's j-th parameter stacked [n, ...].
graph::Value stack_of(const std::vector<std::vector<Tensor>>& blocks, size_t j) {
  std::vector<Tensor> rows;
  for (const auto& block : blocks) rows.push_back(block[j]);
  return graph::stack_rows(rows, "scan_blocks");
}

// For the length of one loop body, block 0's parameter tensors name row i of the stacked weights.
class RowsBound {
 public:
  RowsBound(const std::vector<Tensor>& params, const std::vector<graph::Value>& stacked, const graph::Value& i)
      : params_(params) {
    for (size_t j = 0; j < params.size(); ++j) {
      saved_.push_back(params[j].impl()->lazy);
      graph::rebind(params[j], row(stacked[j], i));
    }
  }
  ~RowsBound() {
    for (size_t j = 0; j < params_.size(); ++j) params_[j].impl()->lazy = saved_[j];
  }
  RowsBound(const RowsBound&) = delete;
  RowsBound& operator=(const RowsBound&) = delete;

 private:
  const std::vector<Tensor>& params_;
  std::vector<LazyValue> saved_;
};

}  // namespace

Tensor scan_blocks(const Tensor& x, const std::vector<std::vector<Tensor>>& blocks,
                   const std::function<Tensor(size_t, const Tensor&)>& run) {
  if (!loopable(x, blocks)) {
    Tensor h = x;
    for (size_t i = 0; i < blocks.size(); ++i) h = run(i, h);
    return h;
  }
  const auto n = static_cast<int64_t>(blocks.size());
  const std::vector<Tensor>& first = blocks[0];
  std::vector<graph::Value> stacked;
  for (size_t j = 0; j < first.size(); ++j) stacked.push_back(stack_of(blocks, j));
  const graph::Value h0 = graph::value_of(x, "scan_blocks");
  // The loop's output is the blocks' output only if a block keeps x's shape and dtype.
  // Kept for backward too: it holds x's description, not x.
  const auto check_out = [want = x.desc()](const Tensor& out) {
    TITAN_CHECK(out.defined() && out.desc() == want, "scan_blocks: a block maps ", want, " to ",
                out.defined() ? out.desc() : std::string("nothing"),
                "; only blocks that keep their input's shape and dtype can run as one loop");
    return graph::value_of(out, "scan_blocks");
  };

  // Forward: h_{i+1} = block(h_i), each h_i kept for backward.
  const graph::Value saved0 = hlo::constant(0.0, with_leading(n, h0.shape), h0.dtype);
  const std::vector<graph::Value> done = hlo::while_loop(
      {hlo::scalar(0.0, kI64), h0, saved0},
      [&](const std::vector<graph::Value>& s) { return hlo::compare(s[0], hlo::scalar(static_cast<double>(n), kI64), "LT"); },
      [&](const std::vector<graph::Value>& s) {
        const RowsBound bound(first, stacked, s[0]);
        NoGradGuard no_grad;
        const graph::Value next = check_out(run(0, graph::tensor_of(s[1])));
        return std::vector<graph::Value>{hlo::add(s[0], hlo::scalar(1.0, kI64)), next, set_row(s[2], s[1], s[0])};
      });
  Tensor out = graph::tensor_of(done[1]);
  const graph::Value saved = done[2];

  std::vector<Tensor> inputs{x};
  for (const auto& block : blocks) inputs.insert(inputs.end(), block.begin(), block.end());
  const DType autocast = autocast_dtype();
  record("scan_blocks", inputs, {out}, [first, stacked, saved, n, run, autocast, check_out](const GradContext& ctx) {
    // Backward, last block first: recompute block i from h_i, differentiate it w.r.t. h_i and its
    // parameters, and write the parameters' gradients into row i of their stacks.
    std::vector<graph::Value> state{hlo::scalar(static_cast<double>(n - 1), kI64), graph::value_of(ctx[0], "scan_blocks")};
    for (const graph::Value& s : stacked) state.push_back(hlo::constant(0.0, s.shape, s.dtype));
    const std::vector<graph::Value> grads = hlo::while_loop(
        state, [&](const std::vector<graph::Value>& s) { return hlo::compare(s[0], hlo::scalar(0.0, kI64), "GE"); },
        [&](const std::vector<graph::Value>& s) {
          const RowsBound bound(first, stacked, s[0]);
          // Backward runs with grad mode off; the recomputed block must record a graph to differentiate.
          const GradModeGuard recording(true);
          const AutocastGuard same_precision(autocast);
          Tensor h = graph::tensor_of(row(saved, s[0])).requires_grad_();
          Tensor y = run(0, h);
          check_out(y);
          std::vector<Tensor> wrt{h};
          wrt.insert(wrt.end(), first.begin(), first.end());
          const std::vector<Tensor> g = grad({y}, {graph::tensor_of(s[1])}, wrt);
          std::vector<graph::Value> next{hlo::sub(s[0], hlo::scalar(1.0, kI64)), graph::value_of(g[0], "scan_blocks")};
          for (size_t j = 0; j < first.size(); ++j) {
            const graph::Value gj = g[j + 1].defined() ? graph::value_of(g[j + 1], "scan_blocks")
                                                       : hlo::constant(0.0, first[j].sizes(), first[j].dtype());
            next.push_back(set_row(s[j + 2], gj, s[0]));
          }
          return next;
        });
    // Each block's gradients as rows of the stacked ones, recorded only if something takes them
    // one by one: graph mode's update of a stacked state reads the stacks whole.
    std::vector<Tensor> out{graph::tensor_of(grads[1])};
    graph::Program& program = graph::current_program();
    for (int64_t i = 0; i < n; ++i)
      for (size_t j = 0; j < first.size(); ++j) out.push_back(graph::tensor_of(program.row(grads[j + 2], i)));
    return out;
  });
  return out;
}

}  // namespace titan::autograd
