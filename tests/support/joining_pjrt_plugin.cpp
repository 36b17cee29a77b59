// A stand-in for a PJRT plugin that spans processes (XLA's CUDA plugin), for testing titan's
// side of it on a machine whose plugins join none. It is the CPU plugin (TITAN_CPU_PLUGIN) with a
// PJRT_Client_Create that takes the CUDA plugin's `node_id` and `num_nodes` options and, as that
// plugin does at creation, exchanges each node's devices through the caller's key-value
// callbacks: it puts "devices/<node_id>", then gets every node's from another thread (the callbacks
// must work from any thread), and checks that try_get answers NOT_FOUND for a key nobody put. The
// client it makes has as many CPU devices as all nodes together. A failed callback's error is
// returned, as the plugin's own. Options:
//   late_reader_ms  nodes other than 0 wait that long between their put and their gets, so that
//                   node 0 is done (and may leave) first;
//   joined = true   the client behaves as one joined across the nodes: node k addresses only its
//                   own devices (ids k*c .. k*c+c-1 of the n*c, c its cpu_device_count), and a
//                   program over all of them runs with each node's arguments for its own devices.
//                   Every node runs the whole program on its own CPU devices, with the other
//                   nodes' arguments fetched through the key-value store, and keeps its devices'
//                   results: what a joined runtime computes, by another route, so that titan's
//                   multi-process path (per-process uploads, runs on a node's devices, results
//                   gathered over MPI) runs end to end. The collectives stay within each process.
#include <dlfcn.h>
#include <pjrt_c_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

struct JoinError {
  PJRT_Error_Code code;
  std::string message;
};

std::mutex errors_mutex;
std::set<const void*> our_errors;
const PJRT_Api* cpu = nullptr;


PJRT_Error* make_error(PJRT_Error_Code code, const char* message, size_t size) {
  auto* e = new JoinError{code, std::string(message, size)};
  std::lock_guard<std::mutex> lock(errors_mutex);
  our_errors.insert(e);
  return reinterpret_cast<PJRT_Error*>(e);
}
PJRT_Error* make_error(const std::string& message) {
  return make_error(PJRT_Error_Code_INVALID_ARGUMENT, message.data(), message.size());
}
PJRT_CallbackError callback_error = [](PJRT_Error_Code code, const char* message, size_t size) {
  return make_error(code, message, size);
};

const JoinError* ours(const PJRT_Error* error) {
  std::lock_guard<std::mutex> lock(errors_mutex);
  return our_errors.count(error) != 0 ? reinterpret_cast<const JoinError*>(error) : nullptr;
}

// The caller's key-value callbacks, as the plugin calls them.
struct Callbacks {
  PJRT_KeyValueGetCallback get = nullptr;
  void* get_arg = nullptr;
  PJRT_KeyValuePutCallback put = nullptr;
  void* put_arg = nullptr;

  PJRT_Error* put_value(const std::string& key, const std::string& value) const {
    PJRT_KeyValuePutCallback_Args args{};
    args.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
    args.key = key.data();
    args.key_size = key.size();
    args.value = value.data();
    args.value_size = value.size();
    args.callback_error = &callback_error;
    args.user_arg = put_arg;
    return put(&args);
  }
  PJRT_Error* get_value(const std::string& key, int64_t timeout_ms, std::string& value) const {
    PJRT_KeyValueGetCallback_Args args{};
    args.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
    args.key = key.data();
    args.key_size = key.size();
    args.timeout_in_ms = static_cast<int>(timeout_ms);
    args.callback_error = &callback_error;
    args.user_arg = get_arg;
    if (PJRT_Error* e = get(&args)) return e;
    value.assign(args.value, args.value_size);
    args.value_deleter_callback(args.value);
    return nullptr;
  }
};

// The joined client (one at a time): its node, the devices by id, and the store's callbacks.
struct Joined {
  bool on = false;
  int64_t node = 0, nodes = 1, local = 1;
  std::vector<PJRT_Device*> by_id;  // every device of the real client, by id
  PJRT_Client* client = nullptr;
  Callbacks kv = {};
  int64_t executions = 0;
};
Joined joined;

int64_t device_id(PJRT_Device* device);

void error_destroy(PJRT_Error_Destroy_Args* args) {
  if (const JoinError* e = ours(args->error)) {
    std::lock_guard<std::mutex> lock(errors_mutex);
    our_errors.erase(e);
    delete e;
    return;
  }
  cpu->PJRT_Error_Destroy(args);
}
void error_message(PJRT_Error_Message_Args* args) {
  if (const JoinError* e = ours(args->error)) {
    args->message = e->message.data();
    args->message_size = e->message.size();
    return;
  }
  cpu->PJRT_Error_Message(args);
}
PJRT_Error* error_code(PJRT_Error_GetCode_Args* args) {
  if (const JoinError* e = ours(args->error)) {
    args->code = e->code;
    return nullptr;
  }
  return cpu->PJRT_Error_GetCode(args);
}

std::string option_name(const PJRT_NamedValue& v) { return std::string(v.name, v.name_size); }

// Every node's device count, read through the callbacks, or the first failed callback's error.
PJRT_Error* exchange(const PJRT_Client_Create_Args& args, int64_t node, int64_t nodes, int64_t devices,
                     int64_t timeout_ms, int64_t late_ms, int64_t& total) {
  const Callbacks kv{args.kv_get_callback, args.kv_get_user_arg, args.kv_put_callback, args.kv_put_user_arg};
  if (PJRT_Error* e = kv.put_value("devices/" + std::to_string(node), std::to_string(devices))) return e;

  const std::string absent = "devices/nobody";
  PJRT_KeyValueTryGetCallback_Args try_get{};
  try_get.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  try_get.key = absent.data();
  try_get.key_size = absent.size();
  try_get.callback_error = &callback_error;
  try_get.user_arg = args.kv_try_get_user_arg;
  PJRT_Error* missing = args.kv_try_get_callback(&try_get);
  const JoinError* not_found = ours(missing);
  if (not_found == nullptr || not_found->code != PJRT_Error_Code_NOT_FOUND) {
    if (missing != nullptr) {
      PJRT_Error_Destroy_Args destroy{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, missing};
      error_destroy(&destroy);
    }
    return make_error("joining plugin: try_get of a key nobody put did not answer NOT_FOUND");
  }
  PJRT_Error_Destroy_Args destroy{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, missing};
  error_destroy(&destroy);

  if (node != 0) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
  PJRT_Error* failed = nullptr;
  total = 0;
  std::thread reader([&] {
    for (int64_t n = 0; n < nodes && failed == nullptr; ++n) {
      std::string count;
      failed = kv.get_value("devices/" + std::to_string(n), timeout_ms, count);
      if (failed == nullptr) total += std::stoll(count);
    }
  });
  reader.join();
  return failed;
}

int64_t device_id(PJRT_Device* device) {
  PJRT_Device_GetDescription_Args get{};
  get.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  get.device = device;
  cpu->PJRT_Device_GetDescription(&get);
  PJRT_DeviceDescription_Id_Args id{};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = get.device_description;
  cpu->PJRT_DeviceDescription_Id(&id);
  return id.id;
}

// This node's devices, of a joined client: ids node*c .. node*c+c-1.
std::vector<PJRT_Device*> mine() {
  return {joined.by_id.begin() + joined.node * joined.local, joined.by_id.begin() + (joined.node + 1) * joined.local};
}

PJRT_Error* client_addressable_devices(PJRT_Client_AddressableDevices_Args* args) {
  if (!joined.on || args->client != joined.client) return cpu->PJRT_Client_AddressableDevices(args);
  static std::vector<PJRT_Device*> devices;
  devices = mine();
  args->addressable_devices = devices.data();
  args->num_addressable_devices = devices.size();
  return nullptr;
}

PJRT_Error* executable_addressable_devices(PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  PJRT_Error* e = cpu->PJRT_LoadedExecutable_AddressableDevices(args);
  if (e != nullptr || !joined.on || args->num_addressable_devices != joined.by_id.size()) return e;
  static std::vector<PJRT_Device*> devices;
  devices = mine();
  args->addressable_devices = devices.data();
  args->num_addressable_devices = devices.size();
  return nullptr;
}

void await(PJRT_Event* event) {
  if (event == nullptr) return;
  PJRT_Event_Await_Args wait{};
  wait.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  wait.event = event;
  if (PJRT_Error* e = cpu->PJRT_Event_Await(&wait)) {
    PJRT_Error_Destroy_Args destroy{PJRT_Error_Destroy_Args_STRUCT_SIZE, nullptr, e};
    cpu->PJRT_Error_Destroy(&destroy);
  }
  PJRT_Event_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  destroy.event = event;
  cpu->PJRT_Event_Destroy(&destroy);
}

std::string bytes_of(PJRT_Buffer* buffer) {
  PJRT_Buffer_ToHostBuffer_Args copy{};
  copy.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  copy.src = buffer;
  cpu->PJRT_Buffer_ToHostBuffer(&copy);
  std::string out(copy.dst_size, '\0');
  copy.dst = out.data();
  copy.event = nullptr;
  cpu->PJRT_Buffer_ToHostBuffer(&copy);
  await(copy.event);
  return out;
}

// `bytes` as a buffer like `like` (its element type and dims) on `device`.
PJRT_Buffer* buffer_from(const std::string& bytes, PJRT_Buffer* like, PJRT_Device* device) {
  PJRT_Buffer_ElementType_Args type{};
  type.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  type.buffer = like;
  cpu->PJRT_Buffer_ElementType(&type);
  PJRT_Buffer_Dimensions_Args dims{};
  dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  dims.buffer = like;
  cpu->PJRT_Buffer_Dimensions(&dims);
  PJRT_Client_BufferFromHostBuffer_Args put{};
  put.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  put.client = joined.client;
  put.data = bytes.data();
  put.type = type.type;
  put.dims = dims.dims;
  put.num_dims = dims.num_dims;
  put.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  put.device = device;
  cpu->PJRT_Client_BufferFromHostBuffer(&put);
  await(put.done_with_host_buffer);
  return put.buffer;
}

// A program over every node's devices, called with this node's arguments: the other nodes'
// arrive through the store, the whole program runs here, and this node's results are returned.
PJRT_Error* execute(PJRT_LoadedExecutable_Execute_Args* args) {
  const size_t local = static_cast<size_t>(joined.local), n = joined.by_id.size();
  if (!joined.on || args->num_devices != local) return cpu->PJRT_LoadedExecutable_Execute(args);
  const std::string run = "exec/" + std::to_string(joined.executions++) + "/";
  const size_t first = static_cast<size_t>(joined.node) * local;
  for (size_t d = 0; d < local; ++d)
    for (size_t i = 0; i < args->num_args; ++i)
      if (PJRT_Error* e = joined.kv.put_value(run + std::to_string(first + d) + "/" + std::to_string(i),
                                              bytes_of(args->argument_lists[d][i])))
        return e;
  // The real executable's devices, in its order, and their partitions (= ids).
  PJRT_LoadedExecutable_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  devices.executable = args->executable;
  if (PJRT_Error* e = cpu->PJRT_LoadedExecutable_AddressableDevices(&devices)) return e;
  PJRT_LoadedExecutable_GetExecutable_Args get_executable{};
  get_executable.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get_executable.loaded_executable = args->executable;
  if (PJRT_Error* e = cpu->PJRT_LoadedExecutable_GetExecutable(&get_executable)) return e;
  PJRT_Executable_NumOutputs_Args outputs{};
  outputs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs.executable = get_executable.executable;
  if (PJRT_Error* e = cpu->PJRT_Executable_NumOutputs(&outputs)) return e;

  std::vector<std::vector<PJRT_Buffer*>> in(n), out(n, std::vector<PJRT_Buffer*>(outputs.num_outputs, nullptr));
  std::vector<PJRT_Buffer*> fetched;
  std::vector<size_t> partition(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t p = static_cast<size_t>(device_id(devices.addressable_devices[k]));
    partition[k] = p;
    if (p >= first && p < first + local) {
      in[k].assign(args->argument_lists[p - first], args->argument_lists[p - first] + args->num_args);
      continue;
    }
    for (size_t i = 0; i < args->num_args; ++i) {
      std::string bytes;
      if (PJRT_Error* e = joined.kv.get_value(run + std::to_string(p) + "/" + std::to_string(i), 120000, bytes))
        return e;
      fetched.push_back(buffer_from(bytes, args->argument_lists[0][i], devices.addressable_devices[k]));
      in[k].push_back(fetched.back());
    }
  }
  std::vector<PJRT_Buffer* const*> in_lists;
  std::vector<PJRT_Buffer**> out_lists;
  for (size_t k = 0; k < n; ++k) {
    in_lists.push_back(in[k].data());
    out_lists.push_back(out[k].data());
  }
  std::vector<PJRT_Event*> done(n, nullptr);
  PJRT_LoadedExecutable_Execute_Args all = *args;
  all.argument_lists = in_lists.data();
  all.num_devices = n;
  all.output_lists = out_lists.data();
  all.device_complete_events = done.data();
  PJRT_Error* error = cpu->PJRT_LoadedExecutable_Execute(&all);
  for (size_t k = 0; k < n; ++k) {
    const size_t p = partition[k];
    if (p >= first && p < first + local) {
      std::copy(out[k].begin(), out[k].end(), args->output_lists[p - first]);
      if (args->device_complete_events != nullptr) args->device_complete_events[p - first] = done[k];
      else await(done[k]);
      continue;
    }
    await(done[k]);
    for (PJRT_Buffer* b : out[k]) {
      if (b == nullptr) continue;
      PJRT_Buffer_Destroy_Args destroy{PJRT_Buffer_Destroy_Args_STRUCT_SIZE, nullptr, b};
      cpu->PJRT_Buffer_Destroy(&destroy);
    }
  }
  for (PJRT_Buffer* b : fetched) {
    PJRT_Buffer_Destroy_Args destroy{PJRT_Buffer_Destroy_Args_STRUCT_SIZE, nullptr, b};
    cpu->PJRT_Buffer_Destroy(&destroy);
  }
  return error;
}

PJRT_Error* client_process_index(PJRT_Client_ProcessIndex_Args* args) {
  if (!joined.on || args->client != joined.client) return cpu->PJRT_Client_ProcessIndex(args);
  args->process_index = static_cast<int>(joined.node);
  return nullptr;
}

PJRT_Error* client_destroy(PJRT_Client_Destroy_Args* args) {
  if (joined.on && args->client == joined.client) joined = Joined{};
  return cpu->PJRT_Client_Destroy(args);
}

PJRT_Error* client_create(PJRT_Client_Create_Args* args) {
  int64_t node = 0, nodes = 1, devices = 1, timeout_ms = 10000, late_ms = 0;
  bool join = false;
  std::vector<PJRT_NamedValue> passed;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& v = args->create_options[i];
    const std::string name = option_name(v);
    if (name == "node_id") node = v.int64_value;
    else if (name == "num_nodes") nodes = v.int64_value;
    else if (name == "kv_timeout_ms") timeout_ms = v.int64_value;
    else if (name == "late_reader_ms") late_ms = v.int64_value;
    else if (name == "joined") join = v.bool_value;
    else if (name == "cpu_device_count") devices = v.int64_value;
    else passed.push_back(v);
  }
  int64_t total = devices;
  if (nodes > 1) {
    if (args->kv_get_callback == nullptr || args->kv_put_callback == nullptr || args->kv_try_get_callback == nullptr)
      return make_error("joining plugin: num_nodes > 1 needs the caller's key-value callbacks");
    if (PJRT_Error* e = exchange(*args, node, nodes, devices, timeout_ms, late_ms, total)) return e;
  }
  const std::string count_name = "cpu_device_count", process_name = "process_id";
  PJRT_NamedValue count{};
  count.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  count.name = count_name.c_str();
  count.name_size = count_name.size();
  count.type = PJRT_NamedValue_kInt64;
  count.int64_value = total;
  count.value_size = 1;
  PJRT_NamedValue process = count;
  process.name = process_name.c_str();
  process.name_size = process_name.size();
  // Joined, every node's client holds all the devices, numbered 0..n*c-1 as one process's are (the
  // CPU plugin numbers another process's devices apart); the node is its process index instead.
  process.int64_value = join ? 0 : node;
  passed.push_back(count);
  passed.push_back(process);
  PJRT_Client_Create_Args inner = *args;
  inner.create_options = passed.data();
  inner.num_options = passed.size();
  PJRT_Error* error = cpu->PJRT_Client_Create(&inner);
  args->client = inner.client;
  if (error != nullptr || !join || nodes == 1) return error;
  joined = Joined{.on = true,
                  .node = node,
                  .nodes = nodes,
                  .local = devices,
                  .by_id = {},
                  .client = inner.client,
                  .kv = {args->kv_get_callback, args->kv_get_user_arg, args->kv_put_callback, args->kv_put_user_arg}};
  PJRT_Client_AddressableDevices_Args all{};
  all.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  all.client = inner.client;
  if (PJRT_Error* e = cpu->PJRT_Client_AddressableDevices(&all)) return e;
  joined.by_id.resize(all.num_addressable_devices);
  for (size_t i = 0; i < all.num_addressable_devices; ++i) {
    const int64_t id = device_id(all.addressable_devices[i]);
    if (id < 0 || id >= static_cast<int64_t>(all.num_addressable_devices))
      return make_error("joining plugin: the CPU client's device " + std::to_string(i) + " has id " + std::to_string(id));
    joined.by_id[static_cast<size_t>(id)] = all.addressable_devices[i];
  }
  return nullptr;
}

PJRT_Api make_api() {
  void* library = dlopen(TITAN_CPU_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return PJRT_Api{};
  using GetApi = const PJRT_Api* (*)();
  cpu = reinterpret_cast<GetApi>(dlsym(library, "GetPjrtApi"))();
  PJRT_Api api{};
  std::memcpy(&api, cpu, std::min(cpu->struct_size, sizeof api));
  api.PJRT_Client_Create = client_create;
  api.PJRT_Error_Destroy = error_destroy;
  api.PJRT_Error_Message = error_message;
  api.PJRT_Error_GetCode = error_code;
  api.PJRT_Client_Destroy = client_destroy;
  api.PJRT_Client_ProcessIndex = client_process_index;
  api.PJRT_Client_AddressableDevices = client_addressable_devices;
  api.PJRT_LoadedExecutable_AddressableDevices = executable_addressable_devices;
  api.PJRT_LoadedExecutable_Execute = execute;
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api api = make_api();
  return &api;
}
