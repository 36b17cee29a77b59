#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace titan {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
Shape contiguous_strides(const Shape& s);
// Wraps a possibly negative dim into [0, ndim); names `op` in the error when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; names `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
std::string shape_str(const Shape& s);

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

}  // namespace titan
