#include "titan/core/in_place.h"

namespace titan {

void rebind_in_place(const Tensor& handle, const Tensor& values) {
  TensorImpl& impl = *handle.impl();
  impl.storage = values.storage();
  impl.sizes = values.sizes();
  impl.strides = values.strides();
  impl.offset = values.storage_offset();
}

void narrow_in_place(const Tensor& handle, int64_t dim, int64_t start, int64_t length) {
  TITAN_CHECK(dim >= 0 && dim < handle.dim() && start >= 0 && length >= 0 && start + length <= handle.size(dim),
              "narrow_in_place: [", start, ", ", start + length, ") along dim ", dim, " is not within ",
              handle.desc());
  if (handle.is_meta()) {
    TensorImpl& impl = *handle.impl();
    impl.sizes[static_cast<size_t>(dim)] = length;
    impl.strides = contiguous_strides(impl.sizes);
    impl.offset = 0;
    impl.storage = Storage::meta(static_cast<size_t>(numel_of(impl.sizes)) * handle.element_size(), handle.device());
    return;
  }
  // Detached first, so that nothing is recorded for autograd.
  rebind_in_place(handle, handle.detach().narrow(dim, start, length).contiguous().clone());
}

}  // namespace titan
