#include "titan/graph/pjrt/buffer.h"

#include <utility>

#include "titan/core/error.h"
#include "titan/graph/pjrt/client_state.h"

namespace titan::graph::pjrt {

Buffer::Buffer(std::shared_ptr<const detail::ClientState> client, PJRT_Buffer* buffer, DType dtype,
               Shape dims)
    : client_(std::move(client)), buffer_(buffer), dtype_(dtype), dims_(std::move(dims)) {}

Buffer::~Buffer() {
  release();
}

Buffer::Buffer(Buffer&& other) noexcept
    : client_(std::move(other.client_)),
      buffer_(std::exchange(other.buffer_, nullptr)),
      dtype_(other.dtype_),
      dims_(std::move(other.dims_)),
      donated_to_(std::move(other.donated_to_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    client_ = std::move(other.client_);
    buffer_ = std::exchange(other.buffer_, nullptr);
    dtype_ = other.dtype_;
    dims_ = std::move(other.dims_);
    donated_to_ = std::move(other.donated_to_);
  }
  return *this;
}

void Buffer::release() {
  if (!buffer_) return;
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = std::exchange(buffer_, nullptr);
  // Called from the destructor: a failure to free leaves nothing for the caller to do.
  if (PJRT_Error* error = client_->api()->PJRT_Buffer_Destroy(&args)) {
    PJRT_Error_Destroy_Args destroy{};
    destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
    destroy.error = error;
    client_->api()->PJRT_Error_Destroy(&destroy);
  }
}

void Buffer::mark_donated(const std::string& executable) {
  release();
  donated_to_ = executable;
}

PJRT_Buffer* Buffer::handle() const {
  TITAN_CHECK(donated_to_.empty(), "buffer was donated to ", donated_to_, " (its parameter carries ",
              "tf.aliasing_output): use that run's output in its place");
  TITAN_CHECK(buffer_,
              "empty PJRT buffer (default-constructed or moved from): make one with "
              "Client::to_device or take an output of Executable::execute");
  return buffer_;
}

size_t Buffer::size_bytes() const {
  return static_cast<size_t>(numel_of(dims_)) * dtype_size(dtype_);
}

void Buffer::to_host(void* dst) const {
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = handle();
  args.dst = dst;
  args.dst_size = size_bytes();
  client_->check(client_->api()->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  client_->await(args.event, "PJRT_Buffer_ToHostBuffer (awaiting the copy)");
}

}  // namespace titan::graph::pjrt
