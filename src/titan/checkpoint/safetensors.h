#pragma once
// The safetensors file format: 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets}, an optional "__metadata__" string map, then the
// raw little-endian bytes.
#include <map>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::checkpoint {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads and validates a whole file; errors name the file and the tensor at fault.
SafetensorsFile read_safetensors(const std::string& path);
// Writes `tensors` (any strides; written contiguous) with `metadata`.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace titan::checkpoint
