#pragma once
// A compiled StableHLO program on its client's device 0 (Client::compile makes one).
#include <memory>
#include <string>
#include <vector>

#include "titan/graph/pjrt/buffer.h"
#include "titan/graph/pjrt/signature.h"

struct PJRT_LoadedExecutable;

namespace titan::graph::pjrt {

namespace detail {
struct ClientState;
}

class Executable {
 public:
  ~Executable();
  Executable(Executable&& other) noexcept;
  Executable& operator=(Executable&& other) noexcept;
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs the program on `args` (one per parameter of main, in order) and waits for it; returns one
  // buffer per result. The arguments are checked against main's parameters first. `donated` lists
  // the arguments whose buffers the run may consume: each must be a parameter the module marks
  // {tf.aliasing_output = K : i32}; its Buffer is empty afterwards (output K holds the update).
  // A marked parameter left out of `donated` is copied instead, and its buffer stays valid.
  std::vector<Buffer> execute(const std::vector<Buffer*>& args, const std::vector<int>& donated = {});
  // Runs a program compiled for several partitions (CompileSpec::num_partitions, SPMD) once on
  // each of its devices: args[d] are device d's arguments, each its shard of main's parameter as
  // the module's mhlo.sharding lays it out; returns each device's outputs, its shards of main's
  // results. The arguments are checked as for execute, but for their shapes, which the plugin checks.
  // `donated` as for execute, on every device.
  std::vector<std::vector<Buffer>> execute_partitioned(const std::vector<std::vector<Buffer*>>& args,
                                                       const std::vector<int>& donated = {});

  const std::string& name() const { return name_; }
  double compile_seconds() const { return compile_seconds_; }
  size_t num_outputs() const { return num_outputs_; }
  const std::vector<Parameter>& parameters() const { return parameters_; }

 private:
  friend class Client;
  // Runs on args.size() devices, each with its arguments; `donated` are given up on every device.
  std::vector<std::vector<Buffer>> launch(const std::vector<std::vector<Buffer*>>& args, const std::vector<int>& donated);
  Executable(std::shared_ptr<const detail::ClientState> client, PJRT_LoadedExecutable* executable,
             double compile_seconds);
  // Throws, naming the argument, when `args` or `donated` do not fit main's parameters; their
  // shapes only when `whole` (a shard's are the plugin's to check).
  void check_arguments(const std::vector<Buffer*>& args, const std::vector<int>& donated, bool whole = true) const;
  void release();

  std::shared_ptr<const detail::ClientState> client_ = {};
  PJRT_LoadedExecutable* executable_ = nullptr;
  std::vector<Parameter> parameters_ = {};
  std::string name_ = {};
  size_t num_outputs_ = 0;
  double compile_seconds_ = 0;
};

}  // namespace titan::graph::pjrt
