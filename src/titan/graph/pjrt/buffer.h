#pragma once
// An array on a PJRT device (move-only; owns its PJRT_Buffer). Made by Client::to_device and
// returned by Executable::execute. A buffer donated to an executable is consumed by the run: the
// object stays, empty, and any later use is refused naming the executable it went to.
#include <memory>
#include <string>

#include "titan/core/dtype.h"
#include "titan/core/shape.h"

struct PJRT_Buffer;

namespace titan::graph::pjrt {

namespace detail {
struct ClientState;
}

class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Copies the array into `dst` (dims() row-major, numel * dtype_size bytes) and waits for it.
  void to_host(void* dst) const;
  DType dtype() const { return dtype_; }
  const Shape& dims() const { return dims_; }
  size_t size_bytes() const;
  // False for a default-constructed, moved-from or donated buffer.
  bool valid() const { return buffer_ != nullptr; }

  // What consumed this buffer (the executable's name); empty unless donated.
  const std::string& donated_to() const { return donated_to_; }

 private:
  friend class Client;
  friend class Executable;
  Buffer(std::shared_ptr<const detail::ClientState> client, PJRT_Buffer* buffer, DType dtype, Shape dims);
  // The PJRT buffer; throws when there is none (donated: naming the executable).
  PJRT_Buffer* handle() const;
  // The run consumed the PJRT buffer: frees the handle and remembers where it went.
  void mark_donated(const std::string& executable);
  void release();

  std::shared_ptr<const detail::ClientState> client_ = {};
  PJRT_Buffer* buffer_ = nullptr;
  DType dtype_ = kF32;
  Shape dims_ = {};
  std::string donated_to_ = {};
};

}  // namespace titan::graph::pjrt
