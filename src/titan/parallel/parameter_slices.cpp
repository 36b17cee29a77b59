#include "titan/parallel/parameter_slices.h"

#include "titan/autograd/grad_mode.h"

namespace titan::parallel {

void narrow_in_place(const Tensor& p, const std::string& name, int64_t dim, int64_t part, int64_t parts,
                     const std::string& what_to_change) {
  TITAN_CHECK(p.size(dim) % parts == 0, "parameter ", name, " ", p.desc(), " has ", p.size(dim),
              " along dim ", dim, ", which does not split into ", parts, " equal parts; choose a ",
              what_to_change, " that divides it");
  const int64_t size = p.size(dim) / parts;
  TensorImpl& impl = *p.impl();
  if (p.is_meta()) {
    // Not allocated yet (deferred initialisation): a meta tensor of the local shape, which
    // parallel::deferred_init fills with this rank's slice of the values.
    impl.sizes[dim] = size;
    impl.strides = contiguous_strides(impl.sizes);
    impl.offset = 0;
    impl.storage = Storage::meta(static_cast<size_t>(numel_of(impl.sizes)) * p.element_size(), p.device());
    return;
  }
  Tensor slice;
  {
    autograd::NoGradGuard no_grad;
    slice = p.detach().narrow(dim, part * size, size).contiguous().clone();
  }
  impl.storage = slice.storage();
  impl.sizes = slice.sizes();
  impl.strides = slice.strides();
  impl.offset = slice.storage_offset();
}

int64_t sliced_dim(const Tensor& local, const Shape& global_shape) {
  for (int64_t d = 0; d < local.dim(); ++d)
    if (local.size(d) != global_shape[static_cast<size_t>(d)]) return d;
  return -1;
}

}  // namespace titan::parallel
