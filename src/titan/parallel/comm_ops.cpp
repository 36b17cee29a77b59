#include "titan/parallel/comm_ops.h"

#include <chrono>
#include <string>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"

namespace titan::parallel {

namespace {

void check_input(const char* op, const Tensor& x, int64_t dim) {
  check_cpu(op, x);
  TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, op, ": expected an f32 or f64 tensor, got ", x.desc(),
              "; collectives carry float32 activations (autocast keeps them so)");
  TITAN_CHECK(dim >= 0 && dim < x.dim(), op, ": dim ", dim, " is out of range for ", x.desc());
}

// x with `dim` moved to the front, contiguous: the layout dist/'s collectives cut along dim 0.
Tensor to_front(const Tensor& x, int64_t dim) {
  return (dim == 0 ? x : x.transpose(0, dim)).contiguous();
}
Tensor from_front(const Tensor& x, int64_t dim) {
  return dim == 0 ? x : x.transpose(0, dim).contiguous();
}

CommStats g_stats;

// Waits for `w` and counts it.
void wait_counted(dist::Work w, const dist::ProcessGroup& group, double bytes, bool all_reduce) {
  const auto t0 = std::chrono::steady_clock::now();
  w.wait();
  count_collective(group, bytes, all_reduce,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

const CommStats& comm_stats() {
  return g_stats;
}

void reset_comm_stats() {
  g_stats = {};
}

void count_collective(const dist::ProcessGroup& group, double bytes, bool all_reduce, double seconds) {
  const double n = group.size();
  g_stats.calls += 1;
  g_stats.bytes_sent += (all_reduce ? 2.0 : 1.0) * bytes * (n - 1) / n;
  g_stats.wait_seconds += seconds;
}

void all_reduce_gradients(const std::vector<Tensor>& params, dist::ReduceOp op, dist::ProcessGroup& group) {
  std::vector<dist::Work> works;
  double bytes = 0;
  for (const Tensor& p : params) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    works.push_back(group.all_reduce(grad, op));
    bytes += static_cast<double>(grad.nbytes());
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (dist::Work& w : works) w.wait();
  if (!works.empty())
    count_collective(group, bytes, true,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

Tensor exchange_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, dist::ProcessGroup& group) {
  autograd::NoGradGuard no_grad;
  Tensor in = x.detach().contiguous();
  int64_t received = 0, sent_away = 0;
  for (size_t r = 0; r < recv_rows.size(); ++r) received += recv_rows[r];
  for (size_t r = 0; r < send_rows.size(); ++r)
    if (static_cast<int>(r) != group.rank()) sent_away += send_rows[r];
  Shape out_shape = in.sizes();
  out_shape[0] = received;
  Tensor out = Tensor::empty(out_shape, in.options());
  const auto t0 = std::chrono::steady_clock::now();
  group.all_to_all_v(out, recv_rows, in, send_rows).wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t row_elements = 1;
  for (int64_t d = 1; d < in.dim(); ++d) row_elements *= in.size(d);
  const double bytes =
      static_cast<double>(sent_away * row_elements * static_cast<int64_t>(in.element_size()));
  g_stats.calls += 1;
  g_stats.bytes_sent += bytes;
  g_stats.wait_seconds += seconds;
  g_stats.all_to_all_calls += 1;
  g_stats.all_to_all_bytes += bytes;
  g_stats.all_to_all_seconds += seconds;
  return out;
}

Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, dist::ProcessGroup group) {
  check_input("all_to_all_rows", x, 0);
  const size_t n = static_cast<size_t>(group.size());
  TITAN_CHECK(send_rows.size() == n && recv_rows.size() == n, "all_to_all_rows: ", send_rows.size(),
              " send and ", recv_rows.size(), " receive counts for the ", n, " ranks of group ",
              group.name());
  int64_t sent = 0;
  for (int64_t r : send_rows) sent += r;
  TITAN_CHECK(sent == x.size(0), "all_to_all_rows: send counts sum to ", sent, " rows, x is ", x.desc());
  Tensor out = exchange_rows(x, send_rows, recv_rows, group);
  autograd::record("all_to_all_rows", {x}, {out},
                   [group, send_rows, recv_rows](const autograd::GradContext& g) mutable {
                     return std::vector<Tensor>{exchange_rows(g[0], recv_rows, send_rows, group)};
                   });
  return out;
}

Tensor all_gather_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& group) {
  autograd::NoGradGuard no_grad;
  Tensor front = to_front(x.detach(), dim);
  Shape out_shape = front.sizes();
  out_shape[0] *= group.size();
  Tensor out = Tensor::empty(out_shape, front.options());
  wait_counted(group.all_gather(out, front), group, static_cast<double>(out.nbytes()), false);
  return from_front(out, dim);
}

Tensor reduce_scatter_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& group) {
  autograd::NoGradGuard no_grad;
  TITAN_CHECK(x.size(dim) % group.size() == 0, "reduce_scatter: dim ", dim, " of ", x.desc(),
              " does not split into ", group.size(), " equal chunks over group ", group.name(),
              "; the plan must only split sizes divisible by the group size");
  Tensor front = to_front(x.detach(), dim);
  Shape out_shape = front.sizes();
  out_shape[0] /= group.size();
  Tensor out = Tensor::empty(out_shape, front.options());
  wait_counted(group.reduce_scatter(out, front, dist::ReduceOp::sum), group,
               static_cast<double>(front.nbytes()), false);
  return from_front(out, dim);
}

Tensor chunk_of(const Tensor& x, int64_t dim, int rank, int size) {
  TITAN_CHECK(x.size(dim) % size == 0, "split: dim ", dim, " of ", x.desc(), " does not split into ", size,
              " equal chunks");
  const int64_t n = x.size(dim) / size;
  autograd::NoGradGuard no_grad;
  return x.detach().narrow(dim, rank * n, n).contiguous();
}

Tensor copy_to_group(const Tensor& x, dist::ProcessGroup group) {
  check_input("copy_to_group", x, 0);
  if (group.size() == 1) return x;
  Tensor out = x.detach();
  autograd::record("copy_to_group", {x}, {out}, [group](const autograd::GradContext& g) mutable {
    Tensor grad = g[0].contiguous().clone();
    wait_counted(group.all_reduce(grad, dist::ReduceOp::sum), group, static_cast<double>(grad.nbytes()),
                 true);
    return std::vector<Tensor>{grad};
  });
  return out;
}

Tensor reduce_from_group(const Tensor& x, dist::ProcessGroup group) {
  check_input("reduce_from_group", x, 0);
  if (group.size() == 1) return x;
  Tensor out = x.detach().contiguous().clone();
  wait_counted(group.all_reduce(out, dist::ReduceOp::sum), group, static_cast<double>(out.nbytes()), true);
  autograd::record("reduce_from_group", {x}, {out},
                   [](const autograd::GradContext& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor gather_along(const Tensor& x, int64_t dim, dist::ProcessGroup group) {
  check_input("gather_along", x, dim);
  if (group.size() == 1) return x;
  Tensor out = all_gather_dim(x, dim, group);
  autograd::record("gather_along", {x}, {out}, [group, dim](const autograd::GradContext& g) mutable {
    return std::vector<Tensor>{reduce_scatter_dim(g[0], dim, group)};
  });
  return out;
}

Tensor reduce_scatter_along(const Tensor& x, int64_t dim, dist::ProcessGroup group) {
  check_input("reduce_scatter_along", x, dim);
  if (group.size() == 1) return x;
  Tensor out = reduce_scatter_dim(x, dim, group);
  autograd::record("reduce_scatter_along", {x}, {out}, [group, dim](const autograd::GradContext& g) mutable {
    return std::vector<Tensor>{all_gather_dim(g[0], dim, group)};
  });
  return out;
}

Tensor gather_along_replicated(const Tensor& x, int64_t dim, dist::ProcessGroup group) {
  check_input("gather_along_replicated", x, dim);
  if (group.size() == 1) return x;
  Tensor out = all_gather_dim(x, dim, group);
  autograd::record("gather_along_replicated", {x}, {out}, [group, dim](const autograd::GradContext& g) {
    return std::vector<Tensor>{chunk_of(g[0], dim, group.rank(), group.size())};
  });
  return out;
}

Tensor split_along(const Tensor& x, int64_t dim, dist::ProcessGroup group) {
  check_input("split_along", x, dim);
  if (group.size() == 1) return x;
  Tensor out = chunk_of(x, dim, group.rank(), group.size());
  autograd::record("split_along", {x}, {out}, [group, dim](const autograd::GradContext& g) mutable {
    return std::vector<Tensor>{all_gather_dim(g[0], dim, group)};
  });
  return out;
}

}  // namespace titan::parallel
