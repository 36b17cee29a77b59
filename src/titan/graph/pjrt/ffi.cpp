#include "titan/graph/pjrt/ffi.h"

#include <charconv>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>

#include "titan/core/error.h"
#include "titan/graph/pjrt/extension.h"
#include "titan/graph/pjrt/ffi_abi.h"

namespace titan::graph::pjrt::ffi {
namespace {

// What titan reads of each struct must lie within the size the plugin says it filled in: a plugin
// built from an older XLA hands shorter structs.
constexpr size_t kFrameSizeNeeded = offsetof(abi::FfiCallFrame, attrs) + sizeof(abi::FfiAttrs);
constexpr size_t kApiSizeNeeded = offsetof(abi::FfiApi, error_create) + sizeof(abi::FfiApi::error_create);
constexpr size_t kBufferSizeNeeded = offsetof(abi::FfiBuffer, dims) + sizeof(abi::FfiBuffer::dims);
constexpr size_t kMetadataSizeNeeded = offsetof(abi::FfiMetadata, traits) + sizeof(abi::FfiMetadata::traits);
constexpr size_t kExtensionSizeNeeded =
    offsetof(abi::PjrtFfiExtension, register_handler) + sizeof(abi::PjrtFfiExtension::register_handler);
constexpr int kBufferKind = 1;  // XLA_FFI_ArgType_BUFFER and XLA_FFI_RetType_BUFFER

DType dtype_from_ffi(int dtype, std::string_view what) {
  switch (dtype) {
    case abi::kF32: return kF32;
    case abi::kF64: return kF64;
    case abi::kBF16: return kBF16;
    case abi::kS32: return kI32;
    case abi::kS64: return kI64;
    default: break;
  }
  TITAN_CHECK(false, "custom call: ", what, " has XLA element type ", dtype,
              ", which titan has no dtype for: pass f32, f64, bf16, i32 or i64 arrays");
}

Array array_of(const abi::FfiList& list, int64_t i, const char* kind) {
  TITAN_CHECK(i >= 0 && i < list.size, "custom call: asked for ", kind, " ", i, " of a call with ", list.size,
              " ", kind, "s: the program's custom_call and its handler disagree on the signature");
  const std::string what = std::string(kind) + " " + std::to_string(i);
  TITAN_CHECK(list.types[i] == kBufferKind, "custom call: ", what, " is of FFI kind ", list.types[i],
              ", not an array (1): titan's handlers take and give arrays only");
  const auto* buffer = static_cast<const abi::FfiBuffer*>(list.items[i]);
  TITAN_CHECK(buffer->struct_size >= kBufferSizeNeeded, "custom call: ", what, " is described in ",
              buffer->struct_size, " bytes, fewer than the ", kBufferSizeNeeded,
              " of XLA FFI's buffer: the plugin is broken or older than FFI API 0.1");
  Array a;
  a.dtype = dtype_from_ffi(buffer->dtype, what);
  a.dims.assign(buffer->dims, buffer->dims + buffer->rank);
  a.data = buffer->data;
  return a;
}

abi::FfiError* make_error(const abi::FfiCallFrame* frame, int code, const std::string& message) {
  abi::FfiErrorCreateArgs args{};
  args.struct_size = sizeof args;
  args.message = message.c_str();  // copied by the plugin
  args.code = code;
  return frame->api->error_create(&args);
}

// Registration calls each handler once with a metadata request instead of arguments: the FFI
// version the handler was written against, which the plugin checks it can serve.
abi::FfiError* answer_metadata(abi::FfiCallFrame* frame) {
  auto* extension = reinterpret_cast<abi::FfiMetadataExtension*>(frame->extension_start);
  if (extension->base.struct_size < sizeof(abi::FfiMetadataExtension) || !extension->metadata ||
      extension->metadata->struct_size < kMetadataSizeNeeded) {
    return make_error(frame, abi::kErrorInvalidArgument,
                      "titan's FFI handler cannot answer the plugin's metadata request: its struct is smaller "
                      "than XLA FFI API 0.1's");
  }
  extension->metadata->api_version = {sizeof(abi::FfiVersion), nullptr, abi::kFfiMajor, abi::kFfiMinor};
  extension->metadata->traits = 0;
  return nullptr;
}

// The plugin's FFI extension with register_handler in `out`, or why there is none.
std::string find_extension(const Plugin& plugin, const abi::PjrtFfiExtension*& out) {
  const PJRT_Extension_Base* found = nullptr;
  int left = 64;  // as Plugin's own walk: a corrupt chain must not hang
  for (const PJRT_Extension_Base* ext = plugin.api()->extension_start; ext && left-- > 0; ext = ext->next) {
    if (extension_type(ext) == PJRT_Extension_Type_FFI) found = ext;
  }
  std::string which = "PJRT plugin ";
  which.append(plugin.path()).append(" (C API ").append(plugin.api_version()).append(")");
  if (!found)
    return which + " has no FFI extension, so titan's kernels cannot run inside its programs: use a plugin "
                   "that offers it (the CPU plugins scripts/setup.sh installs do)";
  if (found->struct_size < kExtensionSizeNeeded)
    return which + "'s FFI extension has " + std::to_string(found->struct_size) +
           " bytes, without the register_handler call (" + std::to_string(kExtensionSizeNeeded) +
           " bytes, FFI extension version 2): install a newer plugin (scripts/setup.sh)";
  const auto* extension = reinterpret_cast<const abi::PjrtFfiExtension*>(found);
  if (!extension->register_handler)
    return which + "'s FFI extension leaves register_handler empty: install a plugin that implements it";
  out = extension;
  return "";
}

}  // namespace

int64_t Array::numel() const { return numel_of(dims); }

void Array::check_dtype(DType wanted, std::string_view what) const {
  TITAN_CHECK(dtype == wanted, "custom call: ", what, " is ", dtype_name(dtype), " ", shape_str(dims),
              "; the handler reads it as ", dtype_name(wanted), ": convert it in the program before the call");
}

namespace {

// `a`, a stack [n, ...], narrowed to its row at the index held by `index` (a scalar i64).
Array row_of_stack(Array a, const Array& index, const char* kind, int64_t i) {
  TITAN_CHECK(!a.dims.empty() && index.dtype == kI64 && index.numel() == 1, "custom call: ", kind, " ", i,
              " is passed as a row of ", dtype_name(a.dtype), " ", shape_str(a.dims), " at index ",
              dtype_name(index.dtype), " ", shape_str(index.dims), "; a row needs a stack and a scalar i64");
  const int64_t row = *static_cast<const int64_t*>(index.data);
  TITAN_CHECK(row >= 0 && row < a.dims[0], "custom call: ", kind, " ", i, " is row ", row, " of a stack of ", a.dims[0],
              " rows");
  const int64_t row_numel = numel_of(Shape(a.dims.begin() + 1, a.dims.end()));
  a.data = static_cast<char*>(a.data) + row * row_numel * static_cast<int64_t>(dtype_size(a.dtype));
  a.dims.erase(a.dims.begin());
  return a;
}

}  // namespace

Call::Call(const abi::FfiCallFrame* frame) : frame_(frame), num_args_(frame->args.size) {
  const abi::FfiAttrs& attrs = frame_->attrs;
  for (int64_t i = 0; i < attrs.size; ++i) {
    const std::string_view name(attrs.names[i]->ptr, attrs.names[i]->len);
    if (name == kArgsAttr) {
      num_args_ = static_cast<int64_t>(scalar_attr(name));
      continue;
    }
    const bool row = name.starts_with(kRowAttrPrefix), into = name.starts_with(kIntoAttrPrefix);
    if (!row && !into) continue;
    const std::string_view digits = name.substr((row ? kRowAttrPrefix : kIntoAttrPrefix).size());
    int64_t which = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), which);
    TITAN_CHECK(ec == std::errc() && end == digits.data() + digits.size(), "custom call: attribute '", name,
                "' should end in the number of the ", row ? "argument" : "result", " passed as a row");
    (row ? rows_ : into_).emplace_back(which, static_cast<int64_t>(scalar_attr(name)));
  }
  TITAN_CHECK(num_args_ >= 0 && num_args_ <= frame_->args.size, "custom call: ", kArgsAttr, " = ", num_args_,
              " of a call with ", frame_->args.size, " operands: the program's custom_call was written wrong");
  const auto check = [this](const std::vector<std::pair<int64_t, int64_t>>& passed, int64_t count, const char* kind) {
    for (const auto& [which, index] : passed) {
      TITAN_CHECK(which >= 0 && which < count && index >= num_args_ && index < frame_->args.size, "custom call: ",
                  kind, " ", which, " is passed as a row indexed by operand ", index, ", but the call has ", count, " ",
                  kind, "s and ", frame_->args.size - num_args_,
                  " operands after its own: the program's custom_call was written wrong");
    }
  };
  check(rows_, num_args_, "argument");
  check(into_, frame_->rets.size, "result");
}

int64_t Call::num_results() const { return frame_->rets.size; }

Array Call::arg(int64_t i) const {
  TITAN_CHECK(i >= 0 && i < num_args_, "custom call: asked for argument ", i, " of a call with ", num_args_,
              ": the program's custom_call and its handler disagree on the signature");
  const Array a = array_of(frame_->args, i, "argument");
  for (const auto& [arg, operand] : rows_)
    if (arg == i) return row_of_stack(a, array_of(frame_->args, operand, "argument"), "argument", i);
  return a;
}

Array Call::result(int64_t i) const {
  const Array a = array_of(frame_->rets, i, "result");
  for (const auto& [result, operand] : into_)
    if (result == i) return row_of_stack(a, array_of(frame_->args, operand, "argument"), "result", i);
  return a;
}

double Call::scalar_attr(std::string_view name) const {
  if (const std::optional<double> x = optional_scalar_attr(name)) return *x;
  const abi::FfiAttrs& attrs = frame_->attrs;
  std::string present;
  for (int64_t i = 0; i < attrs.size; ++i)
    present += (present.empty() ? "" : ", ") + std::string(attrs.names[i]->ptr, attrs.names[i]->len);
  TITAN_CHECK(false, "custom call: no attribute '", name,
              "' in backend_config (it has: ", present.empty() ? "none" : present,
              "): the program's custom_call must pass it");
}

std::optional<double> Call::optional_scalar_attr(std::string_view name) const {
  const abi::FfiAttrs& attrs = frame_->attrs;
  for (int64_t i = 0; i < attrs.size; ++i) {
    const std::string_view attr_name(attrs.names[i]->ptr, attrs.names[i]->len);
    if (attr_name != name) continue;
    TITAN_CHECK(attrs.types[i] == abi::kAttrScalar, "custom call: attribute '", name, "' is of FFI kind ",
                attrs.types[i], ", not a scalar (3): write it as `", name, " = 2.0 : f32` in backend_config");
    const auto* scalar = static_cast<const abi::FfiScalar*>(attrs.attrs[i]);
    switch (scalar->dtype) {
      case abi::kF32: return *static_cast<const float*>(scalar->value);
      case abi::kF64: return *static_cast<const double*>(scalar->value);
      case abi::kS32: return *static_cast<const int32_t*>(scalar->value);
      case abi::kS64: return static_cast<double>(*static_cast<const int64_t*>(scalar->value));
      default: break;
    }
    TITAN_CHECK(false, "custom call: attribute '", name, "' has XLA element type ", scalar->dtype,
                ": give it as f32, f64, i32 or i64");
  }
  return std::nullopt;
}

namespace detail {

abi::FfiError* invoke(abi::FfiCallFrame* frame, Kernel kernel) {
  // Without the API table no error can be reported at all; a plugin that omits it is not XLA.
  if (!frame || frame->struct_size < offsetof(abi::FfiCallFrame, api) + sizeof(frame->api) || !frame->api ||
      frame->api->struct_size < kApiSizeNeeded) {
    std::terminate();
  }
  if (frame->extension_start && frame->extension_start->type == abi::kFfiExtensionMetadata) {
    return answer_metadata(frame);
  }
  try {
    TITAN_CHECK(frame->struct_size >= kFrameSizeNeeded, "custom call: the plugin's call frame has ",
                frame->struct_size, " bytes, fewer than XLA FFI API 0.1's ", kFrameSizeNeeded,
                ": the plugin is broken");
    TITAN_CHECK(frame->stage == abi::kStageExecute, "custom call: titan's handlers run only at execution (stage ",
                abi::kStageExecute, "), called at stage ", frame->stage);
    kernel(Call(frame));
    return nullptr;
  } catch (const Error& e) {
    return make_error(frame, abi::kErrorInvalidArgument, e.message());
  } catch (const std::exception& e) {
    return make_error(frame, abi::kErrorInternal, std::string("custom call: ") + e.what());
  }
}

}  // namespace detail

std::string unsupported_reason(const Plugin& plugin) {
  const abi::PjrtFfiExtension* extension = nullptr;
  return find_extension(plugin, extension);
}

void register_handler(const Plugin& plugin, const std::string& target, Handler handler,
                      const std::string& platform) {
  TITAN_CHECK(!target.empty() && handler, "register_handler needs a target name and a handler, got '", target,
              "' and ", handler ? "a handler" : "none");
  static std::mutex mutex;
  static std::map<std::tuple<const Plugin*, std::string, std::string>, Handler> registered;
  std::lock_guard lock(mutex);
  const auto key = std::make_tuple(&plugin, platform, target);
  if (auto it = registered.find(key); it != registered.end()) {
    TITAN_CHECK(it->second == handler, "custom-call target '", target, "' already has another handler on ",
                platform, " in PJRT plugin ", plugin.path(), ": XLA keeps one per target; give this one another name");
    return;
  }

  const abi::PjrtFfiExtension* extension = nullptr;
  const std::string why = find_extension(plugin, extension);
  TITAN_CHECK(why.empty(), "custom call '", target, "' cannot be registered: ", why);

  abi::PjrtFfiRegisterHandlerArgs args{};
  args.struct_size = sizeof args;
  args.target_name = target.data();
  args.target_name_size = target.size();
  args.handler = reinterpret_cast<void*>(handler);
  args.platform_name = platform.data();
  args.platform_name_size = platform.size();
  plugin.check(extension->register_handler(&args), "PJRT_FFI_Register_Handler");
  registered.emplace(key, handler);
}

}  // namespace titan::graph::pjrt::ffi
