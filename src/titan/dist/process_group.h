#pragma once
// ProcessGroup: collectives over a set of ranks, each returning an asynchronous Work handle.
//
// Over MPI the collectives are MPI's nonblocking ones (MPI_Iallreduce, ...), started at the call
// and progressed by Work::test() / wait(), so that computation can run between the call and the
// wait. A group of one rank (a run without mpirun, or a mesh dimension of degree 1) needs no MPI
// at all: its collectives complete at the call.
//
// Tensors must be contiguous CPU tensors of f32, f64, i32 or i64, the same shape on every rank
// where a collective needs it; a collective keeps its tensors alive until it completes.
//
// wait() gives up after the group's timeout and throws an error that says which collective was
// stuck and, after asking the group's other ranks, which of them did not answer (dead, or stalled
// outside a collective) or are waiting in a different collective: never a silent hang.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::dist {

enum class ReduceOp { sum, avg, max };

class Work {
 public:
  Work() = default;  // already complete
  // Progresses the operation; true once it has completed (and its result is in place).
  bool test();
  // Blocks until the operation completes; throws titan::Error after the group's timeout.
  void wait();

  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  struct Impl;
  explicit ProcessGroup(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  // A group of this process alone, named `name`; needs no MPI.
  static ProcessGroup single(const std::string& name = "single");
  // Rank `rank` of a group of `size` ranks that do not exist: what a dry run builds a layout with
  // (every rank's shapes and shards, without launching them). Any collective on it, or on a group
  // split from it, is an error naming the group.
  static ProcessGroup simulated(int rank, int size, const std::string& name = "world");
  bool is_simulated() const;

  int rank() const;  // this process's rank within the group
  int size() const;
  const std::string& name() const;
  // The world rank of each member, by group rank; empty for a simulated group of several ranks.
  const std::vector<int>& world_ranks() const;
  double timeout_seconds() const;
  // Applies to collectives started after the call.
  void set_timeout_seconds(double seconds);

  // In place; avg is the sum divided by size() (floating dtypes only).
  Work all_reduce(const Tensor& t, ReduceOp op);
  // out holds size() copies of in's shape along dim 0, rank r's at rows [r * in.size(0), ...).
  Work all_gather(const Tensor& out, const Tensor& in);
  // in holds size() chunks of out's shape along dim 0; rank r receives the reduction of chunk r.
  Work reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op);
  // Root's t to every rank's t.
  Work broadcast(const Tensor& t, int root);
  // Rank r sends in's rows [sum(send_rows[0..d)), +send_rows[d]) to rank d, and receives
  // recv_rows[s] rows from each rank s, in order, into out. Rows are slices along dim 0.
  Work all_to_all_v(const Tensor& out, const std::vector<int64_t>& recv_rows, const Tensor& in,
                    const std::vector<int64_t>& send_rows);
  Work send(const Tensor& t, int dst, int tag = 0);
  Work recv(const Tensor& t, int src, int tag = 0);
  Work barrier();

  // Blocking scalar reductions, for metrics and flags.
  double all_reduce(double value, ReduceOp op);

  // Collective over this group: the ranks passing the same `color` form a new group named
  // `name`, ordered by `key` (then by rank). Every rank must call it.
  ProcessGroup split(int color, int key, const std::string& name) const;

 private:
  std::shared_ptr<Impl> impl_;
};

// All processes of the job: over MPI_COMM_WORLD when launched by mpirun (detected from the
// launcher's environment; MPI is initialised on the first call, with the thread level checked),
// else a group of one. Timeout defaults to 300 s.
ProcessGroup& world();
// True when this process was started by an MPI launcher (mpirun, mpiexec, srun with PMIx).
bool launched_by_mpi();
// This process's world rank as the launcher's environment tells it (0 without a launcher); needs
// no MPI, so it can name the rank in an error raised before MPI is initialised.
int launch_rank();
// Ends every rank of the job after an error on this one, so that none waits for it; returns only
// when this is a world of one.
void abort_job(int exit_code);

}  // namespace titan::dist
