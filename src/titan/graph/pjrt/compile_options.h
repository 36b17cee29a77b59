#pragma once
// The compile options PJRT_Client_Compile takes: a serialized xla.CompileOptionsProto. titan sets
// only the replica and partition counts, so it writes those few fields itself rather than link
// XLA's protobuf schema.
#include <string>

namespace titan::graph::pjrt {

struct CompileSpec {
  int num_replicas = 1;
  int num_partitions = 1;
};

// CompileOptionsProto { executable_build_options (3) { num_replicas (4), num_partitions (5) } };
// 1 and 1 give the bytes 1a 04 20 01 28 01.
std::string compile_options_proto(const CompileSpec& spec);

}  // namespace titan::graph::pjrt
