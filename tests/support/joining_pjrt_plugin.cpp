// A stand-in for a PJRT plugin that spans processes (XLA's CUDA plugin), for testing titan's
// side of it on a machine whose plugins join none: it is the CPU plugin (TITAN_CPU_PLUGIN) with a
// PJRT_Client_Create that takes the CUDA plugin's `node_id` and `num_nodes` options and, as that
// plugin does at creation, exchanges each node's devices through the caller's key-value
// callbacks: it puts "devices/<node_id>", then gets every node's from another thread (the callbacks
// must work from any thread), and checks that try_get answers NOT_FOUND for a key nobody put. The
// client it makes has as many CPU devices as all nodes together, so a caller sees that every
// node's value arrived. A failed callback's error is returned, as the plugin's own. Option
// `late_reader_ms`: nodes other than 0 wait that long between their put and their gets, so that
// node 0 is done (and may leave) first.
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
  const std::string mine = "devices/" + std::to_string(node);
  const std::string count = std::to_string(devices);
  PJRT_KeyValuePutCallback_Args put{};
  put.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  put.key = mine.data();
  put.key_size = mine.size();
  put.value = count.data();
  put.value_size = count.size();
  put.callback_error = &callback_error;
  put.user_arg = args.kv_put_user_arg;
  if (PJRT_Error* e = args.kv_put_callback(&put)) return e;

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
      const std::string key = "devices/" + std::to_string(n);
      PJRT_KeyValueGetCallback_Args get{};
      get.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
      get.key = key.data();
      get.key_size = key.size();
      get.timeout_in_ms = static_cast<int>(timeout_ms);
      get.callback_error = &callback_error;
      get.user_arg = args.kv_get_user_arg;
      failed = args.kv_get_callback(&get);
      if (failed != nullptr) break;
      total += std::stoll(std::string(get.value, get.value_size));
      get.value_deleter_callback(get.value);
    }
  });
  reader.join();
  return failed;
}

PJRT_Error* client_create(PJRT_Client_Create_Args* args) {
  int64_t node = 0, nodes = 1, devices = 1, timeout_ms = 10000, late_ms = 0;
  std::vector<PJRT_NamedValue> passed;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& v = args->create_options[i];
    const std::string name = option_name(v);
    if (name == "node_id") node = v.int64_value;
    else if (name == "num_nodes") nodes = v.int64_value;
    else if (name == "kv_timeout_ms") timeout_ms = v.int64_value;
    else if (name == "late_reader_ms") late_ms = v.int64_value;
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
  process.int64_value = node;
  passed.push_back(count);
  passed.push_back(process);
  PJRT_Client_Create_Args inner = *args;
  inner.create_options = passed.data();
  inner.num_options = passed.size();
  PJRT_Error* error = cpu->PJRT_Client_Create(&inner);
  args->client = inner.client;
  return error;
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
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api api = make_api();
  return &api;
}
