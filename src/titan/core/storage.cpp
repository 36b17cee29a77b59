#include "titan/core/storage.h"

#include "titan/core/allocator.h"
#include "titan/core/error.h"

namespace titan {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  TITAN_CHECK(device.is_cpu(), "Storage::allocate: device ", device,
              " has no allocator in this build (CPU only); build with CUDA to use it");
  void* p = CpuAllocator::instance().allocate(nbytes);
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device));
}

Storage::~Storage() {
  if (device_.is_cpu()) CpuAllocator::instance().deallocate(data_, nbytes_);
}

}  // namespace titan
