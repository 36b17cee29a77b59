#pragma once
// The binary interface between titan's custom-call handlers and XLA: the parts of XLA's FFI C API
// (xla/ffi/api/c_api.h) and of PJRT's FFI extension (xla/pjrt/c/pjrt_c_api_ffi_extension.h) that
// titan uses, declared here rather than fetched: neither header ships with the CPU plugins, the
// wheels that carry them are hundreds of megabytes, and both interfaces promise a stable layout
// that grows only at the end of each struct (hence every struct_size check in ffi.cpp). Names are
// titan's; layouts, numbering and sizes are XLA's and must not change. graph/pjrt/'s sources only.
#include <pjrt_c_api.h>

#include <cstddef>
#include <cstdint>

namespace titan::graph::pjrt::abi {

// ---- XLA FFI (the handler's side): API 0.1, what a handler built against it may rely on.
constexpr int kFfiMajor = 0;
constexpr int kFfiMinor = 1;

struct FfiExtension {  // XLA_FFI_Extension_Base
  size_t struct_size;
  int type;
  FfiExtension* next;
};
constexpr int kFfiExtensionMetadata = 1;

struct FfiVersion {  // XLA_FFI_Api_Version
  size_t struct_size;
  FfiExtension* extension_start;
  int major_version;
  int minor_version;
};

struct FfiError;  // XLA_FFI_Error: owned by whoever receives it

struct FfiErrorCreateArgs {  // XLA_FFI_Error_Create_Args
  size_t struct_size;
  FfiExtension* extension_start;
  const char* message;
  int code;  // absl status codes
};
constexpr int kErrorInvalidArgument = 3;
constexpr int kErrorInternal = 13;

// The function table the plugin hands each call; titan only creates errors through it.
struct FfiApi {  // XLA_FFI_Api
  size_t struct_size;
  FfiExtension* extension_start;
  FfiVersion api_version;
  const void* internal_api;
  FfiError* (*error_create)(FfiErrorCreateArgs*);
};

// XLA_FFI_DataType: xla::PrimitiveType's numbers.
enum FfiDataType : int { kPred = 1, kS32 = 4, kS64 = 5, kF32 = 11, kF64 = 12, kBF16 = 16 };

struct FfiBuffer {  // XLA_FFI_Buffer
  size_t struct_size;
  FfiExtension* extension_start;
  int dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

struct FfiByteSpan {  // XLA_FFI_ByteSpan
  const char* ptr;
  size_t len;
};

struct FfiScalar {  // XLA_FFI_Scalar
  int dtype;
  void* value;
};
enum FfiAttrType : int { kAttrArray = 1, kAttrDictionary = 2, kAttrScalar = 3, kAttrString = 4 };

// Arguments and results: every entry of `types` is 1 (a buffer) in the calls titan emits.
struct FfiList {  // XLA_FFI_Args and XLA_FFI_Rets share this layout
  size_t struct_size;
  FfiExtension* extension_start;
  int64_t size;
  int* types;
  void** items;  // FfiBuffer*
};

struct FfiAttrs {  // XLA_FFI_Attrs: sorted by name
  size_t struct_size;
  FfiExtension* extension_start;
  int64_t size;
  int* types;
  FfiByteSpan** names;
  void** attrs;
};

constexpr int kStageExecute = 3;

struct FfiCallFrame {  // XLA_FFI_CallFrame
  size_t struct_size;
  FfiExtension* extension_start;
  const FfiApi* api;
  void* ctx;
  int stage;
  FfiList args;
  FfiList rets;
  FfiAttrs attrs;
};

// Registration asks each handler for this (a call frame whose extension_start is it) to learn the
// FFI version the handler was built against; a handler answers and runs nothing.
struct FfiMetadata {  // XLA_FFI_Metadata
  size_t struct_size;
  FfiVersion api_version;
  uint32_t traits;
};
struct FfiMetadataExtension {  // XLA_FFI_Metadata_Extension
  FfiExtension base;
  FfiMetadata* metadata;
};

// ---- PJRT's FFI extension (PJRT_Extension_Type_FFI). Version 1 had only the first two calls;
// version 2 added register_handler, so its presence is read from the extension's struct_size.
struct PjrtFfiRegisterHandlerArgs {  // PJRT_FFI_Register_Handler_Args
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;  // FfiError* (*)(FfiCallFrame*)
  const char* platform_name;
  size_t platform_name_size;
  int traits;
};

struct PjrtFfiExtension {  // PJRT_FFI_Extension
  PJRT_Extension_Base base;
  void* type_id_register;
  void* user_data_add;
  PJRT_Error* (*register_handler)(PjrtFfiRegisterHandlerArgs*);
};

}  // namespace titan::graph::pjrt::abi
