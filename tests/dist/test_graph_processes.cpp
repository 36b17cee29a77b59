// Graph mode over several processes (train/graph_mode/graph_processes.h), as far as this machine's plugins
// allow. What the CPU plugin does across processes, the fact graph mode's refusal of several
// processes on it rests on: each MPI rank creates a client with the plugin's `process_id` option,
// which numbers its devices apart, but the client knows only its own process's devices
// (PJRT_Client_Devices equals the addressable ones): the plugin joins no processes, and its
// collectives (InProcessCollectives) stay within one. Should a plugin version join them, the first
// test fails. What titan brings to a plugin that can (CUDA's): the key-value store over MPI, which
// a stand-in plugin (support/joining_pjrt_plugin.cpp) exchanges through as the CUDA plugin does,
// and the whole tensors put back from every process's pieces.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/paths.h"
#include "titan/dist/process_group.h"
#include "titan/dist/tcp_store.h"
#include "titan/graph/runner.h"
#include "titan/train/graph_mode/graph_processes.h"
#include "trainer_fixture.h"

namespace titan::train::testing {
namespace {

TEST(GraphProcesses, TheCpuPluginNumbersEachProcessButJoinsNone) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "one process has nothing to join";
  const graph::Runner runner({.plugin = "cpu",
                              .client_options = {{"cpu_device_count", int64_t{2}},
                                                 {"process_id", static_cast<int64_t>(world.rank())}}});
  const graph::pjrt::Client& client = runner.client();
  EXPECT_EQ(client.device_count(), 2);
  EXPECT_EQ(client.global_device_count(), 2) << "the plugin joined processes: graph mode could run across them";
  EXPECT_EQ(client.process_index(), world.rank());
  world.barrier().wait();
}

// On the CPU plugin graph mode over several processes is refused before anything is built, saying
// why.
TEST(GraphProcesses, GraphModeOverSeveralProcessesOnTheCpuPluginIsRefused) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "one process";
  const std::string message = error_of([&] {
    std::ostringstream log;
    Trainer(small_config({"--compile.enable=true"}), log, world);
  });
  EXPECT_NE(message.find("compile.plugin = \"cpu\" runs its collectives within one process only"), std::string::npos)
      << message;
  EXPECT_NE(message.find("launch one process"), std::string::npos) << message;
  world.barrier().wait();
}

// The store every rank reaches: each puts its key and reads every other's, from two threads at
// once (a plugin calls from its own), some of them before the key is there.
TEST(GraphProcesses, TheKeyValueStoreOverMpiServesEveryRank) {
  dist::ProcessGroup& world = dist::world();
  std::shared_ptr<dist::TcpStore> store = dist::start_kv_store(world);
  const int r = world.rank(), n = world.size();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * r));
    store->put("rank/" + std::to_string(r), std::to_string(r * 7));
  });
  std::vector<std::string> seen(static_cast<size_t>(n)), seen_again(static_cast<size_t>(n));
  std::thread reader([&] {
    for (int k = 0; k < n; ++k) seen_again[static_cast<size_t>(k)] = store->get("rank/" + std::to_string(k), std::chrono::seconds(30));
  });
  for (int k = n - 1; k >= 0; --k) seen[static_cast<size_t>(k)] = store->get("rank/" + std::to_string(k), std::chrono::seconds(30));
  late.join();
  reader.join();
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(seen[static_cast<size_t>(k)], std::to_string(k * 7)) << "rank " << r << " reading rank " << k;
    EXPECT_EQ(seen_again[static_cast<size_t>(k)], std::to_string(k * 7)) << "rank " << r << " reading rank " << k;
  }
  // The server (rank 0's) stays until every rank is done with it.
  world.barrier().wait();
}

// A plugin that joins processes as XLA's CUDA plugin does: node r of n puts its device count (r + 1
// here) and reads every node's through titan's callbacks over the store, so each client counts all.
TEST(GraphProcesses, APluginJoiningTheRanksExchangesThroughTheStore) {
  dist::ProcessGroup& world = dist::world();
  const int r = world.rank(), n = world.size();
  graph::RuntimeOptions options{.plugin = test::paths::joining_pjrt_plugin(),
                                .client_options = {{"cpu_device_count", int64_t{r + 1}}}};
  train::add_process_options(options, r, n);
  options.store = dist::start_kv_store(world);
  {
    const graph::Runner runner(options);
    EXPECT_EQ(runner.client().device_count(), n * (n + 1) / 2) << "some rank's devices did not arrive";
  }
  world.barrier().wait();
}

// The trainer brings the store up and hands it to the plugin; this stand-in joins nothing (each
// process's client holds every device itself), which the trainer names before building anything.
// Rank 0 reads its peers' entries first and raises the error first: its store's server must last
// until the later readers are done, or they would fail to reach it instead.
TEST(GraphProcesses, TheTrainerNamesAPluginThatDidNotJoinTheRanks) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "one process";
  const std::string message = error_of([&] {
    std::ostringstream log;
    Trainer(small_config({"--compile.enable=true",
                          std::string("--compile.plugin=") + test::paths::joining_pjrt_plugin(),
                          "--compile.plugin_options=late_reader_ms=500"}),
            log, world);
  });
  EXPECT_NE(message.find("did not join them (its client knows only this process's " + std::to_string(world.size()) +
                         " devices)"),
            std::string::npos)
      << message;
  world.barrier().wait();
}

// Graph mode over 2 ranks with a plugin that joins them (the stand-in in its joined mode; 2
// devices to each process): titan's multi-process path end to end. Each process uploads its
// devices' pieces, runs the program on them, gathers whole tensors over MPI for a checkpoint,
// which rank 0 writes. The losses are one eager rank's, and a checkpoint saved over the processes
// resumes in one process over 4 devices, and back. Not at 4 ranks: the stand-in runs the whole
// program in every process, 55 s of CI's 2 cores for the same path (4 ranks' pieces are put back
// together in EveryProcessPutsTheWholeTensorBackFromEveryonesPieces).
TEST(GraphProcesses, ARunOverJoinedProcessesTrainsAsOneProcessAndResumesAcrossThem) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n != 2) GTEST_SKIP() << "2 processes of 2 devices each";
  const std::string config = "configs/llama3/debug.toml";
  const OneRankReference want = one_rank_reference({}, config);
  const std::vector<std::string> fsdp4 = {"--compile.enable=true",
                                          "--parallelism.data_parallel_shard_degree=4", local_batch(4)};
  const std::vector<std::string> tp2_fsdp2 = {"--compile.enable=true",
                                              "--parallelism.data_parallel_shard_degree=2",
                                              "--parallelism.tensor_parallel_degree=2", local_batch(2)};
  const auto over_processes = [&](const std::vector<std::string>& o) {
    std::ostringstream log;
    TrainResult r = Trainer(small_config(join(o, {std::string("--compile.plugin=") + test::paths::joining_pjrt_plugin(),
                                                  "--compile.plugin_options=cpu_device_count=" + std::to_string(4 / n) +
                                                      ",joined=true"}),
                                         config),
                            log, world)
                        .train();
    if (world.rank() == 0) {  // the others log nothing
      EXPECT_NE(log.str().find(std::to_string(n) + " processes, this one (0) runs partitions [0"), std::string::npos)
          << log.str();
    }
    return r;
  };
  expect_one_rank_figures(over_processes(fsdp4), want, "graph FSDP 4 over the processes");
  expect_one_rank_figures(over_processes(tp2_fsdp2), want, "graph TP 2 x FSDP 2 over the processes");
  const ResumeAcrossLayouts c("graph_processes");
  c.fresh();
  over_processes(join(fsdp4, c.save));
  const TrainResult one = c.one_rank(join(tp2_fsdp2, c.resume), config);
  if (world.rank() == 0)
    c.expect_second_half(one, want, "saved over the processes, resumed by one process over 4 devices");
  c.fresh();
  c.one_rank(join(fsdp4, c.save), config);
  c.expect_second_half(over_processes(join(tp2_fsdp2, c.resume)), want,
                       "saved by one process over 4 devices, resumed over the processes");
  c.fresh();
}

// The options that name a process to its plugin: the CUDA plugin's node_id and num_nodes, unless
// the user set them; none for TPU; the CPU plugin refused, naming the key.
TEST(GraphProcesses, ProcessOptionsByPlugin) {
  graph::RuntimeOptions cuda{.plugin = "cuda"};
  train::add_process_options(cuda, 1, 4);
  ASSERT_EQ(cuda.client_options.size(), 2u);
  EXPECT_EQ(cuda.client_options[0].name, "node_id");
  EXPECT_EQ(std::get<int64_t>(cuda.client_options[0].value), 1);
  EXPECT_EQ(cuda.client_options[1].name, "num_nodes");
  EXPECT_EQ(std::get<int64_t>(cuda.client_options[1].value), 4);
  graph::RuntimeOptions set{.plugin = "cuda", .client_options = {{"node_id", int64_t{3}}}};
  train::add_process_options(set, 1, 4);
  EXPECT_EQ(set.client_options.size(), 1u);
  graph::RuntimeOptions tpu{.plugin = "tpu"};
  train::add_process_options(tpu, 1, 4);
  EXPECT_TRUE(tpu.client_options.empty());
  graph::RuntimeOptions cpu{.plugin = "cpu"};
  const std::string message = error_of([&] { train::add_process_options(cpu, 1, 4); });
  EXPECT_NE(message.find("compile.plugin = \"cpu\""), std::string::npos) << message;
}

// Every process holds the pieces of its devices' partitions; the whole tensor comes back equal on
// every rank, whatever the layout: FSDP along dim 0, TP x FSDP in a permuted device order, pieces
// replicated over some devices, and a replicated tensor. Rank r owns partitions counted from the
// end, so that ownership does not follow rank order.
TEST(GraphProcesses, EveryProcessPutsTheWholeTensorBackFromEveryonesPieces) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  constexpr int64_t kDevices = 4;
  if (kDevices % n != 0) GTEST_SKIP() << "4 devices do not split over " << n << " ranks";
  const int64_t local = kDevices / n;
  std::vector<int64_t> mine;
  for (int64_t l = 0; l < local; ++l) mine.push_back(kDevices - 1 - (world.rank() * local + l));
  std::vector<float> values(8 * 6);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const Tensor whole = Tensor::from_vector<float>(values, {8, 6});
  const std::vector<graph::Sharding> layouts{
      {.tiles = {4, 1}},
      {.tiles = {2, 2}, .devices = {0, 2, 1, 3}},
      {.tiles = {2, 1}, .replicas = 2, .devices = {3, 1, 2, 0}},
      {},
  };
  for (const graph::Sharding& layout : layouts) {
    std::vector<Tensor> pieces;
    for (int64_t p : mine) pieces.push_back(graph::shard_of(whole, layout, p).contiguous());
    const Tensor back = train::gather_whole(pieces, mine, layout, kDevices, world);
    ASSERT_EQ(back.sizes(), whole.sizes()) << layout.attr();
    EXPECT_TRUE(std::equal(values.begin(), values.end(), back.contiguous().data<float>())) << layout.attr();
  }
  world.barrier().wait();
}

}  // namespace
}  // namespace titan::train::testing
