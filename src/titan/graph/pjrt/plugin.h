#pragma once
// A PJRT plugin: XLA's compiler and device runtime for one platform, as a shared library that
// titan dlopens and drives through the PJRT C API (no Python). Loading checks everything that
// would otherwise crash later (the API's version, the size of its function table) and says which
// plugin to install instead. The C API's types stay out of this header: only graph/pjrt/'s
// sources see pjrt_c_api.h.
#include <string>
#include <vector>

struct PJRT_Api;
struct PJRT_Error;

namespace titan::graph::pjrt {

class Plugin {
 public:
  // `cpu`, `cuda` or `tpu` (looked up in plugin_dir()), or a path: anything with a '/' or ending
  // in `.so`. Loaded and initialized once per resolved path; plugins are never unloaded (XLA's
  // threads and static state do not survive dlclose).
  static Plugin& load(const std::string& name_or_path);
  // $TITAN_PJRT_DIR, else the .pjrt folder that scripts/setup.sh links in the source tree.
  static std::string plugin_dir();

  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  // The C API version the plugin implements, "major.minor" ("0.115").
  std::string api_version() const;
  // PJRT_Extension_Type values of the extensions the plugin offers, in its order (for the
  // start-up log: what a plugin can do beyond the core API differs between builds).
  const std::vector<int>& extension_types() const { return extension_types_; }
  // The FFI extension registers custom-call handlers (titan's own kernels inside a program).
  bool has_ffi_extension() const;
  // The NVIDIA libraries opened for the plugin before it was loaded (nvidia_libraries.h).
  const std::vector<std::string>& preloaded_libraries() const { return preloaded_; }

  // Throws titan::Error naming `call`, this plugin and the plugin's message when `error` is set,
  // after destroying `error`. Every C API call's result goes through here.
  void check(PJRT_Error* error, const char* call) const;

 private:
  Plugin(std::string path, const PJRT_Api* api);

  std::string path_;
  const PJRT_Api* api_ = nullptr;
  std::vector<int> extension_types_ = {};
  std::vector<std::string> preloaded_ = {};
};

}  // namespace titan::graph::pjrt
