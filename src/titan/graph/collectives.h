#pragma once
// The collectives a compiled program runs per execution, read from the HLO text XLA ran
// (Runner::Compiled::optimized_text): what the SPMD partitioner inserted for a sharded step, so
// that a wrong sharding shows up as traffic nobody planned for. A collective inside a loop counts
// once per trip (the loop's known trip count).
#include <cstdint>
#include <string>
#include <vector>

namespace titan::graph {

struct CollectiveTally {
  std::string kind;        // "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"
  int64_t count = 0;       // per execution, loop trips included
  double result_bytes = 0; // of their results, per device
  // What each device sends over a ring for them: all-reduce 2 (n-1)/n of its result, all-gather
  // and all-to-all (n-1)/n, reduce-scatter (n-1) times its result (n in the group), a permute its result.
  double traffic_bytes = 0;
};

struct CollectiveCount {
  std::vector<CollectiveTally> kinds;  // in the order above, only those present
  bool unknown_trips = false;  // a loop without a known trip count was counted once
  double traffic_bytes() const;
};

// `devices`: the group size where a collective's replica groups cannot be read.
CollectiveCount count_collectives(const std::string& hlo_text, int64_t devices);

}  // namespace titan::graph
