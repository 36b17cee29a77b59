#include "titan/autograd/scan.h"

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

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

// Row i (a scalar i64 value) of a stacked value [n, ...], as a value of the row's shape: read in
// place by titan's kernels as custom calls, sliced out for XLA's ops.
graph::Value row(const graph::Value& stacked, const graph::Value& i) {
  return graph::current_program().dynamic_row(stacked, i);
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

// The ops of one block as its forward writes them, and the results kept of those the policy
// names: what the backward's second writing of the block takes instead of computing them again.
struct Tape {
  struct Op {
    std::string op;
    std::vector<graph::ResultType> results;
    std::string attrs;
    int64_t first_saved = -1;  // index of its first kept result among the saved values; -1: not saved
  };
  std::vector<Op> ops;
  std::vector<graph::Value> saved;  // in the forward's body
};

bool saves(graph::ScanSaves policy, const graph::OpSignature& op) {
  if (policy == graph::ScanSaves::inputs) return false;
  // An inner loop's unfilled stacks (graph::hlo::unfilled) hold nothing worth keeping.
  if (op.attrs.find(std::string("\"") + graph::hlo::kUnfilledTarget + "\"") != std::string_view::npos) return false;
  for (const graph::ResultType& r : op.results)
    if (r.pred) return false;  // comparisons: cheaper to redo than to store
  static const std::set<std::string_view> products{"stablehlo.dot_general", "stablehlo.custom_call", "stablehlo.while"};
  if (policy == graph::ScanSaves::products) return products.contains(op.op);
  // Views, fills and casts cost less to redo than to store and read back.
  static const std::set<std::string_view> cheap{"stablehlo.constant",        "stablehlo.iota",
                                                "stablehlo.reshape",         "stablehlo.transpose",
                                                "stablehlo.broadcast_in_dim", "stablehlo.slice",
                                                "stablehlo.dynamic_slice",   "stablehlo.convert"};
  return !cheap.contains(op.op);
}

class TapeRecorder final : public graph::OpWatcher {
 public:
  TapeRecorder(Tape& tape, graph::ScanSaves policy) : tape_(tape), policy_(policy) {}
  std::optional<std::vector<graph::Value>> before(const graph::OpSignature&) override { return std::nullopt; }
  // A kept call writes its results straight into the loop's stacks (graph::hlo::custom_call);
  // after() then sees those stacks, which the loop carries as they are.
  bool keeps_in_place(const graph::OpSignature& op) override {
    return op.op == "stablehlo.custom_call" && saves(policy_, op);
  }
  void after(const graph::OpSignature& op, const std::vector<graph::Value>& results) override {
    Tape::Op& entry = tape_.ops.emplace_back(Tape::Op{std::string(op.op), op.results, std::string(op.attrs)});
    if (!saves(policy_, op)) return;
    entry.first_saved = static_cast<int64_t>(tape_.saved.size());
    // A library call's scratch buffer (graph::hlo::library_call) holds nothing to keep.
    for (const graph::Value& r : results)
      if (!r.bytes) tape_.saved.push_back(r);
  }

 private:
  Tape& tape_;
  graph::ScanSaves policy_;
};

// The second writing of the block (backward, at layer i): each op must be the tape's next one;
// a saved op is answered with its results' rows i of the stacks the forward filled.
class TapeReplayer final : public graph::OpWatcher {
 public:
  TapeReplayer(const Tape& tape, const std::vector<graph::Value>& stacks, const graph::Value& i)
      : tape_(tape), stacks_(stacks), i_(i) {}
  std::optional<std::vector<graph::Value>> before(const graph::OpSignature& op) override {
    TITAN_CHECK(next_ < tape_.ops.size(), "scan_blocks: the backward's writing of a block has more ops than its ",
                "forward's (", tape_.ops.size(), "); from op ", op.op,
                " on, the block computes something else the second time (a block must be the same function each run)");
    const Tape::Op& want = tape_.ops[next_++];
    TITAN_CHECK(want.op == op.op && want.results == op.results && want.attrs == op.attrs, "scan_blocks: op ", next_ - 1,
                " of a block was ", want.op, " in the forward and is ", op.op,
                " in the backward's second writing; a block must compute the same function each run");
    if (want.first_saved < 0) return std::nullopt;
    std::vector<graph::Value> out;
    auto kept = static_cast<size_t>(want.first_saved);
    for (const graph::ResultType& r : op.results)
      out.push_back(r.bytes ? hlo::empty_bytes(r.shape) : row(stacks_[kept++], i_));
    return out;
  }
  void after(const graph::OpSignature&, const std::vector<graph::Value>&) override {}
  void check_done() const {
    TITAN_CHECK(next_ == tape_.ops.size(), "scan_blocks: the backward's writing of a block has ", next_,
                " ops, its forward's ", tape_.ops.size(), "; a block must compute the same function each run");
  }

 private:
  const Tape& tape_;
  const std::vector<graph::Value>& stacks_;
  graph::Value i_;
  size_t next_ = 0;
};

// Blocks run one by one in a program over several devices: h held in the program's carry layout
// between them, as the loop holds its carry, and its gradient alike.
Tensor keep_carry(const Tensor& h) {
  if (!h.is_lazy()) return h;
  const std::optional<graph::Sharding>& carry = graph::current_program().carry_sharding();
  if (!carry) return h;
  Tensor out = graph::tensor_of(hlo::constrain(graph::value_of(h, "scan_blocks"), *carry));
  record("keep_carry", {h}, {out}, [](const GradContext& g) { return std::vector<Tensor>{keep_carry(g[0])}; });
  return out;
}

}  // namespace

Tensor scan_blocks(const Tensor& x, const std::vector<std::vector<Tensor>>& blocks,
                   const std::function<Tensor(size_t, const Tensor&)>& run, const BlockOutputs& outputs) {
  if (!loopable(x, blocks)) {
    Tensor h = keep_carry(x);
    for (size_t i = 0; i < blocks.size(); ++i) h = keep_carry(run(i, h));
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

  graph::Program& program = graph::current_program();
  const graph::ScanSaves policy = program.scan_saves();
  // Forward: h_{i+1} = block(h_i), keeping each h_i and what the policy saves for backward. The
  // block records its graph as backward will (grad mode on, h_i requiring grad), so that the two
  // writings of it match op for op.
  auto tape = std::make_shared<Tape>();
  // What the body's block reported (outputs.take), and which of it are values of the body.
  std::vector<Tensor> reported;
  std::vector<size_t> of_body;
  // Over several devices, the carried activations (and their gradients) keep the program's layout
  // between blocks; the constraints sit outside the blocks' writing, which the tape compares.
  const std::optional<graph::Sharding> carry = program.carry_sharding();
  const auto keep = [carry](const graph::Value& v) { return carry ? hlo::constrain(v, *carry) : v; };
  const hlo::ScanResult forward = hlo::scan(n, {keep(h0)}, [&](const graph::Value& i, const std::vector<graph::Value>& h) {
    const RowsBound bound(first, stacked, i);
    const GradModeGuard recording(true);
    const graph::Value h_in = keep(h[0]);
    Tensor y;
    {
      TapeRecorder recorder(*tape, policy);
      const graph::Program::WatchScope watch(program, recorder);
      y = run(0, graph::tensor_of(h_in).requires_grad_());
    }
    std::vector<graph::Value> ys{h_in};
    ys.insert(ys.end(), tape->saved.begin(), tape->saved.end());
    if (outputs.take) reported = outputs.take();
    for (size_t k = 0; k < reported.size(); ++k)
      if (reported[k].is_lazy()) {
        of_body.push_back(k);
        ys.push_back(graph::value_of(reported[k], "scan_blocks"));
      }
    return std::pair{std::vector<graph::Value>{keep(check_out(y))}, ys};
  });
  Tensor out = graph::tensor_of(forward.carry[0]);
  const graph::Value inputs_saved = forward.stacked[0];
  const size_t first_report = 1 + tape->saved.size();
  const std::vector<graph::Value> residuals(forward.stacked.begin() + 1,
                                            forward.stacked.begin() + static_cast<std::ptrdiff_t>(first_report));
  if (outputs.give)
    for (int64_t i = 0; i < n; ++i) {
      std::vector<Tensor> values = reported;
      for (size_t k = 0; k < of_body.size(); ++k)
        values[of_body[k]] = graph::tensor_of(program.row(forward.stacked[first_report + k], i));
      outputs.give(static_cast<size_t>(i), std::move(values));
    }

  std::vector<Tensor> inputs{x};
  for (const auto& block : blocks) inputs.insert(inputs.end(), block.begin(), block.end());
  const DType autocast = autocast_dtype();
  // The blocks' tensors that get gradients; the others (buffers) are only read.
  std::vector<size_t> trained;
  for (size_t j = 0; j < first.size(); ++j)
    if (first[j].requires_grad()) trained.push_back(j);
  record("scan_blocks", inputs, {out},
         [first, stacked, inputs_saved, residuals, tape, n, run, autocast, check_out, keep,
          trained](const GradContext& ctx) {
    // Backward, last block first: write block i again from h_i, taking what the forward saved
    // instead of computing it, differentiate it w.r.t. h_i and its parameters, and stack the
    // parameters' gradients.
    const hlo::ScanResult backward = hlo::scan(
        n, {keep(graph::value_of(ctx[0], "scan_blocks"))},
        [&](const graph::Value& i, const std::vector<graph::Value>& dy) {
          const RowsBound bound(first, stacked, i);
          // Backward runs with grad mode off; the block must record a graph to differentiate.
          const GradModeGuard recording(true);
          const AutocastGuard same_precision(autocast);
          Tensor h = graph::tensor_of(row(inputs_saved, i)).requires_grad_();
          Tensor y;
          {
            TapeReplayer replayer(*tape, residuals, i);
            const graph::Program::WatchScope watch(graph::current_program(), replayer);
            y = run(0, h);
            replayer.check_done();
          }
          check_out(y);
          std::vector<Tensor> wrt{h};
          for (const size_t j : trained) wrt.push_back(first[j]);
          const std::vector<Tensor> g = grad({y}, {graph::tensor_of(keep(dy[0]))}, wrt);
          std::vector<graph::Value> grads;
          for (size_t t = 0; t < trained.size(); ++t) {
            const Tensor& p = first[trained[t]];
            grads.push_back(g[t + 1].defined() ? graph::value_of(g[t + 1], "scan_blocks")
                                               : hlo::constant(0.0, p.sizes(), p.dtype()));
          }
          return std::pair{std::vector<graph::Value>{keep(graph::value_of(g[0], "scan_blocks"))}, grads};
        },
        /*reverse=*/true);
    // Each block's gradients as rows of the stacked ones, recorded only if something takes them
    // one by one: graph mode's update of a stacked state reads the stacks whole.
    std::vector<Tensor> out{graph::tensor_of(backward.carry[0])};
    graph::Program& program = graph::current_program();
    for (int64_t i = 0; i < n; ++i)
      for (size_t j = 0, t = 0; j < first.size(); ++j) {
        const bool has_grad = t < trained.size() && trained[t] == j;
        out.push_back(has_grad ? graph::tensor_of(program.row(backward.stacked[t++], i)) : Tensor());
      }
    return out;
  });
  return out;
}

}  // namespace titan::autograd
