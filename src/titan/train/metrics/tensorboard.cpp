#include "titan/train/metrics/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <system_error>

#include "titan/core/error.h"
#include "titan/train/proto/tensorboard_event.pb.h"

namespace titan::train {
namespace {

// TFRecord's integers are little-endian whatever the host; spelling the bytes out says so.
template <typename T>
void append_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint32_t masked_crc32c(std::string_view data) {
  uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tfrecord(std::string_view data) {
  std::string header;
  append_le<uint64_t>(header, data.size());
  std::string record = header;
  append_le<uint32_t>(record, masked_crc32c(header));
  record.append(data);
  append_le<uint32_t>(record, masked_crc32c(data));
  return record;
}

EventFileWriter::EventFileWriter(const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  TITAN_CHECK(!ec, "TensorBoard: cannot create the event folder '", folder.string(), "': ", ec.message(),
              "; set metrics.save_tb_folder (under job.dump_folder) to a writable place");
  double now = unix_seconds();
  path_ = folder / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host_name());
  // Append: a run restarted within the same second on this host keeps what the last one wrote.
  out_.open(path_, std::ios::binary | std::ios::app);
  TITAN_CHECK(out_.is_open(), "TensorBoard: cannot open '", path_.string(),
              "' for writing; check the permissions of metrics.save_tb_folder");
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
}

void EventFileWriter::add_scalars(int64_t step, const Scalars& scalars) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void EventFileWriter::write_record(const std::string& data) {
  out_ << tfrecord(data);
  out_.flush();
  TITAN_CHECK(out_.good(), "TensorBoard: writing '", path_.string(), "' failed (disk full or removed?)");
}

}  // namespace titan::train
