#include "titan/core/storage.h"

#include <cstring>

#include "titan/core/allocator.h"
#include "titan/core/error.h"

namespace titan {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  TITAN_CHECK(device.is_cpu(), "Storage::allocate: device ", device,
              " has no allocator in this build (CPU only); build with CUDA to use it");
  void* p = CpuAllocator::instance().allocate(nbytes);
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device, false));
}

std::shared_ptr<Storage> Storage::meta(size_t nbytes, Device device) {
  return std::shared_ptr<Storage>(new Storage(nullptr, nbytes, device, true));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device device) {
  TITAN_CHECK(data != nullptr || nbytes == 0, "Storage::borrow: ", nbytes,
              " bytes at a null pointer; pass the owner's memory");
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, false, /*owned=*/false));
}

void Storage::materialize() {
  TITAN_CHECK(meta_, "Storage::materialize: the storage of ", nbytes_,
              " bytes already holds memory; only a meta storage (made under MetaScope) is materialised");
  TITAN_CHECK(device_.is_cpu(), "Storage::materialize: device ", device_,
              " has no allocator in this build (CPU only); build with CUDA to use it");
  data_ = CpuAllocator::instance().allocate(nbytes_);
  // The allocator hands back cached blocks as they were left.
  std::memset(data_, 0, nbytes_);
  meta_ = false;
}

Storage::~Storage() {
  if (device_.is_cpu() && !meta_ && owned_) CpuAllocator::instance().deallocate(data_, nbytes_);
}

}  // namespace titan
