#include "titan/parallel/shard_grid.h"

#include <algorithm>
#include <vector>

#include "titan/core/error.h"

namespace titan::parallel {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      small.push_back(d);
      if (d != n / d) large.push_back(n / d);
    }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

int64_t padded_numel(const Shape& shape, const Shape& parts) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) n *= ceil_div(shape[d], parts[d]);
  return n;
}

// Every way of putting `left` parts on dims[k..] (the last of them takes what is left, exactly or
// padded), each passed to `visit`.
// `factors`: the divisors of the rank count, of which `left` is one.
template <typename Visit>
void each_grid(const Shape& shape, const std::vector<int64_t>& dims, const std::vector<int64_t>& factors, size_t k,
               int64_t left, bool exact, Shape& parts, const Visit& visit) {
  if (k == dims.size()) {
    if (left == 1) visit(parts);
    return;
  }
  const int64_t d = dims[k];
  for (int64_t f : factors) {
    if (f > left) break;
    if (left % f != 0 || (k + 1 == dims.size() && f != left)) continue;
    if (exact && shape[d] % f != 0) continue;
    parts[d] = f;
    each_grid(shape, dims, factors, k + 1, left / f, exact, parts, visit);
    parts[d] = 1;
  }
}

}  // namespace

bool ShardGrid::rows_only() const {
  for (size_t d = 1; d < parts.size(); ++d)
    if (parts[d] != 1) return false;
  return true;
}

int64_t ShardGrid::shard_numel() const {
  int64_t n = 1;
  for (int64_t c : chunk) n *= c;
  return n;
}

ShardGrid plan_shard_grid(const Shape& shape, int64_t ranks, const GridOptions& options) {
  TITAN_CHECK(ranks >= 1, "plan_shard_grid: expected at least one rank, got ", ranks);
  const int64_t rank = static_cast<int64_t>(shape.size());
  // Three dims are enough to split any parameter evenly (an expert stack's [E, rows, cols], a
  // layer stack's experts after its layer dim), and keep the search small for any rank count.
  std::vector<int64_t> dims;
  for (int64_t d = options.first_dim; d < rank && dims.size() < 3; ++d)
    if (d != options.skip_dim) dims.push_back(d);
  Shape best(shape.size(), 1);
  if (ranks > 1 && !dims.empty()) {
    const std::vector<int64_t> factors = divisors(ranks);
    std::vector<Shape> grids;
    Shape parts(shape.size(), 1);
    int64_t least = -1;
    // With a fixed dim count, the dims after the first split take what they need exactly; so
    // grids are tried with one split dim, then two, then three.
    for (size_t used = 1; used <= dims.size(); ++used) {
      const std::vector<int64_t> some(dims.begin(), dims.begin() + static_cast<int64_t>(used));
      each_grid(shape, some, factors, 0, ranks, options.exact, parts, [&](const Shape& g) {
        const int64_t numel = padded_numel(shape, g);
        if (least < 0 || numel < least) least = numel;
        grids.push_back(g);
      });
    }
    if (!grids.empty()) {
      // Within 1% of the least padding, more parts on earlier dims win: dim 0 alone first (its
      // pieces gather without reordering), then the grids whose pieces are the longest runs.
      const double bound = static_cast<double>(least) * 1.01;
      std::vector<Shape> near;
      for (const Shape& g : grids)
        if (static_cast<double>(padded_numel(shape, g)) <= bound) near.push_back(g);
      best = *std::max_element(near.begin(), near.end());
    }
  }
  ShardGrid g{.parts = best, .chunk = shape};
  for (size_t d = 0; d < shape.size(); ++d) g.chunk[d] = ceil_div(shape[d], best[d]);
  return g;
}

Tensor ShardBox::of(const Tensor& whole) const {
  Tensor t = whole;
  for (size_t d = 0; d < sizes.size(); ++d) t = t.narrow(static_cast<int64_t>(d), offsets[d], sizes[d]);
  return t;
}

Tensor ShardBox::valid(const Tensor& piece) const {
  Tensor t = piece;
  for (size_t d = 0; d < sizes.size(); ++d) t = t.narrow(static_cast<int64_t>(d), 0, sizes[d]);
  return t;
}

ShardBox grid_box(const Shape& shape, const ShardGrid& grid, int64_t rank) {
  ShardBox box{.offsets = Shape(shape.size(), 0), .sizes = shape, .global_shape = shape};
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t c = rank % grid.parts[d];
    rank /= grid.parts[d];
    box.offsets[d] = std::min(shape[d], c * grid.chunk[d]);
    box.sizes[d] = std::clamp<int64_t>(shape[d] - c * grid.chunk[d], 0, grid.chunk[d]);
  }
  return box;
}

}  // namespace titan::parallel
