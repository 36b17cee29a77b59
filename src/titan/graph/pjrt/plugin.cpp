#include "titan/graph/pjrt/plugin.h"

#include <dlfcn.h>
#include <pjrt_c_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "titan/core/error.h"
#include "titan/graph/pjrt/extension.h"
#include "titan/graph/pjrt/nvidia_libraries.h"

namespace titan::graph::pjrt {
namespace {

namespace fs = std::filesystem;

// Where the function table must reach: the end of the last PJRT_Api function titan calls (all
// are listed). An older plugin's shorter table would otherwise be read past its end.
#define TITAN_PJRT_END_OF(fn) offsetof(PJRT_Api, fn) + sizeof(PJRT_Api::fn)
constexpr size_t kApiSizeNeeded = std::max({
    TITAN_PJRT_END_OF(PJRT_Error_Destroy),
    TITAN_PJRT_END_OF(PJRT_Error_Message),
    TITAN_PJRT_END_OF(PJRT_Plugin_Initialize),
    TITAN_PJRT_END_OF(PJRT_Event_Destroy),
    TITAN_PJRT_END_OF(PJRT_Event_Await),
    TITAN_PJRT_END_OF(PJRT_Client_Create),
    TITAN_PJRT_END_OF(PJRT_Client_Destroy),
    TITAN_PJRT_END_OF(PJRT_Client_PlatformName),
    TITAN_PJRT_END_OF(PJRT_Client_AddressableDevices),
    TITAN_PJRT_END_OF(PJRT_Client_Compile),
    TITAN_PJRT_END_OF(PJRT_Client_BufferFromHostBuffer),
    TITAN_PJRT_END_OF(PJRT_DeviceDescription_DebugString),
    TITAN_PJRT_END_OF(PJRT_Device_GetDescription),
    TITAN_PJRT_END_OF(PJRT_Executable_Destroy),
    TITAN_PJRT_END_OF(PJRT_Executable_Name),
    TITAN_PJRT_END_OF(PJRT_Executable_NumOutputs),
    TITAN_PJRT_END_OF(PJRT_LoadedExecutable_Destroy),
    TITAN_PJRT_END_OF(PJRT_LoadedExecutable_GetExecutable),
    TITAN_PJRT_END_OF(PJRT_LoadedExecutable_Execute),
    TITAN_PJRT_END_OF(PJRT_Buffer_Destroy),
    TITAN_PJRT_END_OF(PJRT_Buffer_ElementType),
    TITAN_PJRT_END_OF(PJRT_Buffer_Dimensions),
    TITAN_PJRT_END_OF(PJRT_Buffer_ToHostBuffer),
});
#undef TITAN_PJRT_END_OF

// Where each platform's plugin sits under plugin_dir(), and what puts it there.
struct Known {
  const char* name;
  const char* relative_path;
  const char* install;
};
constexpr Known kKnown[] = {
    {"cpu", "cpu/pjrt_c_api_cpu_plugin.so", "run scripts/setup.sh (it installs the CPU plugins into .pjrt)"},
    {"cuda", "cuda/jax_plugins/xla_cuda13/xla_cuda_plugin.so",
     "unpack the wheels jax-cuda13-pjrt and jax-cuda13-plugin[with-cuda] into <plugin dir>/cuda "
     "(scripts/gpu_check.sh does it)"},
    {"tpu", "tpu/libtpu/libtpu.so", "unpack the libtpu wheel into <plugin dir>/tpu"},
};

bool is_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 3 && s.ends_with(".so"));
}

// The plugin's file for `name_or_path`, and what to do when it is missing.
std::pair<std::string, std::string> resolve(const std::string& name_or_path) {
  if (is_path(name_or_path)) {
    return {name_or_path,
            "give the path of a PJRT plugin (a shared library exporting GetPjrtApi), or cpu, cuda "
            "or tpu"};
  }
  std::string names;
  for (const Known& known : kKnown) {
    if (name_or_path == known.name) {
      return {Plugin::plugin_dir() + "/" + known.relative_path,
              std::string(known.install) +
                  ", set TITAN_PJRT_DIR to a folder laid out like .pjrt, or pass "
                  "the plugin's path"};
    }
    names += names.empty() ? "" : ", ";
    names += known.name;
  }
  TITAN_CHECK(false, "unknown PJRT plugin '", name_or_path, "': give one of ", names,
              ", or a plugin's path (containing '/' or ending in .so)");
}

std::string version_of(const PJRT_Api* api) {
  return std::to_string(api->pjrt_api_version.major_version) + "." +
         std::to_string(api->pjrt_api_version.minor_version);
}

}  // namespace

std::string Plugin::plugin_dir() {
  const char* env = std::getenv("TITAN_PJRT_DIR");
  return env && *env ? env : TITAN_PJRT_DEFAULT_DIR;
}

Plugin& Plugin::load(const std::string& name_or_path) {
  auto [path, install] = resolve(name_or_path);
  std::error_code ec;
  TITAN_CHECK(fs::is_regular_file(path, ec), "PJRT plugin '", name_or_path, "' not found: no file ", path,
              "; ", install);
  const std::string key = fs::canonical(path).string();

  static std::mutex mutex;
  // Never destroyed, as the plugins are never unloaded: clients, buffers and executables held by
  // other statics may still call into a plugin while the process exits.
  static auto& loaded = *new std::map<std::string, std::unique_ptr<Plugin>>();
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(key); it != loaded.end()) return *it->second;

  std::vector<std::string> nvidia = preload_nvidia_libraries(key);
  // RTLD_LOCAL: each plugin carries its own LLVM and protobuf, which must not resolve against
  // another plugin's (two CPU plugins are loaded side by side in the tests).
  void* handle = dlopen(key.c_str(), RTLD_NOW | RTLD_LOCAL);
  TITAN_CHECK(handle, "cannot load PJRT plugin ", key,
              ", which must be a shared library for this machine whose ",
              "dependencies are found: ", dlerror(), "; ", install);
  using GetPjrtApi = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApi>(dlsym(handle, "GetPjrtApi"));
  TITAN_CHECK(get_api, "PJRT plugin ", key,
              " exports no GetPjrtApi: it is a shared library but not a PJRT plugin; ", install);
  const PJRT_Api* api = get_api();
  TITAN_CHECK(api && api->struct_size >= offsetof(PJRT_Api, pjrt_api_version) + sizeof(PJRT_Api_Version),
              "PJRT plugin ", key, "'s GetPjrtApi returned ",
              api ? "a table too short to hold its version" : "null", ": the plugin is broken; ", install);
  const PJRT_Api_Version& version = api->pjrt_api_version;
  TITAN_CHECK(version.major_version == PJRT_API_MAJOR, "PJRT plugin ", key, " implements PJRT C API ",
              version_of(api), "; titan is built for major version ", PJRT_API_MAJOR,
              " (.pjrt/include/pjrt_c_api.h, API ", PJRT_API_MAJOR, ".", PJRT_API_MINOR,
              "): use a plugin of major version ", PJRT_API_MAJOR, "; ", install);
  TITAN_CHECK(version.minor_version >= PJRT_API_MINOR, "PJRT plugin ", key, " implements PJRT C API ",
              version_of(api), ", older than the ", PJRT_API_MAJOR, ".", PJRT_API_MINOR,
              " titan is built against: use a newer plugin; ", install);
  TITAN_CHECK(api->struct_size >= kApiSizeNeeded, "PJRT plugin ", key, " (C API ", version_of(api),
              ") has a function table of ", api->struct_size, " bytes; titan calls functions up to byte ",
              kApiSizeNeeded, ": the plugin is broken or not what its version says; ", install);

  auto plugin = std::unique_ptr<Plugin>(new Plugin(key, api));
  plugin->preloaded_ = std::move(nvidia);
  PJRT_Plugin_Initialize_Args args{};
  args.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  plugin->check(api->PJRT_Plugin_Initialize(&args), "PJRT_Plugin_Initialize");
  return *loaded.emplace(key, std::move(plugin)).first->second;
}

Plugin::Plugin(std::string path, const PJRT_Api* api) : path_(std::move(path)), api_(api) {
  // A bound on the walk: a corrupt chain must not hang start-up.
  int left = 64;
  for (const PJRT_Extension_Base* ext = api->extension_start; ext && left-- > 0; ext = ext->next) {
    extension_types_.push_back(extension_type(ext));
  }
}

std::string Plugin::api_version() const {
  return version_of(api_);
}

bool Plugin::has_ffi_extension() const {
  return std::find(extension_types_.begin(), extension_types_.end(), PJRT_Extension_Type_FFI) !=
         extension_types_.end();
}

void Plugin::check(PJRT_Error* error, const char* call) const {
  if (!error) return;
  PJRT_Error_Message_Args message{};
  message.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message.error = error;
  api_->PJRT_Error_Message(&message);
  const std::string text(message.message, message.message_size);
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api_->PJRT_Error_Destroy(&destroy);
  TITAN_CHECK(false, call, " failed in PJRT plugin ", path_, ": ", text);
}

}  // namespace titan::graph::pjrt
