#include "titan/train/graph_mode/graph_processes.h"

#include <algorithm>
#include <numeric>

#include "titan/core/error.h"

namespace titan::train {

void add_process_options(graph::RuntimeOptions& options, int rank, int processes) {
  TITAN_CHECK(options.plugin != "cpu",
              "compile.enable = true over ", processes,
              " processes needs a plugin that joins them into one client, but compile.plugin = \"cpu\" runs its "
              "collectives within one process only (its client knows only its own devices); launch one process "
              "(its [parallelism] degrees split the step over the plugin's devices), or set compile.enable = false "
              "to train eagerly over the ranks");
  if (options.plugin == "tpu") return;
  bool named = false;
  for (const graph::pjrt::ClientOption& o : options.client_options)
    named = named || o.name == "node_id" || o.name == "num_nodes";
  if (named) return;
  options.client_options.push_back({"node_id", int64_t{rank}});
  options.client_options.push_back({"num_nodes", int64_t{processes}});
}

std::vector<int64_t> local_partitions(const graph::pjrt::Client& client, int64_t partitions,
                                      dist::ProcessGroup* processes) {
  const int64_t local = client.device_count();
  std::vector<int64_t> mine;
  if (processes == nullptr || processes->size() == 1) {
    TITAN_CHECK(local >= partitions, "graph mode: the step is split over ", partitions, " devices, but plugin ",
                client.plugin().path(), " has ", local,
                "; give the CPU plugin more with compile.plugin_options \"cpu_device_count=", partitions,
                "\", or lower the [parallelism] degrees");
    mine.resize(static_cast<size_t>(partitions));
    std::iota(mine.begin(), mine.end(), int64_t{0});
    return mine;
  }
  const int64_t global = client.global_device_count();
  TITAN_CHECK(global > local, "graph mode over ", processes->size(), " processes: plugin ", client.plugin().path(),
              " did not join them (its client knows only this process's ", local,
              " devices); it needs the options that name this process (node_id / num_nodes for the CUDA plugin) "
              "and the key-value store titan passes it");
  TITAN_CHECK(global == partitions && global == local * processes->size(), "graph mode: the step is split over ",
              partitions, " devices, but the ", processes->size(), " processes hold ", global, " (this one ", local,
              "); the [parallelism] degrees must multiply to every device, each process holding the same number");
  for (int i = 0; i < local; ++i) {
    const int64_t id = client.device_id(i);
    TITAN_CHECK(id >= 0 && id < partitions, "graph mode: device ", i, " of process ", processes->rank(), " has id ",
                id, ", outside the program's ", partitions, " partitions");
    mine.push_back(id);
  }
  return mine;
}

Tensor gather_whole(const std::vector<Tensor>& mine, const std::vector<int64_t>& partitions,
                    const graph::Sharding& sharding, int64_t devices, dist::ProcessGroup& processes) {
  TITAN_CHECK(!mine.empty() && mine.size() == partitions.size(), "graph: gather_whole: ", mine.size(),
              " pieces for ", partitions.size(), " partitions");
  if (sharding.replicated()) return mine.front();
  const int64_t local = static_cast<int64_t>(mine.size()), n = mine.front().numel();
  const int p = processes.size();
  TITAN_CHECK(local * p == devices, "graph: gather_whole: ", p, " processes of ", local, " pieces each for ",
              devices, " devices");
  Tensor packed = Tensor::empty({local * n}, mine.front().options());
  for (int64_t l = 0; l < local; ++l) {
    const Tensor& piece = mine[static_cast<size_t>(l)];
    TITAN_CHECK(piece.numel() == n && piece.dtype() == packed.dtype(), "graph: gather_whole: piece ", l, " is ",
                piece.desc(), ", unlike piece 0, ", mine.front().desc());
    packed.narrow(0, l * n, n).copy_(piece.contiguous().reshape({n}));
  }
  Tensor all = Tensor::empty({p * local * n}, packed.options());
  Tensor owners = Tensor::empty({p * local}, {.dtype = kI64});
  processes.all_gather(all, packed).wait();
  processes.all_gather(owners, Tensor::from_vector<int64_t>(partitions, {local})).wait();
  std::vector<Tensor> pieces(static_cast<size_t>(devices));
  for (int64_t k = 0; k < p * local; ++k) {
    const int64_t partition = owners.data<int64_t>()[k];
    TITAN_CHECK(partition >= 0 && partition < devices && !pieces[static_cast<size_t>(partition)].defined(),
                "graph: gather_whole: partition ", partition, " is held twice, or is not one of the ", devices);
    pieces[static_cast<size_t>(partition)] = all.narrow(0, k * n, n).reshape(mine.front().sizes());
  }
  return graph::unshard(pieces, sharding);
}

}  // namespace titan::train
