#include "titan/dist/process_group.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <sstream>
#include <thread>

#include "titan/core/trace.h"

namespace titan::dist {

namespace {

using Clock = std::chrono::steady_clock;

// After a timeout, the waiting rank asks the group's other ranks what they are doing, on a
// communicator of its own so that these messages never match a collective's.
constexpr int kPingTag = 1;
constexpr int kPongTag = 2;
constexpr int kStatusChars = 200;

// This process's MPI state.
struct Runtime {
  bool mpi = false;
  int world_rank = 0;
  MPI_Comm control = MPI_COMM_NULL;
  // What this rank is blocked in, told to ranks that ask; empty outside wait().
  std::string waiting_in;
  // Replies in flight: MPI reads a send buffer until the send completes.
  std::list<std::array<char, kStatusChars>> replies;
};

Runtime& runtime() {
  static Runtime rt;
  return rt;
}

bool mpi_finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  TITAN_CHECK(false, "dist: ", what, " failed on rank ", runtime().world_rank, ": ", std::string(text, len));
}

MPI_Datatype mpi_type(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case kF32: return MPI_FLOAT;
    case kF64: return MPI_DOUBLE;
    case kI32: return MPI_INT32_T;
    case kI64: return MPI_INT64_T;
    default: break;
  }
  TITAN_CHECK(false, "dist::", op, ": tensor ", t.desc(),
              " has no MPI type; collectives take f32, f64, i32 or i64 tensors (convert bf16 to f32 first)");
}

int mpi_count(int64_t n, const char* op) {
  TITAN_CHECK(n <= INT_MAX, "dist::", op, ": ", n, " elements exceed MPI's int count (", INT_MAX,
              "); split the tensor into smaller ones");
  return static_cast<int>(n);
}

void check_tensor(const Tensor& t, const char* op) {
  TITAN_CHECK(t.defined(), "dist::", op, ": tensor is undefined");
  check_cpu(op, t);
  TITAN_CHECK(t.is_contiguous(), "dist::", op, ": tensor ", t.desc(),
              " is not contiguous; pass t.contiguous() and copy the result back");
}

// Answers the questions of ranks that timed out waiting for this one.
void answer_pings() {
  Runtime& rt = runtime();
  if (rt.control == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, rt.control, &flag, &st);
    if (!flag) return;
    char ping = 0;
    MPI_Recv(&ping, 1, MPI_CHAR, st.MPI_SOURCE, kPingTag, rt.control, MPI_STATUS_IGNORE);
    auto& reply = rt.replies.emplace_back();
    reply.fill('\0');
    std::memcpy(reply.data(), rt.waiting_in.data(), std::min<size_t>(rt.waiting_in.size(), kStatusChars - 1));
    MPI_Request req;
    MPI_Isend(reply.data(), kStatusChars, MPI_CHAR, st.MPI_SOURCE, kPongTag, rt.control, &req);
    MPI_Request_free(&req);
  }
}

}  // namespace

struct ProcessGroup::Impl {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks{0};
  MPI_Comm comm = MPI_COMM_NULL;  // null: a group of this process alone, no MPI
  bool owns_comm = false;
  double timeout_seconds = 300;
  uint64_t started = 0;    // operations started, numbering them in messages
  bool simulated = false;  // ProcessGroup::simulated: no other rank exists

  ~Impl() {
    if (owns_comm && !mpi_finalized()) MPI_Comm_free(&comm);
  }
};

struct Work::State {
  std::string what;  // "all_reduce #3 on group 'dp' (world ranks 0, 1)"
  std::string op;    // "all_reduce(sum)"
  int64_t bytes = 0;
  Clock::time_point started;
  std::shared_ptr<ProcessGroup::Impl> group;
  std::vector<MPI_Request> requests;
  std::vector<Tensor> keep_alive;
  std::function<void()> on_complete;
  bool done = false;
};

namespace {

std::string member_list(const ProcessGroup::Impl& g) {
  std::ostringstream os;
  for (size_t i = 0; i < g.world_ranks.size(); ++i) os << (i ? ", " : "") << g.world_ranks[i];
  return os.str();
}

// Asks every other member of the stuck operation's group what it is doing, waiting a short while
// for the answers, and throws an error naming those that did not answer.
[[noreturn]] void fail_timeout(const Work::State& s) {
  const ProcessGroup::Impl& g = *s.group;
  Runtime& rt = runtime();
  const double grace = std::min(g.timeout_seconds, 2.0);
  static char ping = 0;
  struct Ask {
    int world_rank;
    MPI_Request req;
    std::array<char, kStatusChars> answer;
    bool answered = false;
  };
  std::list<Ask> asks;
  for (int wr : g.world_ranks) {
    if (wr == rt.world_rank) continue;
    MPI_Request send;
    MPI_Isend(&ping, 1, MPI_CHAR, wr, kPingTag, rt.control, &send);
    MPI_Request_free(&send);
    Ask& a = asks.emplace_back(Ask{wr, MPI_REQUEST_NULL, {}, false});
    MPI_Irecv(a.answer.data(), kStatusChars, MPI_CHAR, wr, kPongTag, rt.control, &a.req);
  }
  const auto until = Clock::now() + std::chrono::duration<double>(grace);
  bool all = false;
  while (!all && Clock::now() < until) {
    all = true;
    for (Ask& a : asks) {
      if (a.answered) continue;
      int flag = 0;
      MPI_Test(&a.req, &flag, MPI_STATUS_IGNORE);
      a.answered = flag != 0;
      all = all && a.answered;
    }
    answer_pings();  // another rank may be asking this one at the same time
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::ostringstream os;
  os << "dist: " << s.what << " did not complete within " << g.timeout_seconds << " s on rank "
     << rt.world_rank;
  for (Ask& a : asks) {
    if (!a.answered) {
      MPI_Cancel(&a.req);
      MPI_Request_free(&a.req);
      os << "; rank " << a.world_rank
         << " did not respond (it exited, crashed, or is stalled outside any collective)";
      continue;
    }
    std::string theirs(a.answer.data());
    if (theirs == s.what)
      os << "; rank " << a.world_rank << " is waiting in the same operation";
    else
      os << "; rank " << a.world_rank << " is waiting in " << theirs
         << " (the ranks called different collectives: a bug)";
  }
  TITAN_CHECK(false, os.str(),
              ". Ranks are world ranks (mpirun's). If a rank is merely slow, raise comm.timeout_seconds");
}

template <typename T>
void divide(const Tensor& t, double by) {
  T* p = t.data<T>();
  const T f = static_cast<T>(1.0 / by);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] *= f;
}

// The post-processing of avg: MPI sums, this divides.
std::function<void()> average(const Tensor& t, ReduceOp op, int size, const char* name) {
  if (op != ReduceOp::avg) return nullptr;
  TITAN_CHECK(t.dtype() == kF32 || t.dtype() == kF64, "dist::", name, ": avg needs a floating tensor, got ",
              t.desc(), "; use sum and divide");
  if (size == 1) return nullptr;
  return [t, size] { t.dtype() == kF32 ? divide<float>(t, size) : divide<double>(t, size); };
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

}  // namespace

bool Work::test() {
  if (!state_ || state_->done) return true;
  int flag = 0;
  check_mpi(MPI_Testall(static_cast<int>(state_->requests.size()), state_->requests.data(), &flag,
                        MPI_STATUSES_IGNORE),
            state_->what);
  if (!flag) return false;
  if (state_->on_complete) state_->on_complete();
  state_->done = true;
  state_->keep_alive.clear();
  return true;
}

void Work::wait() {
  if (test()) return;
  Runtime& rt = runtime();
  struct Waiting {
    Runtime& rt;
    Waiting(Runtime& r, const std::string& what) : rt(r) { rt.waiting_in = what; }
    ~Waiting() { rt.waiting_in.clear(); }
  } waiting(rt, state_->what);
  // What a profile needs of a collective: how long this rank was blocked in it.
  trace::Span span("wait", "collective");
  if (span.active())
    span.rename("wait " + state_->op)
        .arg("bytes", state_->bytes)
        .arg("group", state_->group->name)
        .arg("since_issue_us",
             std::chrono::duration<double, std::micro>(Clock::now() - state_->started).count());
  const auto deadline = Clock::now() + std::chrono::duration<double>(state_->group->timeout_seconds);
  // Spin briefly for the fast case, then sleep between polls: ranks oversubscribe the cores, and
  // a polling rank must not take the CPU from the one it waits for.
  for (int polls = 0; !test(); ++polls) {
    answer_pings();
    if (Clock::now() > deadline) fail_timeout(*state_);
    if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(polls > 1000 ? 500 : 20));
  }
}

ProcessGroup ProcessGroup::single(const std::string& name) {
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  impl->world_ranks = {runtime().world_rank};
  return ProcessGroup(impl);
}

ProcessGroup ProcessGroup::simulated(int rank, int size, const std::string& name) {
  TITAN_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup::simulated: rank ", rank,
              " is not one of ", size, " ranks");
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  impl->rank = rank;
  impl->size = size;
  // No member list: the other ranks do not exist, and a list of them would cost memory in
  // proportion to the layout a dry run describes (a billion ranks: 4 GB per group).
  impl->world_ranks.clear();
  if (size == 1) impl->world_ranks.push_back(0);
  impl->simulated = size > 1;
  return ProcessGroup(impl);
}

bool ProcessGroup::is_simulated() const {
  return impl_->simulated;
}

int ProcessGroup::rank() const {
  return impl_->rank;
}
int ProcessGroup::size() const {
  return impl_->size;
}
const std::string& ProcessGroup::name() const {
  return impl_->name;
}
const std::vector<int>& ProcessGroup::world_ranks() const {
  return impl_->world_ranks;
}
double ProcessGroup::timeout_seconds() const {
  return impl_->timeout_seconds;
}
void ProcessGroup::set_timeout_seconds(double seconds) {
  TITAN_CHECK(seconds > 0, "dist: group '", impl_->name, "': the timeout must be positive, got ", seconds);
  impl_->timeout_seconds = seconds;
}

namespace {

// Starts an MPI operation on `g`, or completes it at once (`local`) in a group of one. The last of
// `tensors` is what this rank sends (or, receiving only, receives): its size is the trace's bytes.
Work start(const std::shared_ptr<ProcessGroup::Impl>& g, const std::string& op, std::vector<Tensor> tensors,
           const std::function<void()>& local, const std::function<int(MPI_Comm, MPI_Request*)>& launch,
           std::function<void()> on_complete = nullptr) {
  ++g->started;
  const int64_t bytes = tensors.empty() ? 0 : static_cast<int64_t>(tensors.back().nbytes());
  trace::Span span(op, "collective");
  span.arg("bytes", bytes).arg("group", g->name).arg("ranks", g->size).arg("seq", g->started);
  TITAN_CHECK(
      !g->simulated, op, " on group '", g->name, "' of ", g->size,
      " simulated ranks: a dry run builds every rank's layout without the other ranks, so nothing may "
      "communicate; this step needs a real launch (mpirun)");
  if (g->comm == MPI_COMM_NULL) {
    if (local) local();
    if (on_complete) on_complete();
    return Work();
  }
  auto s = std::make_shared<Work::State>();
  s->what = op + " #" + std::to_string(g->started) + " on group '" + g->name + "' (world ranks " +
            member_list(*g) + ")";
  s->group = g;
  s->op = op;
  s->bytes = bytes;
  s->started = Clock::now();
  s->keep_alive = std::move(tensors);
  s->on_complete = std::move(on_complete);
  s->requests.resize(1);
  check_mpi(launch(g->comm, s->requests.data()), s->what);
  return Work(s);
}

}  // namespace

Work ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  MPI_Datatype type = mpi_type(t, "all_reduce");
  int n = mpi_count(t.numel(), "all_reduce");
  return start(
      impl_, std::string("all_reduce(") + op_name(op) + ")", {t}, nullptr,
      [&](MPI_Comm c, MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), n, type, mpi_op(op), c, r);
      },
      average(t, op, impl_->size, "all_reduce"));
}

Work ProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  check_tensor(out, "all_gather");
  check_tensor(in, "all_gather");
  TITAN_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * impl_->size,
              "dist::all_gather on group '", impl_->name, "' of ", impl_->size, " ranks: output ", out.desc(),
              " must hold ", impl_->size, " times the input ", in.desc(), ", same dtype");
  MPI_Datatype type = mpi_type(in, "all_gather");
  int n = mpi_count(in.numel(), "all_gather");
  return start(
      impl_, "all_gather", {out, in}, [&] { Tensor(out).copy_(in.view(out.sizes())); },
      [&](MPI_Comm c, MPI_Request* r) {
        return MPI_Iallgather(in.data_ptr(), n, type, out.data_ptr(), n, type, c, r);
      });
}

Work ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor(out, "reduce_scatter");
  check_tensor(in, "reduce_scatter");
  TITAN_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * impl_->size,
              "dist::reduce_scatter on group '", impl_->name, "' of ", impl_->size, " ranks: input ",
              in.desc(), " must hold ", impl_->size, " chunks of the output ", out.desc(), ", same dtype");
  MPI_Datatype type = mpi_type(in, "reduce_scatter");
  int n = mpi_count(out.numel(), "reduce_scatter");
  return start(
      impl_, std::string("reduce_scatter(") + op_name(op) + ")", {out, in},
      [&] { Tensor(out).copy_(in.view(out.sizes())); },
      [&](MPI_Comm c, MPI_Request* r) {
        return MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), n, type, mpi_op(op), c, r);
      },
      average(out, op, impl_->size, "reduce_scatter"));
}

Work ProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  TITAN_CHECK(root >= 0 && root < impl_->size, "dist::broadcast on group '", impl_->name, "': root ", root,
              " is not a rank of its ", impl_->size);
  MPI_Datatype type = mpi_type(t, "broadcast");
  int n = mpi_count(t.numel(), "broadcast");
  return start(impl_, "broadcast", {t}, nullptr,
               [&](MPI_Comm c, MPI_Request* r) { return MPI_Ibcast(t.data_ptr(), n, type, root, c, r); });
}

Work ProcessGroup::all_to_all_v(const Tensor& out, const std::vector<int64_t>& recv_rows, const Tensor& in,
                                const std::vector<int64_t>& send_rows) {
  check_tensor(out, "all_to_all_v");
  check_tensor(in, "all_to_all_v");
  const size_t size = static_cast<size_t>(impl_->size);
  TITAN_CHECK(recv_rows.size() == size && send_rows.size() == size && in.dim() >= 1 && out.dim() >= 1 &&
                  in.dtype() == out.dtype(),
              "dist::all_to_all_v on group '", impl_->name, "': needs one row count per rank (", size,
              ") for sending and receiving, and input ", in.desc(), " and output ", out.desc(),
              " of one dtype with a dim 0 of rows");
  // Elements per row from the trailing dims, not numel / rows: a rank with no rows to send still
  // receives whole rows (expert parallelism's rank whose experts got no tokens sends none back).
  auto row_elements = [](const Tensor& t) {
    int64_t n = 1;
    for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
    return n;
  };
  const int64_t row = row_elements(in), out_row = row_elements(out);
  int64_t sent = 0, received = 0;
  for (size_t i = 0; i < size; ++i) sent += send_rows[i], received += recv_rows[i];
  TITAN_CHECK(sent == in.size(0) && received == out.size(0) && row == out_row,
              "dist::all_to_all_v on group '", impl_->name, "': send rows sum to ", sent, " for input ",
              in.desc(), ", receive rows to ", received, " for output ", out.desc(),
              "; they must equal dim 0, with the same row shape");
  auto counts = std::make_shared<std::vector<int>>(4 * size);  // send counts, displs, recv counts, displs
  int64_t sd = 0, rd = 0;
  for (size_t i = 0; i < size; ++i) {
    (*counts)[i] = mpi_count(send_rows[i] * row, "all_to_all_v");
    (*counts)[size + i] = mpi_count(sd, "all_to_all_v");
    (*counts)[2 * size + i] = mpi_count(recv_rows[i] * row, "all_to_all_v");
    (*counts)[3 * size + i] = mpi_count(rd, "all_to_all_v");
    sd += send_rows[i] * row;
    rd += recv_rows[i] * row;
  }
  MPI_Datatype type = mpi_type(in, "all_to_all_v");
  // MPI reads the count arrays until the operation completes, so completion releases them.
  return start(
      impl_, "all_to_all_v", {out, in},
      [&] {
        if (sent) Tensor(out).copy_(in.view(out.sizes()));
      },
      [&](MPI_Comm c, MPI_Request* r) {
        const int* k = counts->data();
        return MPI_Ialltoallv(in.data_ptr(), k, k + size, type, out.data_ptr(), k + 2 * size, k + 3 * size,
                              type, c, r);
      },
      [counts] {});
}

Work ProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_tensor(t, "send");
  TITAN_CHECK(dst >= 0 && dst < impl_->size && dst != impl_->rank, "dist::send on group '", impl_->name,
              "' of ", impl_->size, " ranks: destination ", dst, " must be another rank of the group");
  MPI_Datatype type = mpi_type(t, "send");
  int n = mpi_count(t.numel(), "send");
  return start(impl_, "send to " + std::to_string(dst), {t}, nullptr,
               [&](MPI_Comm c, MPI_Request* r) { return MPI_Isend(t.data_ptr(), n, type, dst, tag, c, r); });
}

Work ProcessGroup::recv(const Tensor& t, int src, int tag) {
  check_tensor(t, "recv");
  TITAN_CHECK(src >= 0 && src < impl_->size && src != impl_->rank, "dist::recv on group '", impl_->name,
              "' of ", impl_->size, " ranks: source ", src, " must be another rank of the group");
  MPI_Datatype type = mpi_type(t, "recv");
  int n = mpi_count(t.numel(), "recv");
  return start(impl_, "recv from " + std::to_string(src), {t}, nullptr,
               [&](MPI_Comm c, MPI_Request* r) { return MPI_Irecv(t.data_ptr(), n, type, src, tag, c, r); });
}

Work ProcessGroup::barrier() {
  return start(impl_, "barrier", {}, nullptr, [](MPI_Comm c, MPI_Request* r) { return MPI_Ibarrier(c, r); });
}

double ProcessGroup::all_reduce(double value, ReduceOp op) {
  Tensor t = Tensor::scalar(value);
  all_reduce(t, op).wait();
  return t.item();
}

ProcessGroup ProcessGroup::split(int color, int key, const std::string& name) const {
  TITAN_CHECK(!impl_->simulated, "split of group '", impl_->name, "' of ", impl_->size,
              " simulated ranks: which ranks share a color needs them all; build the sub-groups with "
              "ProcessGroup::simulated");
  if (impl_->comm == MPI_COMM_NULL) {
    ProcessGroup g = single(name);
    g.set_timeout_seconds(impl_->timeout_seconds);
    return g;
  }
  auto g = std::make_shared<Impl>();
  g->name = name;
  g->timeout_seconds = impl_->timeout_seconds;
  check_mpi(MPI_Comm_split(impl_->comm, color, key, &g->comm), "MPI_Comm_split for group '" + name + "'");
  g->owns_comm = true;
  MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g->comm, &g->rank);
  MPI_Comm_size(g->comm, &g->size);
  // World ranks of the members, in group order.
  MPI_Group mine, world_group;
  MPI_Comm_group(g->comm, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(static_cast<size_t>(g->size));
  for (int i = 0; i < g->size; ++i) ranks[static_cast<size_t>(i)] = i;
  g->world_ranks.resize(ranks.size());
  MPI_Group_translate_ranks(mine, g->size, ranks.data(), world_group, g->world_ranks.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world_group);
  return ProcessGroup(g);
}

bool launched_by_mpi() {
  // OpenMPI's mpirun, MPICH's hydra, and PMIx launchers (srun --mpi=pmix) set these.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

int launch_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

namespace {

void finalize_mpi() {
  Runtime& rt = runtime();
  if (mpi_finalized()) return;
  if (rt.control != MPI_COMM_NULL) MPI_Comm_free(&rt.control);
  MPI_Finalize();
}

ProcessGroup make_world() {
  if (!launched_by_mpi()) return ProcessGroup::single("world");
  // Only the thread that runs the training loop calls MPI (kernels' OpenMP threads never do), so
  // FUNNELED is the level needed.
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  TITAN_CHECK(provided >= MPI_THREAD_FUNNELED, "dist: MPI gave thread level ", provided,
              " but titan needs MPI_THREAD_FUNNELED (", MPI_THREAD_FUNNELED,
              "); use an MPI library built with thread support");
  std::atexit(finalize_mpi);
  Runtime& rt = runtime();
  rt.mpi = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rt.world_rank);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &rt.control), "MPI_Comm_dup");
  auto g = std::make_shared<ProcessGroup::Impl>();
  g->name = "world";
  g->comm = MPI_COMM_WORLD;
  g->rank = rt.world_rank;
  MPI_Comm_size(MPI_COMM_WORLD, &g->size);
  g->world_ranks.resize(static_cast<size_t>(g->size));
  for (int i = 0; i < g->size; ++i) g->world_ranks[static_cast<size_t>(i)] = i;
  return ProcessGroup(g);
}

}  // namespace

ProcessGroup& world() {
  static ProcessGroup w = make_world();
  return w;
}

void abort_job(int exit_code) {
  if (runtime().mpi && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace titan::dist
