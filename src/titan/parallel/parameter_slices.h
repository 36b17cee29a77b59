#pragma once
// What the plans that split parameters across a group of ranks (tensor parallelism, expert
// parallelism) share: narrowing a parameter's handle in place to this rank's slice, and telling
// deferred initialisation and checkpoints which box of the whole tensor that slice is. One
// interface, so that checkpoints compose any plan's slice with FSDP's rows in one place.
#include <cstdint>
#include <optional>
#include <string>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"

namespace titan::parallel {

// A parameter whose handle is the box [offsets, offsets + handle.sizes()) of a logical tensor of
// `global_shape` (what the model's init fills on one rank).
struct GlobalSlice {
  Shape global_shape = {};
  Shape offsets = {};
};

class ParameterSlices {
 public:
  virtual ~ParameterSlices() = default;
  // The box of the whole tensor that this rank's slice of the parameter named `name` (as in
  // Module::named_parameters) is; nullopt for a parameter the plan leaves whole.
  virtual std::optional<GlobalSlice> slice_of(const std::string& name) const = 0;
  // The ranks the slices are spread over.
  virtual const dist::ProcessGroup& slice_group() const = 0;
  // Whether a parameter the plan leaves whole is the same on every rank of slice_group, so that
  // their rank 0 alone saves it (tensor parallelism); not so where FSDP shards it over them.
  virtual bool replicates_the_rest() const { return true; }
};

// Narrows the handle `p` (of the parameter `name`, for errors) in place to its `part`-th of
// `parts` equal parts along `dim`: the handle keeps its TensorImpl (module.h asks for that), now
// of the local shape. A meta handle (deferred initialisation) only changes shape; a real one
// keeps a copy of its slice. Throws, naming `what_to_change`, when the size does not divide.
void narrow_in_place(const Tensor& p, const std::string& name, int64_t dim, int64_t part, int64_t parts,
                     const std::string& what_to_change);

// The dim along which `local` is a slice of a tensor of `global_shape` (the first that
// differs), -1 when it is the whole tensor.
int64_t sliced_dim(const Tensor& local, const Shape& global_shape);

}  // namespace titan::parallel
