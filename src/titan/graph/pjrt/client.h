#pragma once
// A PJRT client: one plugin's devices, where titan puts arrays (to_device) and compiles
// StableHLO programs (compile). Copies share the client; it lives until the last Client, Buffer
// and Executable made from it are gone.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/core/key_value_store.h"
#include "titan/core/shape.h"
#include "titan/graph/pjrt/buffer.h"
#include "titan/graph/pjrt/compile_options.h"
#include "titan/graph/pjrt/executable.h"
#include "titan/graph/pjrt/plugin.h"

namespace titan::graph::pjrt {

// A plugin-specific client setting (PJRT_NamedValue), e.g. the CPU plugin's
// {"cpu_device_count", int64_t{1}}.
struct ClientOption {
  std::string name = {};
  std::variant<int64_t, std::string, bool, float> value = {};
};

class Client {
 public:
  // `store`, where given, is the key-value store a plugin that spans processes exchanges its
  // topology through (PJRT_Client_Create's kv callbacks); the client keeps it while it lives.
  static Client create(const Plugin& plugin, const std::vector<ClientOption>& options = {},
                       std::shared_ptr<KeyValueStore> store = nullptr);

  const Plugin& plugin() const;
  // "cpu", "cuda", "tpu", as the plugin names its platform.
  const std::string& platform_name() const;
  // Addressable devices: the ones this process can put arrays on and run programs on.
  int device_count() const;
  // Every device the client knows, other processes' included: more than device_count() only where
  // the plugin joined several processes into one client.
  int global_device_count() const;
  // This process's index among the processes the plugin joined (its create option process_id,
  // where it takes one).
  int process_index() const;
  // Addressable device `i`'s id among every device the client knows: which partition of a program
  // it runs (a program over N partitions runs partition p on the device of id p).
  int device_id(int i) const;
  // The plugin's own description of device `i`, for logs.
  std::string device_description(int i) const;

  // Device `i`'s memory as its allocator counts it, where the plugin reports it (the GPU plugins
  // do; the CPU plugins answer Unimplemented, and older API tables lack the call): nullopt there.
  struct MemoryStats {
    int64_t bytes_in_use = 0;
    std::optional<int64_t> peak_bytes_in_use = {};
    std::optional<int64_t> bytes_limit = {};
  };
  std::optional<MemoryStats> memory_stats(int i = 0) const;
  // Copies `host` (numel(dims) elements of `dtype`, row-major) to device `device`; the host
  // memory may be reused once this returns.
  Buffer to_device(const void* host, DType dtype, const Shape& dims, int device = 0) const;
  // Compiles StableHLO (MLIR text) whose entry is `main`; the plugin's compiler message on failure.
  Executable compile(const std::string& stablehlo_text, const CompileSpec& spec = {}) const;

 private:
  explicit Client(std::shared_ptr<const detail::ClientState> state) : state_(std::move(state)) {}
  std::shared_ptr<const detail::ClientState> state_ = {};
};

}  // namespace titan::graph::pjrt
