#pragma once
// Compiles captured programs on one PJRT client and moves tensors to and from its device: what
// graph mode's trainer and tests share. A program whose text was compiled before is not compiled
// again (the cache is keyed by the text itself).
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"
#include "titan/graph/pjrt/client.h"
#include "titan/graph/pjrt/compile_options.h"

namespace titan::graph {

// Which plugin, how to create its client and how to compile for it (the [compile] keys `plugin`,
// `plugin_options` and `xla_options`).
struct RuntimeOptions {
  std::string plugin = "cpu";
  std::vector<pjrt::ClientOption> client_options = {};
  // Every compilation's XLA options, after titan's own (so that these win over them).
  std::vector<pjrt::XlaOption> xla_options = {};
  // Where the client spans several processes: the store they exchange their topology through
  // (Client::create).
  std::shared_ptr<KeyValueStore> store = {};
};

// `plugin` and the client options written as "a=1,b=true,c=0.5,d=text" (integers, booleans,
// decimals, else strings), as the [compile] keys hold them; a malformed item is an error naming
// `key`.
RuntimeOptions parse_runtime_options(const std::string& plugin, const std::string& options, const std::string& key);

// XLA's options written as "xla_a=1,xla_b=true,xla_c=0.5,xla_d=text" (typed as client options are;
// `name=` gives the empty string). An item without '=' continues the previous value, so that a list
// value keeps its commas ("xla_gpu_enable_command_buffer=FUSION,CUBLAS"). Every name must start
// with xla_, as DebugOptions' fields do; a malformed item is an error naming `key`. Whether XLA
// knows a name and its type is the plugin's to say, when it compiles.
std::vector<pjrt::XlaOption> parse_xla_options(const std::string& text, const std::string& key);
// The piece of `host` that device `device` holds under `sharding` (all of it when replicated), and
// the pieces of all devices, in device order, put back together.
Tensor shard_of(const Tensor& host, const Sharding& sharding, int64_t device);
Tensor unshard(const std::vector<Tensor>& pieces, const Sharding& sharding);

class Runner {
 public:
  explicit Runner(const RuntimeOptions& options);

  struct Compiled {
    pjrt::Executable* executable = nullptr;
    bool fresh = false;     // compiled by this call (not found in the cache)
    double seconds = 0.0;   // its compile time
    // With keep_optimized_text, of a fresh compile: the HLO text XLA ran (after its passes, the
    // partitioner's collectives included), as its dump writes it; empty if the plugin wrote none.
    std::string optimized_text = {};
  };
  // `partitions` > 1: a program over that many devices (Program::set_partitions), split by XLA's
  // SPMD partitioner.
  Compiled compile(const std::string& module_text, int64_t partitions = 1, bool keep_optimized_text = false);
  int64_t compiles() const { return compiles_; }

  pjrt::Buffer upload(const Tensor& host, int device = 0) const;
  // A new host tensor holding `buffer`.
  Tensor download(const pjrt::Buffer& buffer) const;
  // Into an existing contiguous host tensor of the buffer's shape and dtype.
  void download_into(const pjrt::Buffer& buffer, const Tensor& host) const;

  const pjrt::Client& client() const { return client_; }
  // The kind of device the plugin compiles for, as a program records it (Program::set_platform).
  Program::Platform platform() const;
  // "cpu (plugin 0.115, …/pjrt_c_api_cpu_plugin.so)", for logs.
  std::string describe() const;

 private:
  pjrt::Client client_;
  std::vector<pjrt::XlaOption> xla_options_;
  int64_t compiles_ = 0;
  std::unordered_map<std::string, std::unique_ptr<pjrt::Executable>> cache_;
};

}  // namespace titan::graph
