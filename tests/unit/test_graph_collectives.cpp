// count_collectives reads the collectives of an optimized HLO module: kinds, counts (a loop's
// body once per trip), result bytes and ring traffic by the size of each op's groups.
#include <gtest/gtest.h>

#include "support/test_util.h"
#include "titan/graph/collectives.h"

namespace titan::graph {
namespace {

// Modelled on what the CPU plugin writes: a loop of 6 trips whose body gathers a weight, and a
// tuple all-reduce at the top in the iota form of replica groups.
const char* const kModule = R"(HloModule titan_step, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.1 = f32[] add(%x, %y)
}

%body (p: (s64[], f32[8,16])) -> (s64[], f32[8,16]) {
  %p = (s64[], f32[8,16]{1,0}) parameter(0)
  %w = f32[4,16]{1,0} get-tuple-element(%p), index=1
  %all-gather.3 = f32[16,16]{1,0} all-gather(%w), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_1'}, dimensions={0}, use_global_device_ids=true
  %cp = f32[16,16]{1,0} collective-permute(%all-gather.3), channel_id=4, source_target_pairs={{0,1},{1,0}}
  ROOT %t = (s64[], f32[8,16]{1,0}) tuple(%p)
}

%cond (p.1: (s64[], f32[8,16])) -> pred[] {
  %p.1 = (s64[], f32[8,16]{1,0}) parameter(0)
  %all-reduce.9 = f32[1024]{0} all-reduce(%p.1), replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %c = pred[] constant(true)
}

ENTRY %main.2_spmd (param: f32[8,16]) -> f32[8,16] {
  %param = f32[8,16]{1,0} parameter(0), sharding={devices=[4,1]0,1,2,3}
  %while.1 = (s64[], f32[8,16]{1,0}) while(%param), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"6"}}
  %all-reduce = (f32[8,16]{1,0}, f32[2]{0}) all-reduce(%param, %param), channel_id=2, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=%add
  %reduce-scatter = bf16[2,16]{1,0} reduce-scatter(%param), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
  ROOT %r = f32[8,16]{1,0} copy(%param)
}
)";

TEST(GraphCollectives, CountsKindsTripsBytesAndRingTraffic) {
  const CollectiveCount c = count_collectives(kModule, 4);
  EXPECT_FALSE(c.unknown_trips);
  ASSERT_EQ(c.kinds.size(), 4u);
  // The loop's condition holds no traffic that the count takes: only its body is walked.
  EXPECT_EQ(c.kinds[0].kind, "all-gather");
  EXPECT_EQ(c.kinds[0].count, 6);
  EXPECT_DOUBLE_EQ(c.kinds[0].result_bytes, 6 * 16 * 16 * 4);
  EXPECT_DOUBLE_EQ(c.kinds[0].traffic_bytes, 6 * 16 * 16 * 4 * 0.5) << "groups of 2: half of the result arrives";
  EXPECT_EQ(c.kinds[1].kind, "all-reduce");
  EXPECT_EQ(c.kinds[1].count, 1);
  EXPECT_DOUBLE_EQ(c.kinds[1].result_bytes, (8 * 16 + 2) * 4);
  EXPECT_DOUBLE_EQ(c.kinds[1].traffic_bytes, (8 * 16 + 2) * 4 * 2 * 3.0 / 4) << "groups of 4";
  EXPECT_EQ(c.kinds[2].kind, "reduce-scatter");
  EXPECT_DOUBLE_EQ(c.kinds[2].traffic_bytes, 2 * 16 * 2 * 3.0) << "bf16; each device sends n - 1 of its pieces";
  EXPECT_EQ(c.kinds[3].kind, "collective-permute");
  EXPECT_EQ(c.kinds[3].count, 6);
  EXPECT_DOUBLE_EQ(c.traffic_bytes(), c.kinds[0].traffic_bytes + c.kinds[1].traffic_bytes +
                                          c.kinds[2].traffic_bytes + c.kinds[3].traffic_bytes);
}

TEST(GraphCollectives, ALoopWithoutATripCountIsFlaggedAndAModuleWithoutEntryRefused) {
  std::string module = kModule;
  module.replace(module.find(", backend_config={\"known_trip_count\":{\"n\":\"6\"}}"),
                 std::string(", backend_config={\"known_trip_count\":{\"n\":\"6\"}}").size(), "");
  const CollectiveCount c = count_collectives(module, 4);
  EXPECT_TRUE(c.unknown_trips);
  EXPECT_EQ(c.kinds[0].count, 1);
  EXPECT_TRUE(count_collectives("HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\n", 4)
                  .kinds.empty());
  EXPECT_TITAN_ERROR(count_collectives("HloModule m\n", 4), "no ENTRY computation");
}

}  // namespace
}  // namespace titan::graph
