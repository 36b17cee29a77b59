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
  // `nbytes` at `data`, owned by someone else (a custom call's buffer, graph/pjrt/ffi.h): never
  // freed here, and valid only while the owner keeps it.
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes, Device device);
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
  Storage(void* data, size_t nbytes, Device device, bool meta, bool owned = true)
      : data_(data), nbytes_(nbytes), device_(device), meta_(meta), owned_(owned) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  bool meta_;
  bool owned_;
};

}  // namespace titan
