#include "titan/graph/pjrt/client.h"

#include <chrono>
#include <cstddef>

#include "titan/core/error.h"
#include "titan/graph/pjrt/client_state.h"
#include "titan/graph/pjrt/kv_callbacks.h"

namespace titan::graph::pjrt {
namespace {

PJRT_NamedValue named_value(const ClientOption& option) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = option.name.c_str();
  v.name_size = option.name.size();
  v.value_size = 1;
  if (const auto* i = std::get_if<int64_t>(&option.value)) {
    v.type = PJRT_NamedValue_kInt64;
    v.int64_value = *i;
  } else if (const auto* s = std::get_if<std::string>(&option.value)) {
    v.type = PJRT_NamedValue_kString;
    v.string_value = s->c_str();
    v.value_size = s->size();
  } else if (const auto* b = std::get_if<bool>(&option.value)) {
    v.type = PJRT_NamedValue_kBool;
    v.bool_value = *b;
  } else {
    v.type = PJRT_NamedValue_kFloat;
    v.float_value = std::get<float>(option.value);
  }
  return v;
}

}  // namespace

Client Client::create(const Plugin& plugin, const std::vector<ClientOption>& options,
                      std::shared_ptr<KeyValueStore> store) {
  std::vector<PJRT_NamedValue> values;
  for (const ClientOption& option : options) values.push_back(named_value(option));
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = values.data();
  args.num_options = values.size();
  if (store) detail::set_kv_callbacks(args, *store);
  plugin.check(plugin.api()->PJRT_Client_Create(&args), "PJRT_Client_Create");
  auto state = std::make_shared<detail::ClientState>(plugin, args.client);
  state->store = std::move(store);
  return Client(std::move(state));
}

const Plugin& Client::plugin() const {
  return *state_->plugin;
}
const std::string& Client::platform_name() const {
  return state_->platform_name;
}
int Client::device_count() const {
  return static_cast<int>(state_->devices.size());
}

int Client::global_device_count() const {
  PJRT_Client_Devices_Args all{};
  all.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all.client = state_->client;
  state_->check(state_->api()->PJRT_Client_Devices(&all), "PJRT_Client_Devices");
  return static_cast<int>(all.num_devices);
}

int Client::process_index() const {
  PJRT_Client_ProcessIndex_Args index{};
  index.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  index.client = state_->client;
  state_->check(state_->api()->PJRT_Client_ProcessIndex(&index), "PJRT_Client_ProcessIndex");
  return index.process_index;
}

namespace {

// The plugin's description of the client's addressable device `i`.
PJRT_DeviceDescription* description_of(const detail::ClientState& state, int i) {
  const int count = static_cast<int>(state.devices.size());
  TITAN_CHECK(i >= 0 && i < count, "device ", i, " does not exist: the ", state.platform_name, " client has ", count,
              " addressable devices");
  PJRT_Device_GetDescription_Args get{};
  get.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  get.device = state.devices[i];
  state.check(state.api()->PJRT_Device_GetDescription(&get), "PJRT_Device_GetDescription");
  return get.device_description;
}

}  // namespace

int Client::device_id(int i) const {
  PJRT_DeviceDescription_Id_Args id{};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = description_of(*state_, i);
  state_->check(state_->api()->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
  return id.id;
}

std::string Client::device_description(int i) const {
  PJRT_DeviceDescription_DebugString_Args text{};
  text.struct_size = PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE;
  text.device_description = description_of(*state_, i);
  state_->check(state_->api()->PJRT_DeviceDescription_DebugString(&text),
                "PJRT_DeviceDescription_DebugString");
  return std::string(text.debug_string, text.debug_string_size);
}

std::optional<Client::MemoryStats> Client::memory_stats(int i) const {
  TITAN_CHECK(i >= 0 && i < device_count(), "memory_stats: device ", i, " does not exist: the ",
              platform_name(), " client has ", device_count(), " addressable devices");
  const PJRT_Api* api = state_->api();
  if (api->struct_size <= offsetof(PJRT_Api, PJRT_Device_MemoryStats) || !api->PJRT_Device_MemoryStats)
    return std::nullopt;
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = state_->devices[i];
  try {
    state_->check(api->PJRT_Device_MemoryStats(&args), "PJRT_Device_MemoryStats");
  } catch (const Error&) {
    return std::nullopt;  // Unimplemented: the CPU plugins keep no device allocator
  }
  MemoryStats stats{.bytes_in_use = args.bytes_in_use};
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

Buffer Client::to_device(const void* host, DType dtype, const Shape& dims, int device) const {
  TITAN_CHECK(device >= 0 && device < device_count(), "to_device: device ", device, " does not exist: the ",
              platform_name(), " client has ", device_count(), " addressable devices");
  for (int64_t d : dims) TITAN_CHECK(d >= 0, "to_device: negative dimension in ", dims);
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = state_->client;
  args.data = host;
  args.type = detail::to_pjrt(dtype);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = state_->devices[device];
  state_->check(state_->api()->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  Buffer buffer(state_, args.buffer, dtype, dims);
  state_->await(args.done_with_host_buffer, "PJRT_Client_BufferFromHostBuffer (awaiting the copy)");
  return buffer;
}

Executable Client::compile(const std::string& stablehlo_text, const CompileSpec& spec) const {
  const std::string options = compile_options_proto(spec);
  static constexpr char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  // The C API's field is not const, but compiling only reads it.
  program.code = const_cast<char*>(stablehlo_text.data());
  program.code_size = stablehlo_text.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = state_->client;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  const auto start = std::chrono::steady_clock::now();
  state_->check(state_->api()->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  // Own the executable before parsing, so that a parse failure frees it.
  Executable executable(state_, args.executable, seconds.count());
  executable.parameters_ = main_parameters(stablehlo_text);
  return executable;
}

}  // namespace titan::graph::pjrt
