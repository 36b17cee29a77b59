// The load-balanced layout of context parallelism: cp_positions, cp_shard, cp_unshard.
#include "titan/parallel/context_parallel.h"

#include "titan/core/error.h"

namespace titan::parallel {

namespace {

void check_layout(const char* op, int64_t seq_len, int64_t cp_rank, int64_t cp_size) {
  TITAN_CHECK(cp_size >= 1 && cp_rank >= 0 && cp_rank < cp_size, op,
              ": expected 0 <= cp_rank < cp_size, got cp_rank ", cp_rank, " and cp_size ", cp_size);
  TITAN_CHECK(seq_len > 0 && seq_len % (2 * cp_size) == 0, op,
              ": the sequence is cut into 2 * cp = ", 2 * cp_size,
              " equal chunks, so its length must be a multiple of ", 2 * cp_size, ", got ", seq_len,
              "; pad or choose training.seq_len accordingly");
}

// Where rank j's local rows [0, chunk) and [chunk, 2 * chunk) start in the global sequence.
std::pair<int64_t, int64_t> chunk_starts(int64_t chunk, int64_t rank, int64_t cp_size) {
  return {rank * chunk, (2 * cp_size - 1 - rank) * chunk};
}

}  // namespace

std::vector<int64_t> cp_positions(int64_t seq_len, int64_t cp_rank, int64_t cp_size) {
  check_layout("cp_positions", seq_len, cp_rank, cp_size);
  const int64_t chunk = seq_len / (2 * cp_size);
  const auto [first, second] = chunk_starts(chunk, cp_rank, cp_size);
  std::vector<int64_t> pos;
  pos.reserve(static_cast<size_t>(2 * chunk));
  for (int64_t start : {first, second})
    for (int64_t i = 0; i < chunk; ++i) pos.push_back(start + i);
  return pos;
}

Tensor cp_shard(const Tensor& x, int64_t dim, int64_t cp_rank, int64_t cp_size) {
  check_cpu("cp_shard", x);
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TITAN_CHECK(d >= 0 && d < x.dim(), "cp_shard: dim ", dim, " is out of range for ", x.desc());
  check_layout("cp_shard", x.size(d), cp_rank, cp_size);
  const int64_t chunk = x.size(d) / (2 * cp_size);
  Shape sizes = x.sizes();
  sizes[d] = 2 * chunk;
  Tensor out = Tensor::empty(sizes, x.options());
  const auto [first, second] = chunk_starts(chunk, cp_rank, cp_size);
  out.narrow(d, 0, chunk).copy_(x.narrow(d, first, chunk));
  out.narrow(d, chunk, chunk).copy_(x.narrow(d, second, chunk));
  return out;
}

Tensor cp_unshard(const Tensor& local, int64_t dim, dist::ProcessGroup& cp_group) {
  check_cpu("cp_unshard", local);
  const int64_t d = dim < 0 ? dim + local.dim() : dim;
  TITAN_CHECK(d >= 0 && d < local.dim(), "cp_unshard: dim ", dim, " is out of range for ", local.desc());
  const int64_t cp = cp_group.size(), rows = local.size(d);
  TITAN_CHECK(rows > 0 && rows % 2 == 0,
              "cp_unshard: a rank holds two equal chunks (cp_shard's layout), so dim ", dim,
              " must have an even, nonzero length, got ", local.desc());
  // all_gather stacks along dim 0: bring `dim` to the front and back again.
  const Tensor front = local.detach().transpose(0, d).contiguous();
  Shape sizes = front.sizes();
  sizes[0] = cp * rows;
  Tensor gathered = Tensor::empty(sizes, front.options());
  cp_group.all_gather(gathered, front).wait();
  Tensor global = Tensor::empty(sizes, front.options());
  const int64_t chunk = rows / 2;
  for (int64_t j = 0; j < cp; ++j) {
    const auto [first, second] = chunk_starts(chunk, j, cp);
    global.narrow(0, first, chunk).copy_(gathered.narrow(0, j * rows, chunk));
    global.narrow(0, second, chunk).copy_(gathered.narrow(0, j * rows + chunk, chunk));
  }
  return global.transpose(0, d).contiguous();
}

}  // namespace titan::parallel
