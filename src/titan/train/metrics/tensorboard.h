#pragma once
// TensorBoard event files: a TFRecord stream of serialised Event protos (proto/tensorboard_event.proto).
// Each record is framed as
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// (little-endian), and the first record of a file carries file_version "brain.Event:2".
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/core/crc32c.h"

namespace titan::train {

// TFRecord stores CRCs rotated and offset, so a CRC over bytes that themselves hold CRCs does
// not degenerate.
uint32_t masked_crc32c(std::string_view data);

// Frames `data` as one TFRecord.
std::string tfrecord(std::string_view data);

// Seconds since the Unix epoch: the wall_time of events and metrics lines.
double unix_seconds();

using Scalars = std::vector<std::pair<std::string, double>>;

// Appends scalar summaries to <folder>/events.out.tfevents.<unix seconds>.<host>; the folder is
// created if missing. Each add_scalars is one Event, flushed so a live TensorBoard (or a crash)
// sees every step written so far.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::filesystem::path& folder);

  // Scalars are stored as float32 (simple_value), as TensorBoard's scalar summaries are.
  void add_scalars(int64_t step, const Scalars& scalars);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace titan::train
