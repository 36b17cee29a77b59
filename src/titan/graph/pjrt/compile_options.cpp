#include "titan/graph/pjrt/compile_options.h"

#include <bit>
#include <cstdint>

#include "titan/core/error.h"

namespace titan::graph::pjrt {
namespace {

// Protocol buffers' wire format: a field is a varint key (number << 3 | wire type) and its value.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2;

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
  for (const XlaOption& option : spec.options) {
    TITAN_CHECK(!option.name.empty(), "CompileSpec: an XLA option without a name");
    std::string value;  // its OptionOverrideProto
    if (const auto* b = std::get_if<bool>(&option.value)) {
      put_key(value, 2, kVarint);
      put_varint(value, *b ? 1 : 0);
    } else if (const auto* i = std::get_if<int64_t>(&option.value)) {
      put_key(value, 3, kVarint);
      put_varint(value, static_cast<uint64_t>(*i));  // an int64 varint: negatives in two's complement
    } else if (const auto* d = std::get_if<double>(&option.value)) {
      put_key(value, 4, kFixed64);
      for (uint64_t bits = std::bit_cast<uint64_t>(*d), k = 0; k < 8; ++k, bits >>= 8)
        value.push_back(static_cast<char>(bits & 0xff));
    } else {
      const std::string& text = std::get<std::string>(option.value);
      put_key(value, 1, kLengthDelimited);
      put_varint(value, text.size());
      value += text;
    }
    // One map entry: {key (1): the name, value (2): the OptionOverrideProto}.
    std::string entry;
    put_key(entry, 1, kLengthDelimited);
    put_varint(entry, option.name.size());
    entry += option.name;
    put_key(entry, 2, kLengthDelimited);
    put_varint(entry, value.size());
    entry += value;
    put_key(proto, 7, kLengthDelimited);
    put_varint(proto, entry.size());
    proto += entry;
  }
  return proto;
}

}  // namespace titan::graph::pjrt
