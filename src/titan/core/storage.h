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
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device) {}
  void* data_;
  size_t nbytes_;
  Device device_;
};

}  // namespace titan
