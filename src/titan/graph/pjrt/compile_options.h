#pragma once
// The compile options PJRT_Client_Compile takes: a serialized xla.CompileOptionsProto. titan sets
// only the replica and partition counts and a few of XLA's boolean flags, so it writes those
// fields itself rather than link XLA's protobuf schema.
#include <string>
#include <utility>
#include <vector>

namespace titan::graph::pjrt {

struct CompileSpec {
  int num_replicas = 1;
  int num_partitions = 1;
  // XLA's SPMD partitioner splits one program over the partitions by its mhlo.sharding
  // annotations, inserting the collectives (ExecutableBuildOptions.use_spmd_partitioning).
  bool spmd_partitioning = false;
  // XLA's DebugOptions flags by name (e.g. {"xla_allow_excess_precision", false}), as JAX's
  // compiler_options passes them: the plugin applies them to this compilation only.
  std::vector<std::pair<std::string, bool>> flags = {};
  // The same for string-valued flags (e.g. {"xla_dump_to", "/tmp/dir"}).
  std::vector<std::pair<std::string, std::string>> string_flags = {};
};

// CompileOptionsProto { executable_build_options (3) { num_replicas (4), num_partitions (5) },
// env_option_overrides (7): map<name, OptionOverrideProto { string_field (1), bool_field (2) }> };
// 1 and 1 with no
// flags give the bytes 1a 04 20 01 28 01.
std::string compile_options_proto(const CompileSpec& spec);

}  // namespace titan::graph::pjrt
