#include "titan/graph/pjrt/client_state.h"

#include <iterator>

#include "titan/core/error.h"

namespace titan::graph::pjrt::detail {

ClientState::ClientState(const Plugin& plugin_, PJRT_Client* client_) : plugin(&plugin_), client(client_) {
  PJRT_Client_PlatformName_Args name{};
  name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name.client = client;
  check(api()->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  platform_name.assign(name.platform_name, name.platform_name_size);

  PJRT_Client_AddressableDevices_Args devs{};
  devs.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devs.client = client;
  check(api()->PJRT_Client_AddressableDevices(&devs), "PJRT_Client_AddressableDevices");
  devices.assign(devs.addressable_devices, devs.addressable_devices + devs.num_addressable_devices);
}

ClientState::~ClientState() {
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client;
  // A destructor cannot throw, and a client that fails to shut down leaves nothing to act on.
  if (PJRT_Error* error = api()->PJRT_Client_Destroy(&args)) {
    PJRT_Error_Destroy_Args destroy{};
    destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
    destroy.error = error;
    api()->PJRT_Error_Destroy(&destroy);
  }
}

void ClientState::await(PJRT_Event* event, const char* call) const {
  PJRT_Event_Await_Args wait{};
  wait.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  wait.event = event;
  PJRT_Error* error = api()->PJRT_Event_Await(&wait);
  PJRT_Event_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  destroy.event = event;
  PJRT_Error* destroy_error = api()->PJRT_Event_Destroy(&destroy);
  check(error, call);
  check(destroy_error, "PJRT_Event_Destroy");
}

PJRT_Buffer_Type to_pjrt(DType dtype) {
  switch (dtype) {
    case DType::f32: return PJRT_Buffer_Type_F32;
    case DType::f64: return PJRT_Buffer_Type_F64;
    case DType::bf16: return PJRT_Buffer_Type_BF16;
    case DType::i32: return PJRT_Buffer_Type_S32;
    case DType::i64: return PJRT_Buffer_Type_S64;
  }
  TITAN_CHECK(false, "dtype ", static_cast<int>(dtype),
              " has no PJRT element type: use f32, f64, bf16, i32 or i64");
}

DType from_pjrt(PJRT_Buffer_Type type, const std::string& what) {
  // PJRT_Buffer_Type's first values, for the message below.
  static constexpr const char* kNames[] = {"INVALID", "PRED", "S8",  "S16", "S32", "S64", "U8",
                                           "U16",     "U32",  "U64", "F16", "F32", "F64", "BF16"};
  switch (type) {
    case PJRT_Buffer_Type_F32: return kF32;
    case PJRT_Buffer_Type_F64: return kF64;
    case PJRT_Buffer_Type_BF16: return kBF16;
    case PJRT_Buffer_Type_S32: return kI32;
    case PJRT_Buffer_Type_S64: return kI64;
    default: break;
  }
  const auto index = static_cast<size_t>(type);
  TITAN_CHECK(false, what, " has PJRT element type ",
              index < std::size(kNames) ? kNames[index] : "number " + std::to_string(index),
              ", which titan has no dtype for: return f32, f64, bf16, i32 or i64 (convert in the program)");
}

}  // namespace titan::graph::pjrt::detail
