#include "titan/graph/pjrt/compile_options.h"

#include <cstdint>

#include "titan/core/error.h"

namespace titan::graph::pjrt {
namespace {

// Protocol buffers' wire format: a field is a varint key (number << 3 | wire type) and its value.
constexpr uint32_t kVarint = 0, kLengthDelimited = 2;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, field << 3 | wire_type);
}

}  // namespace

std::string compile_options_proto(const CompileSpec& spec) {
  TITAN_CHECK(spec.num_replicas >= 1 && spec.num_partitions >= 1,
              "CompileSpec wants at least one replica and one partition, got ", spec.num_replicas, " and ",
              spec.num_partitions);
  std::string build_options;
  put_key(build_options, 4, kVarint);
  put_varint(build_options, static_cast<uint64_t>(spec.num_replicas));
  put_key(build_options, 5, kVarint);
  put_varint(build_options, static_cast<uint64_t>(spec.num_partitions));
  if (spec.spmd_partitioning) {
    put_key(build_options, 6, kVarint);
    put_varint(build_options, 1);
  }
  std::string proto;
  put_key(proto, 3, kLengthDelimited);
  put_varint(proto, build_options.size());
  proto += build_options;
  // One map entry: the flag's name and its OptionOverrideProto.
  const auto put_flag = [&](const std::string& name, const std::string& override_proto) {
    TITAN_CHECK(!name.empty(), "CompileSpec: a flag without a name");
    std::string entry;
    put_key(entry, 1, kLengthDelimited);
    put_varint(entry, name.size());
    entry += name;
    put_key(entry, 2, kLengthDelimited);
    put_varint(entry, override_proto.size());
    entry += override_proto;
    put_key(proto, 7, kLengthDelimited);
    put_varint(proto, entry.size());
    proto += entry;
  };
  for (const auto& [name, value] : spec.flags) {
    std::string o;
    put_key(o, 2, kVarint);
    put_varint(o, value ? 1 : 0);
    put_flag(name, o);
  }
  for (const auto& [name, value] : spec.string_flags) {
    std::string o;
    put_key(o, 1, kLengthDelimited);
    put_varint(o, value.size());
    put_flag(name, o + value);
  }
  return proto;
}

}  // namespace titan::graph::pjrt
