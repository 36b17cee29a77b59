#include "titan/parallel/parameter_slices.h"

#include "titan/core/in_place.h"

namespace titan::parallel {

void narrow_in_place(const Tensor& p, const std::string& name, int64_t dim, int64_t part, int64_t parts,
                     const std::string& what_to_change) {
  TITAN_CHECK(p.size(dim) % parts == 0, "parameter ", name, " ", p.desc(), " has ", p.size(dim),
              " along dim ", dim, ", which does not split into ", parts, " equal parts; choose a ",
              what_to_change, " that divides it");
  const int64_t size = p.size(dim) / parts;
  titan::narrow_in_place(p, dim, part * size, size);
}

int64_t sliced_dim(const Tensor& local, const Shape& global_shape) {
  for (int64_t d = 0; d < local.dim(); ++d)
    if (local.size(d) != global_shape[static_cast<size_t>(d)]) return d;
  return -1;
}

}  // namespace titan::parallel
