#pragma once
// Graph mode over several processes (one per MPI rank), for plugins that join them into one
// client (XLA's CUDA plugin with node_id / num_nodes; TPU plugins by their own environment): each
// process owns some of the program's devices, uploads only their pieces, runs the program on them,
// and the processes put a whole tensor back together over MPI. The CPU plugins join no processes
// (tests/dist/test_graph_processes.cpp), so graph mode refuses several ranks there.
#include <cstdint>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"
#include "titan/graph/ir/program.h"
#include "titan/graph/runner.h"

namespace titan::train {

// The create options that tell `plugin` which of `processes` processes this is: the CUDA plugin's
// node_id and num_nodes, unless `options` sets them already (compile.plugin_options). A TPU plugin
// reads its place from its own environment and gets none. Refused for the CPU plugins, which
// cannot join processes, naming the key and what to do instead.
void add_process_options(graph::RuntimeOptions& options, int rank, int processes);

// The partition of the program that each of this process's devices runs, in the client's order
// of its devices: 0..partitions-1 in one process; over several, each device's global id (a program
// over N partitions runs partition p on the device of id p). Throws, naming the plugin, where the
// client does not hold `partitions` devices across the processes, each process the same number.
std::vector<int64_t> local_partitions(const graph::pjrt::Client& client, int64_t partitions,
                                      dist::ProcessGroup* processes);

// The whole tensor from `mine`, this process's pieces (of `partitions`, one each) of a tensor laid
// out by `sharding` over `devices` devices, and the other processes' pieces, gathered over
// `processes`.
Tensor gather_whole(const std::vector<Tensor>& mine, const std::vector<int64_t>& partitions,
                    const graph::Sharding& sharding, int64_t devices, dist::ProcessGroup& processes);

}  // namespace titan::train
