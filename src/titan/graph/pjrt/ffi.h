#pragma once
// Custom calls: titan's own kernels run inside a compiled program. A program names a target in
// `stablehlo.custom_call` (api_version = 4, XLA's typed FFI; graph::hlo::custom_call emits it);
// before compiling, the target's handler is registered with the plugin through its FFI extension.
// A handler is a plain function taking one call's arguments, results and attributes (Call); it
// reports a failure by throwing titan::Error, which fails the run with the error's message.
//
// Handlers run on the plugin's threads with buffers the plugin owns: they must not keep pointers
// past the call. XLA's FFI types stay out of this header (ffi_abi.h, graph/pjrt/'s sources only).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/shape.h"
#include "titan/graph/pjrt/plugin.h"

namespace titan::graph::pjrt::abi {
struct FfiCallFrame;
struct FfiError;
}  // namespace titan::graph::pjrt::abi

namespace titan::graph::pjrt::ffi {

// One argument or result of a call: a dense row-major array in the plugin's memory.
struct Array {
  DType dtype = kF32;
  Shape dims = {};
  void* data = nullptr;

  int64_t numel() const;
  // The data as T*, after checking that T is the array's dtype (`what` names it in the error).
  template <typename T>
  T* as(std::string_view what) const {
    check_dtype(dtype_of<T>::value, what);
    return static_cast<T*>(data);
  }

 private:
  void check_dtype(DType wanted, std::string_view what) const;
};

// How a program passes a call's arrays as rows of stacks (a loop over layers: its weights, and
// what its forward keeps for its backward), in backend_config attributes that all start with
// kPassingAttrPrefix. After the call's own operands come the operands these name; `titan_args = N`
// says how many are the call's own.
// - Argument j as a row: the stack [n, ...] is operand j, the row's index a scalar i64 operand k,
//   and `titan_row_<j> = k`. Call::arg(j) is the row, read in place.
// - Result r into a row: the result is the whole stack [n, ...] (written in place of a stack
//   operand, output_operand_aliases), its row's index a scalar i64 operand k, and
//   `titan_into_<r> = k`. Call::result(r) is the row, to be written; the rest of the stack stays.
inline constexpr std::string_view kPassingAttrPrefix = "titan_";
inline constexpr std::string_view kRowAttrPrefix = "titan_row_";
inline constexpr std::string_view kIntoAttrPrefix = "titan_into_";
inline constexpr std::string_view kArgsAttr = "titan_args";

// One invocation of a handler, decoded from XLA's call frame.
class Call {
 public:
  explicit Call(const abi::FfiCallFrame* frame);

  // The call's own arguments, not counting the indices of rows passed in place.
  int64_t num_args() const { return num_args_; }
  int64_t num_results() const;
  Array arg(int64_t i) const;
  Array result(int64_t i) const;
  // A numeric scalar attribute of backend_config, whatever its MLIR type (f32, f64, i32, i64).
  double scalar_attr(std::string_view name) const;
  // The same for an attribute a call may leave out (one added to a call after programs were
  // written without it): nullopt where absent.
  std::optional<double> optional_scalar_attr(std::string_view name) const;

 private:
  const abi::FfiCallFrame* frame_ = nullptr;
  int64_t num_args_ = 0;
  std::vector<std::pair<int64_t, int64_t>> rows_;  // (argument, operand holding its row index)
  std::vector<std::pair<int64_t, int64_t>> into_;  // (result, operand holding its row index)
};

using Kernel = void (*)(const Call&);
using Handler = abi::FfiError* (*)(abi::FfiCallFrame*);

namespace detail {
abi::FfiError* invoke(abi::FfiCallFrame* frame, Kernel kernel);
}

// The handler XLA calls for `K`: answers registration's version query, turns titan::Error (and any
// other exception, which must not cross into the plugin) into the run's error.
template <Kernel K>
abi::FfiError* handler(abi::FfiCallFrame* frame) {
  return detail::invoke(frame, K);
}

// Why `plugin` cannot run titan's handlers (no FFI extension, or one without register_handler),
// or "" when it can.
std::string unsupported_reason(const Plugin& plugin);

// Registers `handler` for custom calls to `target` in every program `plugin` compiles afterwards.
// XLA's registry is per process and per platform (the CPU plugins' is "Host"), so registering the
// same target and handler again is a no-op; another handler for a registered target is refused.
void register_handler(const Plugin& plugin, const std::string& target, Handler handler,
                      const std::string& platform = "Host");

}  // namespace titan::graph::pjrt::ffi
