#pragma once
// The safetensors file format: 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets}, an optional "__metadata__" string map, then the
// raw little-endian bytes.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "titan/core/file_io.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

// "F32", "BF16", ...: the dtype tags of safetensors headers, also used by checkpoint metadata.
const char* dtype_tag(DType t);
// The dtype of a tag; throws naming `where` (a file and tensor) when the tag is not one of ours.
DType parse_dtype_tag(const std::string& tag, const std::string& where);

// Where one tensor's bytes lie in a file.
struct SafetensorsEntry {
  DType dtype = kF32;
  Shape shape;
  uint64_t offset = 0;  // from the start of the file
  uint64_t nbytes = 0;
};

// A safetensors file mapped read-only. Opening parses and checks the header: valid JSON of a sane
// length, known dtypes, non-negative shapes, every tensor's bytes inside the file and as many as
// its dtype and shape need, and the tensors covering the data section in order without overlap or
// gaps, as the format requires. Data is
// read from the mapping on demand, so opening a large file costs its header only.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The whole file, for checksums.
  std::string_view bytes() const { return file_.bytes(); }
  const SafetensorsEntry& entry(const std::string& name) const;
  // A copy of tensor `name`.
  Tensor tensor(const std::string& name) const;

 private:
  std::string path_;
  MappedFile file_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads and validates a whole file; errors name the file and the tensor at fault.
SafetensorsFile read_safetensors(const std::string& path);

// What was written: the file's size and CRC-32C, computed on the way out.
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Writes `tensors` (any strides; written contiguous) with `metadata`. With `durable`, the data
// is fsync'ed before this returns, so it survives a crash from then on.
WrittenFile write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}, bool durable = false);

}  // namespace titan::checkpoint
