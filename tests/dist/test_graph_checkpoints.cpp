// Graph mode's checkpoints across modes and processes: a graph run split over 4 CPU devices of one
// process saves whole tensors, which an eager FSDP run over MPI resumes; an eager FSDP run's
// sharded checkpoint resumes in graph mode over TP 2 x FSDP 2 devices. Both continue as one
// uninterrupted eager rank would (graph and eager differ by float32 rounding, well inside 1e-5).
#include <gtest/gtest.h>

#include "trainer_fixture.h"

namespace titan::train::testing {
namespace {

TEST(GraphCheckpoints, ResumeBetweenGraphOverDevicesAndEagerOverRanks) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "eager's side needs several ranks";
  const ResumeAcrossLayouts c("graph_checkpoints");
  const std::string config = "configs/llama3/debug.toml";
  const OneRankReference want = one_rank_reference({}, config);
  // kGlobalBatch sequences a step in every layout: 4 data-parallel devices take 2 each.
  const std::vector<std::string> graph_fsdp4 = {"--compile.enable=true",
                                                "--parallelism.data_parallel_shard_degree=4", local_batch(4)};
  const std::vector<std::string> graph_tp2_fsdp2 = {"--compile.enable=true",
                                                    "--parallelism.data_parallel_shard_degree=2",
                                                    "--parallelism.tensor_parallel_degree=2", local_batch(2)};
  auto eager_fsdp = [&](const std::vector<std::string>& o) {
    std::ostringstream log;
    return Trainer(small_config(join({local_batch(n)}, o), config), log, world).train();
  };
  c.fresh();
  c.one_rank(join(graph_fsdp4, c.save), config);
  c.expect_second_half(eager_fsdp(c.resume), want, "saved by graph FSDP 4, resumed by eager FSDP over ranks");
  c.fresh();
  eager_fsdp(c.save);
  const TrainResult graph = c.one_rank(join(graph_tp2_fsdp2, c.resume), config);
  if (world.rank() == 0)
    c.expect_second_half(graph, want, "saved by eager FSDP over ranks, resumed by graph TP 2 x FSDP 2");
  c.fresh();
}

}  // namespace
}  // namespace titan::train::testing
