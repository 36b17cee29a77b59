#pragma once
// StableHLO ops on the values of the current program (graph/ir/program.h): what the lowerings
// beside each op's kernels are written in. Shapes are checked here, so that a lowering's mistake
// is an error naming the op rather than a compiler message about the printed module.
#include <string>
#include <utility>
#include <vector>

#include "titan/graph/ir/program.h"

namespace titan::graph::hlo {

// A splat constant of `shape`.
Value constant(double value, const Shape& shape, DType dtype);
inline Value scalar(double value, DType dtype) { return constant(value, {}, dtype); }
// The i64 vector [values.size()] holding `values` (tables fixed at capture: tile indices, per-row
// lengths).
Value constant_i64(const std::vector<int64_t>& values);
// 0, 1, ... along `dim`.
Value iota(const Shape& shape, int64_t dim, DType dtype);

// Elementwise, on operands of one shape and dtype.
Value add(const Value& a, const Value& b);
Value sub(const Value& a, const Value& b);
Value mul(const Value& a, const Value& b);
Value div(const Value& a, const Value& b);
Value max(const Value& a, const Value& b);
Value min(const Value& a, const Value& b);
Value pow(const Value& a, const Value& b);
Value neg(const Value& x);
Value exp(const Value& x);
Value log(const Value& x);
Value sqrt(const Value& x);
Value rsqrt(const Value& x);
Value tanh(const Value& x);
Value cos(const Value& x);
Value sin(const Value& x);
Value logistic(const Value& x);  // sigmoid
Value abs(const Value& x);
Value erf(const Value& x);
// 1 - erf(x) without the cancellation of that difference where erf(x) nears 1.
Value erfc(const Value& x);
Value convert(const Value& x, DType dtype);
// `direction`: EQ, NE, LT, LE, GT, GE. Gives a predicate.
Value compare(const Value& a, const Value& b, const std::string& direction);
Value select(const Value& pred, const Value& on_true, const Value& on_false);
Value logical_and(const Value& a, const Value& b);
Value logical_or(const Value& a, const Value& b);

// `x` times / plus a scalar, in x's dtype.
Value mul(const Value& x, double s);
Value add(const Value& x, double c);

// Shapes.
Value reshape(const Value& x, const Shape& shape);
Value transpose(const Value& x, const Shape& permutation);
// Result dim dims[i] takes x's dim i; the others are broadcast.
Value broadcast_in_dim(const Value& x, const Shape& shape, const Shape& dims);
// x broadcast to `shape` numpy-style (trailing dims aligned; size-1 dims stretched).
Value broadcast_to(const Value& x, const Shape& shape);
Value slice(const Value& x, const Shape& start, const Shape& limit);
Value narrow(const Value& x, int64_t dim, int64_t start, int64_t length);
Value concatenate(const std::vector<Value>& xs, int64_t dim);
// x's rows at dynamic offsets (scalar i64 values), each of `sizes`.
Value dynamic_slice(const Value& x, const std::vector<Value>& starts, const Shape& sizes);
Value dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& starts);

// General matrix product: batch dims first in the result, then a's free dims, then b's.
Value dot_general(const Value& a, const Value& b, const Shape& a_batch, const Shape& b_batch,
                  const Shape& a_contract, const Shape& b_contract, DType result_dtype);

// A 2-D convolution (cross-correlation, as PyTorch's). `layout` is StableHLO's dimension numbers,
// e.g. "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]" for NCHW input, OIHW kernel, NCHW result; the
// window fields are per spatial dim: stride, padding low and high (negative crops), the input's
// dilation (a transposed convolution's stride) and the kernel's. `result` is the result's shape,
// which the caller derives from the same numbers.
struct ConvWindow {
  Shape strides{1, 1}, pad_low{0, 0}, pad_high{0, 0}, lhs_dilation{1, 1}, rhs_dilation{1, 1};
};
Value convolution(const Value& lhs, const Value& rhs, const std::string& layout, const ConvWindow& window,
                  const Shape& result, DType result_dtype);
// x with the order of its elements along each of `dims` reversed.
Value reverse(const Value& x, const Shape& dims);

// Reductions over `dims` (removed from the shape).
Value reduce_sum(const Value& x, const Shape& dims);
Value reduce_max(const Value& x, const Shape& dims);
// The same, keeping the reduced dims with size 1 (for broadcasting back).
Value sum_keep(const Value& x, int64_t dim);
Value max_keep(const Value& x, int64_t dim);

// xs, all of one shape, reordered alike along `dim` so that xs[0] ascends there (a stable sort:
// equal keys keep their order).
std::vector<Value> sort(const std::vector<Value>& xs, int64_t dim);

// Rows of table [n, d] at integer ids [...] -> [..., d].
Value take_rows(const Value& table, const Value& ids);
// A zero table [rows, d] with updates [..., d] added at rows `ids` [...].
Value scatter_add_rows(const Value& ids, const Value& updates, int64_t rows);

// A call of titan's kernel registered as `target` (graph/pjrt/ffi.h), through XLA's typed FFI
// (api_version = 4). `attrs` reach the handler as scalars (ffi::Call::scalar_attr), written as f64
// so that no value is rounded on the way. `in_place` pairs (result, operand) of one type: the
// result is written into the operand's buffer (XLA copies the operand first where it is read
// later), so the handler finds the operand's values in the result and updates them there.
std::vector<Value> custom_call(const std::string& target, const std::vector<Value>& operands,
                               const std::vector<ResultType>& results,
                               const std::vector<std::pair<std::string, double>>& attrs = {},
                               const std::vector<std::pair<size_t, size_t>>& in_place = {});

// A call of a target the plugin's compiler implements itself (XLA GPU's cuDNN fused attention),
// in the form such targets take: `backend_config` a string (JSON of the backend's config) with
// api_version 2, and each operand's and result's layout written out, as minor-to-major dims:
// operands row-major, results as `result_layouts` gives (row-major where one is empty).
std::vector<Value> library_call(const std::string& target, const std::vector<Value>& operands,
                                const std::vector<ResultType>& results, const std::string& backend_config,
                                const std::vector<Shape>& result_layouts);
// A byte array of `shape` holding nothing (zero elements): what stands for a library call's
// scratch buffer where the call is not written again.
Value empty_bytes(const Shape& shape);

// `v` held as `sharding` lays it out over the program's partitions (a sharding constraint for
// XLA's partitioner); `v` itself in a program on one device, or where the sharding does not fit
// its shape.
Value constrain(const Value& v, const Sharding& sharding);

// An array whose contents are unspecified, for one that is filled before anything reads it (a
// loop's stacks, filled row by row): where the program calls titan's kernels, a call to the empty
// kernel `kUnfilledTarget`, so that XLA writes no zeros first; elsewhere zeros.
inline constexpr char kUnfilledTarget[] = "titan_unfilled";
Value unfilled(const ResultType& type);

// A while loop over `state`: `cond` returns a scalar predicate, `body` the next state.
std::vector<Value> while_loop(const std::vector<Value>& state,
                              const std::function<Value(const std::vector<Value>&)>& cond,
                              const std::function<std::vector<Value>(const std::vector<Value>&)>& body);

// for i in 0, 1, ..., n-1 (n-1, ..., 0 if `reverse`): (carry, ys) = body(i, carry), i a scalar i64.
// Returns the last carry and every iteration's ys, each stacked [n, ...] with iteration i's in row
// i. The body may return ys of any shapes (the same every iteration), known only once it is
// written.
struct ScanResult {
  std::vector<Value> carry;
  std::vector<Value> stacked;
};
using ScanBody = std::function<std::pair<std::vector<Value>, std::vector<Value>>(const Value& i,
                                                                                  const std::vector<Value>& carry)>;
ScanResult scan(int64_t n, const std::vector<Value>& carry, const ScanBody& body, bool reverse = false);

}  // namespace titan::graph::hlo
