#pragma once
#include <cstddef>
#include <memory>

#include "titan/core/device.h"

namespace titan {

// One allocation shared by a tensor and all its views; returned to its allocator when the last
// of them goes.
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // A storage of `nbytes` with no memory yet (core/meta.h): data() is null until materialize().
  static std::shared_ptr<Storage> meta(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_meta() const { return meta_; }
  // Gives a meta storage zeroed memory, in place: every tensor viewing it becomes real.
  void materialize();

 private:
  Storage(void* data, size_t nbytes, Device device, bool meta)
      : data_(data), nbytes_(nbytes), device_(device), meta_(meta) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  bool meta_;
};

}  // namespace titan
