#include "titan/graph/ir/hlo.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "titan/graph/pjrt/ffi.h"

namespace titan::graph::hlo {

namespace {

Program& prog() { return current_program(); }

std::string ints(const Shape& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + std::to_string(xs[i]);
  return out;
}
std::string array(const Shape& xs) { return "array<i64" + (xs.empty() ? std::string() : ": " + ints(xs)) + ">"; }
std::string list(const Shape& xs) {
  std::string out = "[";  // appended: GCC 12's -Wrestrict misreads "[" + std::string
  out += ints(xs);
  return out + "]";
}

ResultType type_of(const Value& v) { return {v.shape, v.dtype, v.pred, v.bytes}; }

void check_same(const char* op, const Value& a, const Value& b) {
  TITAN_CHECK(a.shape == b.shape && a.dtype == b.dtype && a.pred == b.pred, "graph lowering: ", op,
              " needs operands of one type, got ", mlir_type(a), " and ", mlir_type(b));
}

Value binary(const char* op, const Value& a, const Value& b) {
  check_same(op, a, b);
  return prog().emit1(std::string("stablehlo.") + op, {a, b}, type_of(a));
}

Value unary(const char* op, const Value& x) {
  return prog().emit1(std::string("stablehlo.") + op, {x}, type_of(x));
}

// A literal MLIR reads as `dtype`: integers plainly, floats always with a point and exponent,
// and the non-finite ones by their bits.
std::string literal(double value, DType dtype) {
  if (dtype == kI32 || dtype == kI64) return std::to_string(static_cast<int64_t>(value));
  if (std::isnan(value)) return dtype == kBF16 ? "0x7FC0" : dtype == kF32 ? "0x7FC00000" : "0x7FF8000000000000";
  if (std::isinf(value)) {
    const bool neg = value < 0;
    if (dtype == kBF16) return neg ? "0xFF80" : "0x7F80";
    if (dtype == kF32) return neg ? "0xFF800000" : "0x7F800000";
    return neg ? "0xFFF0000000000000" : "0x7FF0000000000000";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17e", value);
  return buf;
}

Value reduce(const char* body_op, double init, const Value& x, const Shape& dims) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(x.shape.size()); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) out.push_back(x.shape[static_cast<size_t>(i)]);
  }
  for (int64_t d : dims)
    TITAN_CHECK(d >= 0 && d < static_cast<int64_t>(x.shape.size()), "graph lowering: reduce over dim ", d,
                " of ", mlir_type(x));
  Value start = scalar(init, x.dtype);
  const ResultType elem{{}, x.dtype, false};
  std::string body = prog().region({elem, elem}, [&](const std::vector<Value>& a) {
    return std::vector<Value>{prog().emit1(body_op, {a[0], a[1]}, elem)};
  });
  return prog().emit1("stablehlo.reduce", {x, start}, {out, x.dtype, false}, "dimensions = " + array(dims), {body});
}

Value keep_dim(const Value& reduced, const Shape& like, int64_t dim) {
  Shape s = like;
  s[static_cast<size_t>(dim)] = 1;
  return reshape(reduced, s);
}

}  // namespace

Value constant(double value, const Shape& shape, DType dtype) {
  const std::string type = mlir_type(shape, dtype);
  return prog().emit1("stablehlo.constant", {}, {shape, dtype, false},
                      "value = dense<" + literal(value, dtype) + "> : " + type);
}

Value constant_i64(const std::vector<int64_t>& values) {
  std::string items;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) items += ", ";
    items += std::to_string(values[i]);
  }
  const Shape shape{static_cast<int64_t>(values.size())};
  return prog().emit1("stablehlo.constant", {}, {shape, kI64, false},
                      "value = dense<[" + items + "]> : " + mlir_type(shape, kI64));
}

Value iota(const Shape& shape, int64_t dim, DType dtype) {
  return prog().emit1("stablehlo.iota", {}, {shape, dtype, false}, "iota_dimension = " + std::to_string(dim) + " : i64");
}

Value add(const Value& a, const Value& b) { return binary("add", a, b); }
Value sub(const Value& a, const Value& b) { return binary("subtract", a, b); }
Value mul(const Value& a, const Value& b) { return binary("multiply", a, b); }
Value div(const Value& a, const Value& b) { return binary("divide", a, b); }
Value max(const Value& a, const Value& b) { return binary("maximum", a, b); }
Value min(const Value& a, const Value& b) { return binary("minimum", a, b); }
Value pow(const Value& a, const Value& b) { return binary("power", a, b); }
Value logical_and(const Value& a, const Value& b) { return binary("and", a, b); }
Value logical_or(const Value& a, const Value& b) { return binary("or", a, b); }
Value neg(const Value& x) { return unary("negate", x); }
Value exp(const Value& x) { return unary("exponential", x); }
Value log(const Value& x) { return unary("log", x); }
Value sqrt(const Value& x) { return unary("sqrt", x); }
Value rsqrt(const Value& x) { return unary("rsqrt", x); }
Value tanh(const Value& x) { return unary("tanh", x); }
Value cos(const Value& x) { return unary("cosine", x); }
Value sin(const Value& x) { return unary("sine", x); }
Value logistic(const Value& x) { return unary("logistic", x); }
Value abs(const Value& x) { return unary("abs", x); }
Value erf(const Value& x) {
  return prog().emit1("chlo.erf", {x}, type_of(x));
}
Value erfc(const Value& x) {
  return prog().emit1("chlo.erfc", {x}, type_of(x));
}

Value convert(const Value& x, DType dtype) {
  if (x.dtype == dtype && !x.pred) return x;
  return prog().emit1("stablehlo.convert", {x}, {x.shape, dtype, false});
}

Value compare(const Value& a, const Value& b, const std::string& direction) {
  check_same("compare", a, b);
  return prog().emit1("stablehlo.compare", {a, b}, {a.shape, a.dtype, true},
                      "comparison_direction = #stablehlo<comparison_direction " + direction + ">");
}

Value select(const Value& pred, const Value& on_true, const Value& on_false) {
  check_same("select", on_true, on_false);
  TITAN_CHECK(pred.pred && (pred.shape == on_true.shape || pred.shape.empty()),
              "graph lowering: select needs a predicate of the operands' shape, got ", mlir_type(pred), " for ",
              mlir_type(on_true));
  return prog().emit1("stablehlo.select", {pred, on_true, on_false}, type_of(on_true));
}

Value mul(const Value& x, double s) { return mul(x, constant(s, x.shape, x.dtype)); }
Value add(const Value& x, double c) { return add(x, constant(c, x.shape, x.dtype)); }

Value reshape(const Value& x, const Shape& shape) {
  TITAN_CHECK(numel_of(shape) == numel_of(x.shape), "graph lowering: reshape of ", mlir_type(x), " to ",
              shape_str(shape));
  if (shape == x.shape) return x;
  const Value y = prog().emit1("stablehlo.reshape", {x}, {shape, x.dtype, x.pred});
  // A loop's row stays one for custom calls; the reshape above is then unused unless an XLA op
  // takes the row, and XLA drops it.
  return prog().reshaped_dynamic_row(x, shape).value_or(y);
}

Value transpose(const Value& x, const Shape& permutation) {
  TITAN_CHECK(permutation.size() == x.shape.size(), "graph lowering: transpose of ", mlir_type(x), " by ",
              shape_str(permutation));
  Shape out;
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i) {
    out.push_back(x.shape[static_cast<size_t>(permutation[i])]);
    identity &= permutation[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  return prog().emit1("stablehlo.transpose", {x}, {out, x.dtype, x.pred}, "permutation = " + array(permutation));
}

Value broadcast_in_dim(const Value& x, const Shape& shape, const Shape& dims) {
  TITAN_CHECK(dims.size() == x.shape.size(), "graph lowering: broadcast_in_dim of ", mlir_type(x), " with dims ",
              shape_str(dims));
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t to = shape.at(static_cast<size_t>(dims[i]));
    TITAN_CHECK(x.shape[i] == 1 || x.shape[i] == to, "graph lowering: cannot broadcast ", mlir_type(x), " to ",
                shape_str(shape));
  }
  if (shape == x.shape) return x;
  return prog().emit1("stablehlo.broadcast_in_dim", {x}, {shape, x.dtype, x.pred},
                      "broadcast_dimensions = " + array(dims));
}

Value broadcast_to(const Value& x, const Shape& shape) {
  TITAN_CHECK(x.shape.size() <= shape.size(), "graph lowering: cannot broadcast ", mlir_type(x), " to ",
              shape_str(shape));
  Shape dims;
  const size_t lead = shape.size() - x.shape.size();
  for (size_t i = 0; i < x.shape.size(); ++i) dims.push_back(static_cast<int64_t>(lead + i));
  return broadcast_in_dim(x, shape, dims);
}

Value slice(const Value& x, const Shape& start, const Shape& limit) {
  Shape out, strides;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    TITAN_CHECK(0 <= start[i] && start[i] <= limit[i] && limit[i] <= x.shape[i], "graph lowering: slice [",
                shape_str(start), ", ", shape_str(limit), ") of ", mlir_type(x));
    out.push_back(limit[i] - start[i]);
    strides.push_back(1);
  }
  if (out == x.shape) return x;
  return prog().emit1("stablehlo.slice", {x}, {out, x.dtype, x.pred},
                      "start_indices = " + array(start) + ", limit_indices = " + array(limit) +
                          ", strides = " + array(strides));
}

Value narrow(const Value& x, int64_t dim, int64_t start, int64_t length) {
  Shape lo(x.shape.size(), 0), hi = x.shape;
  lo[static_cast<size_t>(dim)] = start;
  hi[static_cast<size_t>(dim)] = start + length;
  return slice(x, lo, hi);
}

Value concatenate(const std::vector<Value>& xs, int64_t dim) {
  TITAN_CHECK(!xs.empty(), "graph lowering: concatenate of nothing");
  if (xs.size() == 1) return xs[0];
  Shape out = xs[0].shape;
  out[static_cast<size_t>(dim)] = 0;
  for (const Value& x : xs) out[static_cast<size_t>(dim)] += x.shape[static_cast<size_t>(dim)];
  return prog().emit1("stablehlo.concatenate", xs, {out, xs[0].dtype, xs[0].pred},
                      "dimension = " + std::to_string(dim) + " : i64");
}

Value dynamic_slice(const Value& x, const std::vector<Value>& starts, const Shape& sizes) {
  TITAN_CHECK(starts.size() == x.shape.size() && sizes.size() == x.shape.size(),
              "graph lowering: dynamic_slice of ", mlir_type(x), " needs one start and size per dim");
  std::vector<Value> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return prog().emit1("stablehlo.dynamic_slice", operands, {sizes, x.dtype, x.pred}, "slice_sizes = " + array(sizes));
}

Value dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& starts) {
  TITAN_CHECK(starts.size() == x.shape.size(), "graph lowering: dynamic_update_slice of ", mlir_type(x),
              " needs one start per dim");
  std::vector<Value> operands{x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return prog().emit1("stablehlo.dynamic_update_slice", operands, type_of(x));
}

Value dot_general(const Value& a, const Value& b, const Shape& a_batch, const Shape& b_batch,
                  const Shape& a_contract, const Shape& b_contract, DType result_dtype) {
  TITAN_CHECK(a_batch.size() == b_batch.size() && a_contract.size() == b_contract.size(),
              "graph lowering: dot_general of ", mlir_type(a), " and ", mlir_type(b), " pairs its dims unevenly");
  auto listed = [](const Shape& dims, int64_t d) {
    for (int64_t x : dims)
      if (x == d) return true;
    return false;
  };
  Shape out;
  for (size_t i = 0; i < a_batch.size(); ++i) {
    TITAN_CHECK(a.shape[static_cast<size_t>(a_batch[i])] == b.shape[static_cast<size_t>(b_batch[i])],
                "graph lowering: dot_general batch dims differ: ", mlir_type(a), " and ", mlir_type(b));
    out.push_back(a.shape[static_cast<size_t>(a_batch[i])]);
  }
  for (size_t i = 0; i < a_contract.size(); ++i)
    TITAN_CHECK(a.shape[static_cast<size_t>(a_contract[i])] == b.shape[static_cast<size_t>(b_contract[i])],
                "graph lowering: dot_general contracts unequal dims: ", mlir_type(a), " and ", mlir_type(b));
  for (int64_t d = 0; d < static_cast<int64_t>(a.shape.size()); ++d)
    if (!listed(a_batch, d) && !listed(a_contract, d)) out.push_back(a.shape[static_cast<size_t>(d)]);
  for (int64_t d = 0; d < static_cast<int64_t>(b.shape.size()); ++d)
    if (!listed(b_batch, d) && !listed(b_contract, d)) out.push_back(b.shape[static_cast<size_t>(d)]);
  std::string numbers;
  auto field = [&](const char* key, const Shape& dims) {
    if (dims.empty()) return;
    numbers += (numbers.empty() ? "" : ", ") + std::string(key) + " = " + list(dims);
  };
  field("lhs_batching_dimensions", a_batch);
  field("rhs_batching_dimensions", b_batch);
  field("lhs_contracting_dimensions", a_contract);
  field("rhs_contracting_dimensions", b_contract);
  std::string attributes = "dot_dimension_numbers = #stablehlo.dot<";
  attributes.append(numbers).append(">");
  // float32 means float32: without HIGHEST, XLA's GPU backend may multiply f32 operands as TF32
  // (10-bit mantissas), as PyTorch does only when asked (allow_tf32). bf16 operands keep DEFAULT.
  if (a.dtype == kF32 && b.dtype == kF32)
    attributes.append(", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]");
  return prog().emit1("stablehlo.dot_general", {a, b}, {out, result_dtype, false}, attributes);
}

Value convolution(const Value& lhs, const Value& rhs, const std::string& layout, const ConvWindow& window,
                  const Shape& result, DType result_dtype) {
  TITAN_CHECK(lhs.shape.size() == 4 && rhs.shape.size() == 4 && result.size() == 4 && lhs.dtype == rhs.dtype,
              "graph lowering: convolution of ", mlir_type(lhs), " with ", mlir_type(rhs), " to ", shape_str(result),
              " needs 4-d operands of one dtype");
  const std::string padding = "dense<[[" + std::to_string(window.pad_low[0]) + ", " +
                              std::to_string(window.pad_high[0]) + "], [" + std::to_string(window.pad_low[1]) + ", " +
                              std::to_string(window.pad_high[1]) + "]]> : tensor<2x2xi64>";
  std::string attributes = "batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<" + layout +
                           ">, feature_group_count = 1 : i64, lhs_dilation = " + array(window.lhs_dilation) +
                           ", padding = " + padding + ", rhs_dilation = " + array(window.rhs_dilation) +
                           ", window_strides = " + array(window.strides);
  // As dot_general: float32 products in float32 on every backend.
  if (lhs.dtype == kF32)
    attributes.append(", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]");
  return prog().emit1("stablehlo.convolution", {lhs, rhs}, {result, result_dtype, false}, attributes);
}

Value reverse(const Value& x, const Shape& dims) {
  return prog().emit1("stablehlo.reverse", {x}, {x.shape, x.dtype, x.pred}, "dimensions = " + array(dims));
}

Value reduce_sum(const Value& x, const Shape& dims) { return reduce("stablehlo.add", 0.0, x, dims); }
Value reduce_max(const Value& x, const Shape& dims) {
  return reduce("stablehlo.maximum", -INFINITY, x, dims);
}
Value sum_keep(const Value& x, int64_t dim) { return keep_dim(reduce_sum(x, {dim}), x.shape, dim); }
Value max_keep(const Value& x, int64_t dim) { return keep_dim(reduce_max(x, {dim}), x.shape, dim); }

std::vector<Value> sort(const std::vector<Value>& xs, int64_t dim) {
  TITAN_CHECK(!xs.empty() && dim >= 0 && dim < static_cast<int64_t>(xs[0].shape.size()),
              "graph lowering: sort needs at least one operand with a dim ", dim);
  std::vector<ResultType> types, pairs;
  for (const Value& x : xs) {
    TITAN_CHECK(x.shape == xs[0].shape, "graph lowering: sort's operands differ in shape: ", mlir_type(xs[0]),
                " and ", mlir_type(x));
    types.push_back(type_of(x));
    pairs.insert(pairs.end(), 2, ResultType{{}, x.dtype, x.pred});
  }
  std::string less = prog().region(
      pairs, [](const std::vector<Value>& a) { return std::vector<Value>{compare(a[0], a[1], "LT")}; });
  return prog().emit("stablehlo.sort", xs, types, "dimension = " + std::to_string(dim) + " : i64, is_stable = true",
                     {less});
}

Value take_rows(const Value& table, const Value& ids) {
  TITAN_CHECK(table.shape.size() == 2, "graph lowering: take_rows needs a [rows, d] table, got ", mlir_type(table));
  const int64_t n = numel_of(ids.shape), d = table.shape[1];
  Value flat = reshape(ids, {n, 1});
  Value rows = prog().emit1(
      "stablehlo.gather", {table, flat}, {{n, d}, table.dtype, false},
      "dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = "
      "[0], index_vector_dim = 1>, slice_sizes = array<i64: 1, " + std::to_string(d) + ">, indices_are_sorted = false");
  Shape out = ids.shape;
  out.push_back(d);
  return reshape(rows, out);
}

Value scatter_add_rows(const Value& ids, const Value& updates, int64_t rows) {
  const int64_t n = numel_of(ids.shape), d = updates.shape.back();
  TITAN_CHECK(numel_of(updates.shape) == n * d, "graph lowering: scatter_add_rows of ", mlir_type(updates),
              " at ids ", mlir_type(ids));
  Value zero = constant(0.0, {rows, d}, updates.dtype);
  const ResultType elem{{}, updates.dtype, false};
  std::string body = prog().region({elem, elem}, [&](const std::vector<Value>& a) {
    return std::vector<Value>{prog().emit1("stablehlo.add", {a[0], a[1]}, elem)};
  });
  return prog().emit1("stablehlo.scatter", {zero, reshape(ids, {n, 1}), reshape(updates, {n, d})},
                      {{rows, d}, updates.dtype, false},
                      "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = "
                      "[0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, "
                      "unique_indices = false",
                      {body});
}

namespace {

// A scan whose body is being written: the stacks that its body's custom calls write in place.
struct ScanFrame {
  const Program* program = nullptr;
  int64_t n = 0;
  Value i = {};
  size_t depth = 0;            // the body's block
  std::vector<Value> args;     // the stacks, as the body's arguments
  std::vector<Value> written;  // each one after the call that wrote its row
};

std::vector<ScanFrame*>& scan_frames() {
  static thread_local std::vector<ScanFrame*> frames;
  return frames;
}

// The scan whose body's own block is being written now, if any.
ScanFrame* writing_scan_body() {
  if (scan_frames().empty()) return nullptr;
  ScanFrame* frame = scan_frames().back();
  return frame->program == &prog() && frame->depth == prog().depth() ? frame : nullptr;
}

std::string alias_text(size_t result, size_t num_results, size_t operand) {
  return "#stablehlo.output_operand_alias<output_tuple_indices = [" +
         (num_results > 1 ? std::to_string(result) : std::string()) + "], operand_index = " + std::to_string(operand) +
         ", operand_tuple_indices = []>";
}

}  // namespace

std::vector<Value> custom_call(const std::string& target, const std::vector<Value>& operands,
                               const std::vector<ResultType>& results,
                               const std::vector<std::pair<std::string, double>>& attrs,
                               const std::vector<std::pair<size_t, size_t>>& in_place) {
  namespace ffi = pjrt::ffi;
  // Names go into the module unquoted (attributes) or quoted (the target): identifiers only.
  auto is_identifier = [](const std::string& s) {
    auto allowed = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
    return !s.empty() && std::all_of(s.begin(), s.end(), allowed);
  };
  TITAN_CHECK(is_identifier(target), "graph lowering: custom-call target '", target,
              "' must be letters, digits, '_' and '.' only");
  TITAN_CHECK(!results.empty(), "graph lowering: custom call '", target, "' needs at least one result");
  std::string config;
  const auto add_attr = [&config](const std::string& name, double value) {
    config += (config.empty() ? "" : ", ") + name + " = " + literal(value, kF64) + " : f64";
  };
  for (const auto& [name, value] : attrs) {
    TITAN_CHECK(is_identifier(name) && !name.starts_with(ffi::kPassingAttrPrefix), "graph lowering: attribute '",
                name, "' of custom call '", target, "' must be letters, digits, '_' and '.' only, not starting with ",
                ffi::kPassingAttrPrefix);
    add_attr(name, value);
  }
  std::string aliases;
  for (const auto& [result, operand] : in_place) {
    TITAN_CHECK(result < results.size() && operand < operands.size() &&
                    results[result] == type_of(operands[operand]) && !prog().dynamic_row_of(operands[operand]),
                "graph lowering: custom call '", target, "' writes result ", result, " in place of operand ", operand,
                ", which must exist, have the result's type and not be a row of a loop's stack");
    aliases += (aliases.empty() ? "" : ", ") + alias_text(result, results.size(), operand);
  }
  const auto attributes = [&target](const std::string& backend_config, const std::string& output_aliases) {
    return "api_version = 4 : i32, backend_config = {" + backend_config + "}, call_target_name = \"" + target + "\"" +
           (output_aliases.empty() ? "" : ", output_operand_aliases = [" + output_aliases + "]");
  };
  const std::string watched = attributes(config, aliases);
  Program::WrittenAs written{.attrs = {}, .results = results};
  // A dynamic row (a loop's weights, a saved result) goes in as its stack and its index, appended
  // after the call's own operands: the handler reads the row in place (pjrt::ffi::Call).
  std::vector<Value> passed = operands;
  for (size_t j = 0; j < operands.size(); ++j) {
    const std::optional<Program::DynamicRow> r = prog().dynamic_row_of(operands[j]);
    if (!r) continue;
    passed[j] = r->stacked;
    add_attr(std::string(ffi::kRowAttrPrefix) + std::to_string(j), static_cast<double>(passed.size()));
    passed.push_back(r->index);
  }
  // A loop's forward that keeps this call's results for its backward has each written as row i
  // of a stack the loop carries, rather than copied there after the call.
  ScanFrame* frame = writing_scan_body();
  const bool into_stacks =
      frame != nullptr && in_place.empty() &&
      std::none_of(results.begin(), results.end(), [](const ResultType& r) { return r.pred; }) &&
      prog().keeps_in_place({.op = "stablehlo.custom_call", .results = results, .attrs = watched});
  if (into_stacks) {
    const size_t index = passed.size() + results.size();
    for (size_t r = 0; r < results.size(); ++r) {
      Shape stacked{frame->n};
      stacked.insert(stacked.end(), results[r].shape.begin(), results[r].shape.end());
      written.results[r] = {stacked, results[r].dtype, false};
      frame->args.push_back(prog().add_region_arg(written.results[r]));
      aliases += (aliases.empty() ? "" : ", ") + alias_text(r, results.size(), passed.size());
      add_attr(std::string(ffi::kIntoAttrPrefix) + std::to_string(r), static_cast<double>(index));
      passed.push_back(frame->args.back());
    }
    passed.push_back(frame->i);
  }
  if (passed.size() > operands.size()) add_attr(std::string(ffi::kArgsAttr), static_cast<double>(operands.size()));
  written.attrs = attributes(config, aliases);
  std::vector<Value> out = prog().emit("stablehlo.custom_call", passed, results, watched, {}, &written);
  if (into_stacks) {
    for (size_t r = 0; r < out.size(); ++r)
      TITAN_CHECK(type_of(out[r]) == written.results[r], "graph lowering: custom call '", target,
                  "' was to write its results into the loop's stacks, but a watcher wrote something else instead");
    for (Value& v : out) {
      frame->written.push_back(v);
      v = prog().dynamic_row(v, frame->i);
    }
  }
  return out;
}

std::vector<Value> library_call(const std::string& target, const std::vector<Value>& operands,
                                const std::vector<ResultType>& results, const std::string& backend_config,
                                const std::vector<Shape>& result_layouts) {
  TITAN_CHECK(!results.empty() && result_layouts.size() == results.size(), "graph lowering: library call '", target,
              "' has ", results.size(), " results and ", result_layouts.size(), " layouts");
  // An MLIR string: quotes and backslashes escaped.
  const auto quoted = [](const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  };
  const auto layout = [](const Shape& minor_to_major) {
    return "dense<" + list(minor_to_major) + "> : tensor<" + std::to_string(minor_to_major.size()) + "xindex>";
  };
  const auto row_major = [](size_t rank) {
    Shape dims;
    for (size_t d = rank; d-- > 0;) dims.push_back(static_cast<int64_t>(d));
    return dims;
  };
  std::string operand_layouts, result_layouts_text;
  for (const Value& v : operands)
    operand_layouts += (operand_layouts.empty() ? "" : ", ") + layout(row_major(v.shape.size()));
  for (size_t r = 0; r < results.size(); ++r) {
    const Shape& given = result_layouts[r];
    TITAN_CHECK(given.empty() || given.size() == results[r].shape.size(), "graph lowering: library call '", target,
                "' result ", r, " of rank ", results[r].shape.size(), " has a layout of ", given.size(), " dims");
    result_layouts_text += (result_layouts_text.empty() ? "" : ", ") +
                           layout(given.empty() ? row_major(results[r].shape.size()) : given);
  }
  return prog().emit("stablehlo.custom_call", operands, results,
                     "api_version = 2 : i32, backend_config = " + quoted(backend_config) + ", call_target_name = " +
                         quoted(target) + ", operand_layouts = [" + operand_layouts + "], result_layouts = [" +
                         result_layouts_text + "]");
}

Value empty_bytes(const Shape& shape) {
  TITAN_CHECK(std::find(shape.begin(), shape.end(), 0) != shape.end(), "graph lowering: empty_bytes of ",
              shape_str(shape), " would hold elements");
  const ResultType type{.shape = shape, .dtype = kF32, .pred = false, .bytes = true};
  return prog().emit1("stablehlo.constant", {}, type, "value = dense<> : " + mlir_type(shape, kF32, false, true));
}

Value constrain(const Value& v, const Sharding& sharding) {
  if (prog().partitions() <= 1) return v;
  if (!sharding.replicated()) {
    if (sharding.tiles.size() != v.shape.size()) return v;
    for (size_t d = 0; d < v.shape.size(); ++d)
      if (v.shape[d] % sharding.tiles[d] != 0) return v;
  }
  return prog().emit1("stablehlo.custom_call", {v}, type_of(v),
                      "call_target_name = \"Sharding\", mhlo.sharding = \"" + sharding.attr() + "\"");
}

Value unfilled(const ResultType& type) {
  if (!prog().custom_kernels()) return constant(0.0, type.shape, type.dtype);
  // XLA's CPU compiler keeps such calls apart (the M step's 27 stacks stay 27 buffers after its
  // passes), so none is copied into a loop from another's buffer.
  return custom_call(kUnfilledTarget, {}, {type})[0];
}

std::vector<Value> while_loop(const std::vector<Value>& state,
                              const std::function<Value(const std::vector<Value>&)>& cond,
                              const std::function<std::vector<Value>(const std::vector<Value>&)>& body) {
  std::vector<ResultType> types;
  for (const Value& v : state) types.push_back(type_of(v));
  std::string cond_region = prog().region(types, [&](const std::vector<Value>& s) {
    Value p = cond(s);
    TITAN_CHECK(p.pred && p.shape.empty(), "graph lowering: a while condition must be a scalar predicate, got ",
                mlir_type(p));
    return std::vector<Value>{p};
  });
  std::string body_region = prog().region(types, [&](const std::vector<Value>& s) {
    std::vector<Value> next = body(s);
    TITAN_CHECK(next.size() == s.size(), "graph lowering: a while body returned ", next.size(), " values for ",
                s.size());
    for (size_t i = 0; i < next.size(); ++i) check_same("while body", next[i], s[i]);
    return next;
  });
  return prog().emit("stablehlo.while", state, types, {}, {cond_region, body_region});
}

ScanResult scan(int64_t n, const std::vector<Value>& carry, const ScanBody& body, bool reverse) {
  TITAN_CHECK(n >= 1, "graph lowering: a scan needs at least one iteration, got ", n);
  std::vector<ResultType> types{{Shape{}, kI64, false}};
  for (const Value& v : carry) types.push_back(type_of(v));
  // Each y's stack: its place among the stacks the loop carries (written in place by the body's
  // calls first, in the order of their arguments, then those the loop fills from ys).
  ScanFrame frame;
  frame.program = &prog();
  frame.n = n;
  std::vector<ResultType> filled_types;
  std::vector<size_t> stack_of_y;
  std::string body_region = prog().region(types, [&](const std::vector<Value>& s) {
    const std::vector<Value> in(s.begin() + 1, s.end());
    frame.i = s[0];
    frame.depth = prog().depth();
    scan_frames().push_back(&frame);
    std::pair<std::vector<Value>, std::vector<Value>> written;
    try {
      written = body(s[0], in);
    } catch (...) {
      scan_frames().pop_back();
      throw;
    }
    scan_frames().pop_back();
    auto& [next, ys] = written;
    TITAN_CHECK(next.size() == in.size(), "graph lowering: a scan body returned ", next.size(), " carried values for ",
                in.size());
    for (size_t k = 0; k < next.size(); ++k) check_same("scan body", next[k], in[k]);
    std::vector<Value> out{add(s[0], scalar(reverse ? -1.0 : 1.0, kI64))};
    out.insert(out.end(), next.begin(), next.end());
    out.insert(out.end(), frame.written.begin(), frame.written.end());
    const Value zero = scalar(0.0, kI64);
    for (const Value& y : ys) {
      const auto in_place = std::find_if(frame.written.begin(), frame.written.end(),
                                         [&y](const Value& w) { return w.id == y.id; });
      if (in_place != frame.written.end()) {
        stack_of_y.push_back(static_cast<size_t>(in_place - frame.written.begin()));
        continue;
      }
      TITAN_CHECK(!y.pred, "graph lowering: a scan cannot stack predicates");
      Shape shape{n};
      shape.insert(shape.end(), y.shape.begin(), y.shape.end());
      filled_types.push_back({shape, y.dtype, false});
      stack_of_y.push_back(frame.args.size() + filled_types.size() - 1);
      // Carried by arguments added now that their types are known.
      const Value stack = prog().add_region_arg(filled_types.back());
      Shape row = shape;
      row[0] = 1;
      std::vector<Value> starts{s[0]};
      starts.resize(shape.size(), zero);
      out.push_back(dynamic_update_slice(stack, reshape(y, row), starts));
    }
    return out;
  });
  std::vector<ResultType> stacked_types;
  for (const Value& arg : frame.args) stacked_types.push_back(type_of(arg));
  stacked_types.insert(stacked_types.end(), filled_types.begin(), filled_types.end());
  types.insert(types.end(), stacked_types.begin(), stacked_types.end());
  std::string cond_region = prog().region(types, [&](const std::vector<Value>& s) {
    return std::vector<Value>{reverse ? compare(s[0], scalar(0.0, kI64), "GE")
                                      : compare(s[0], scalar(static_cast<double>(n), kI64), "LT")};
  });
  std::vector<Value> init{scalar(reverse ? static_cast<double>(n - 1) : 0.0, kI64)};
  init.insert(init.end(), carry.begin(), carry.end());
  // Every row is written before the loop ends, and nothing reads a stack before that.
  for (const ResultType& t : stacked_types) init.push_back(unfilled(t));
  const std::vector<Value> done = prog().emit("stablehlo.while", init, types, {}, {cond_region, body_region});
  const auto first_stack = static_cast<std::ptrdiff_t>(1 + carry.size());
  ScanResult result{.carry = std::vector<Value>(done.begin() + 1, done.begin() + first_stack), .stacked = {}};
  for (size_t k : stack_of_y) result.stacked.push_back(done[static_cast<size_t>(first_stack) + k]);
  return result;
}

}  // namespace titan::graph::hlo

