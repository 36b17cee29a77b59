#pragma once
// The compile options PJRT_Client_Compile takes: a serialized xla.CompileOptionsProto. titan sets
// only the replica and partition counts and XLA's options by name, so it writes those fields itself
// rather than link XLA's protobuf schema.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace titan::graph::pjrt {

// One of XLA's DebugOptions fields by name (e.g. {"xla_allow_excess_precision", false}), as JAX's
// compiler_options passes them: the plugin applies it to this compilation only, over its defaults.
// A whole DebugOptions message is never sent: its zero values would switch optimisations off.
struct XlaOption {
  std::string name;
  std::variant<bool, int64_t, double, std::string> value;
};

struct CompileSpec {
  int num_replicas = 1;
  int num_partitions = 1;
  // XLA's SPMD partitioner splits one program over the partitions by its mhlo.sharding
  // annotations, inserting the collectives (ExecutableBuildOptions.use_spmd_partitioning).
  bool spmd_partitioning = false;
  // In order; a later option of the same name wins (a map entry read later replaces the earlier).
  std::vector<XlaOption> options = {};
};

// CompileOptionsProto { executable_build_options (3) { num_replicas (4), num_partitions (5) },
// env_option_overrides (7): map<name, OptionOverrideProto { string_field (1), bool_field (2),
// int_field (3), double_field (4) }> }; 1 and 1 with no options give the bytes 1a 04 20 01 28 01.
std::string compile_options_proto(const CompileSpec& spec);

}  // namespace titan::graph::pjrt
