// The mesh's groups hold the ranks they should, and impossible layouts fail before any
// communication.
#include <gtest/gtest.h>

#include "titan/dist/device_mesh.h"
#include "trainer_fixture.h"

namespace titan::dist {
namespace {

using train::testing::error_of;

TEST(DeviceMesh, ReplicateTimesShardGroups) {
  const int n = world().size();
  const int r = world().rank();
  const int64_t rep = n % 2 == 0 ? 2 : 1;
  DeviceMesh mesh(world(), {.dp_replicate = rep});
  const int64_t shard = n / rep;
  EXPECT_EQ(mesh.degree(MeshAxis::dp_shard), shard);
  EXPECT_EQ(mesh.degree(MeshAxis::dp), n);
  // Row-major: rank r sits at (r / shard, r % shard).
  std::vector<int> shard_ranks, rep_ranks;
  for (int64_t k = 0; k < shard; ++k) shard_ranks.push_back(static_cast<int>(r / shard * shard + k));
  for (int64_t k = 0; k < rep; ++k) rep_ranks.push_back(static_cast<int>(k * shard + r % shard));
  EXPECT_EQ(mesh[MeshAxis::dp_shard].world_ranks(), shard_ranks);
  EXPECT_EQ(mesh[MeshAxis::dp_replicate].world_ranks(), rep_ranks);
  EXPECT_EQ(mesh.coordinate(MeshAxis::dp_shard), r % shard);
  EXPECT_EQ(mesh[MeshAxis::tp].size(), 1);
  // A collective over a sub-group reaches exactly its members.
  double sum = 0;
  for (int k : shard_ranks) sum += k;
  EXPECT_DOUBLE_EQ(mesh[MeshAxis::dp_shard].all_reduce(static_cast<double>(r), ReduceOp::sum), sum);
  EXPECT_DOUBLE_EQ(mesh[MeshAxis::dp].all_reduce(1.0, ReduceOp::sum), n);
}

// ep is dp_shard's inner part and efsdp its outer (TorchTitan's layout): on n ranks, dp_shard n
// holds ep pairs of neighbours, efsdp the ranks with the same parity; dp is every rank.
TEST(DeviceMesh, ExpertParallelBorrowsDpShardsRanks) {
  const int n = world().size();
  const int r = world().rank();
  if (n % 2 != 0) GTEST_SKIP() << "ep 2 needs an even world";
  DeviceMesh mesh(world(), {.dp_shard = -1, .ep = 2});
  EXPECT_EQ(mesh.degree(MeshAxis::dp_shard), n);
  EXPECT_EQ(mesh.degree(MeshAxis::dp), n);
  EXPECT_EQ(mesh.degree(MeshAxis::efsdp), n / 2);
  EXPECT_EQ(mesh[MeshAxis::ep].world_ranks(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(mesh.coordinate(MeshAxis::ep), r % 2);
  std::vector<int> efsdp_ranks, every;
  for (int k = 0; k < n / 2; ++k) efsdp_ranks.push_back(2 * k + r % 2);
  for (int k = 0; k < n; ++k) every.push_back(k);
  EXPECT_EQ(mesh[MeshAxis::efsdp].world_ranks(), efsdp_ranks);
  EXPECT_EQ(mesh.coordinate(MeshAxis::efsdp), r / 2);
  EXPECT_EQ(mesh[MeshAxis::dp].world_ranks(), every);
  EXPECT_EQ(mesh[MeshAxis::dp_shard].world_ranks(), every);
  EXPECT_DOUBLE_EQ(mesh[MeshAxis::efsdp].all_reduce(1.0, ReduceOp::sum), n / 2);
}

TEST(DeviceMesh, ImpossibleLayoutsAreClearErrors) {
  const int n = world().size();
  EXPECT_NE(error_of([&] { DeviceMesh(world(), {.dp_replicate = n + 1}); }).find("does not divide the world"),
            std::string::npos);
  EXPECT_NE(error_of([&] { DeviceMesh(world(), {.dp_replicate = 1, .dp_shard = n + 1}); })
                .find("needs " + std::to_string(n + 1) + " ranks, but " + std::to_string(n) + " were launched"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ParallelDims({.tp = 0}, n); }).find("degree of tp is 0"), std::string::npos);
}

// The pipeline's own keys mean nothing without pipeline stages: set with pipeline_parallel_degree
// = 1, each is refused by name rather than accepted and ignored.
TEST(DeviceMesh, PipelineKeysWithoutAPipelineAreRefused) {
  auto refusal = [](ParallelismConfig p) {
    return error_of([&] { MeshDegrees::from_config(p); });
  };
  ParallelismConfig schedule, split, micro;
  schedule.pipeline_parallel_schedule = "GPipe";
  split.pipeline_parallel_split_points = "layers.2";
  micro.pipeline_parallel_microbatch_size = 2;
  EXPECT_NE(refusal(schedule).find("parallelism.pipeline_parallel_schedule = \"GPipe\""), std::string::npos);
  EXPECT_NE(refusal(split).find("parallelism.pipeline_parallel_split_points = \"layers.2\""), std::string::npos);
  EXPECT_NE(refusal(micro).find("parallelism.pipeline_parallel_microbatch_size = 2"), std::string::npos);
}

}  // namespace
}  // namespace titan::dist
