// Each collective against the values it must produce, on however many ranks the test runs.
#include <gtest/gtest.h>

#include "titan/dist/process_group.h"

namespace titan::dist {
namespace {

ProcessGroup& w() {
  return world();
}

TEST(Collectives, AllReduceSumAvgMax) {
  const int n = w().size();
  const float r = static_cast<float>(w().rank());
  const float total = static_cast<float>(n * (n + 1) / 2);
  Tensor sum = Tensor::from_vector<float>({r + 1, 2 * (r + 1)}, {2});
  w().all_reduce(sum, ReduceOp::sum).wait();
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{total, 2 * total}));
  Tensor avg = Tensor::from_vector<double>({r + 1.0}, {1});
  w().all_reduce(avg, ReduceOp::avg).wait();
  EXPECT_DOUBLE_EQ(avg.item(), (n + 1) / 2.0);
  Tensor mx = Tensor::from_vector<int64_t>({static_cast<int64_t>(r), -static_cast<int64_t>(r)}, {2});
  w().all_reduce(mx, ReduceOp::max).wait();
  EXPECT_EQ(mx.to_vector<int64_t>(), (std::vector<int64_t>{n - 1, 0}));
  EXPECT_DOUBLE_EQ(w().all_reduce(1.5, ReduceOp::sum), 1.5 * n);
}

TEST(Collectives, HandlesCompleteInAnyOrder) {
  Tensor a = Tensor::full({3}, 1.0), b = Tensor::full({5}, 2.0);
  Work wa = w().all_reduce(a, ReduceOp::sum);
  Work wb = w().all_reduce(b, ReduceOp::max);
  wb.wait();
  wa.wait();
  EXPECT_TRUE(wa.test());
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(3, static_cast<float>(w().size())));
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(5, 2.0f));
}

TEST(Collectives, AllGatherStacksRanksAlongDim0) {
  const int n = w().size();
  const int32_t r = w().rank();
  Tensor in = Tensor::from_vector<int32_t>({10 * r, 10 * r + 1}, {1, 2});
  Tensor out = Tensor::zeros({n, 2}, {.dtype = kI32});
  w().all_gather(out, in).wait();
  std::vector<int32_t> want;
  for (int32_t k = 0; k < n; ++k) want.insert(want.end(), {10 * k, 10 * k + 1});
  EXPECT_EQ(out.to_vector<int32_t>(), want);
}

TEST(Collectives, ReduceScatterGivesEachRankItsChunk) {
  const int n = w().size();
  const int r = w().rank();
  std::vector<float> chunks;
  for (int j = 0; j < n; ++j) chunks.insert(chunks.end(), {static_cast<float>((r + 1) * (j + 1)), 1.0f});
  Tensor in = Tensor::from_vector<float>(chunks, {n, 2});
  Tensor out = Tensor::zeros({1, 2});
  w().reduce_scatter(out, in, ReduceOp::sum).wait();
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{ranks_sum * static_cast<float>(r + 1), static_cast<float>(n)}));
  w().reduce_scatter(out, in, ReduceOp::avg).wait();
  EXPECT_FLOAT_EQ(out.to_vector<float>()[0], ranks_sum * static_cast<float>(r + 1) / static_cast<float>(n));
  EXPECT_FLOAT_EQ(out.to_vector<float>()[1], 1.0f);
}

TEST(Collectives, BroadcastFromTheLastRank) {
  const int root = w().size() - 1;
  Tensor t = Tensor::full({4}, w().rank(), {.dtype = kF64});
  w().broadcast(t, root).wait();
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(4, root));
}

TEST(Collectives, AllToAllVSendsEachRankItsRows) {
  // Rank r sends d + 1 rows of (100 r + d) to rank d, so it receives r + 1 rows from each rank.
  const int n = w().size();
  const int r = w().rank();
  std::vector<int64_t> send_rows, recv_rows;
  std::vector<double> send, want;
  for (int d = 0; d < n; ++d) {
    send_rows.push_back(d + 1);
    recv_rows.push_back(r + 1);
    for (int k = 0; k <= d; ++k) send.insert(send.end(), {100.0 * r + d, -1.0});
    for (int k = 0; k <= r; ++k) want.insert(want.end(), {100.0 * d + r, -1.0});
  }
  Tensor in = Tensor::from_vector<double>(send, {static_cast<int64_t>(send.size() / 2), 2});
  Tensor out = Tensor::zeros({static_cast<int64_t>(want.size() / 2), 2}, {.dtype = kF64});
  w().all_to_all_v(out, recv_rows, in, send_rows).wait();
  EXPECT_EQ(out.to_vector<double>(), want);
}

// Rank 0 sends no rows (an empty input) and still receives one row from each rank.
TEST(Collectives, AllToAllVReachesARankThatSendsNothing) {
  const int n = w().size();
  const int r = w().rank();
  const std::vector<int64_t> send_rows(static_cast<size_t>(n), r == 0 ? 0 : 1);
  std::vector<int64_t> recv_rows(static_cast<size_t>(n), 1);
  recv_rows[0] = 0;
  std::vector<double> want;
  for (int s = 1; s < n; ++s) want.insert(want.end(), {1.0 * s, -1.0 * s});
  Tensor in = r == 0 ? Tensor::zeros({0, 2}, {.dtype = kF64})
                     : Tensor::from_vector<double>(std::vector<double>(2 * n, 0.0), {n, 2});
  for (int d = 0; d < n && r != 0; ++d)
    in.narrow(0, d, 1).copy_(Tensor::from_vector<double>({1.0 * r, -1.0 * r}, {1, 2}));
  Tensor out = Tensor::zeros({n - 1, 2}, {.dtype = kF64});
  w().all_to_all_v(out, recv_rows, in, send_rows).wait();
  EXPECT_EQ(out.to_vector<double>(), want);
}

TEST(Collectives, SendRecvAroundARing) {
  const int n = w().size();
  if (n == 1) GTEST_SKIP() << "a world of one has no other rank to send to";
  const int r = w().rank();
  Tensor out = Tensor::full({3}, r, {.dtype = kI64});
  Tensor in = Tensor::zeros({3}, {.dtype = kI64});
  Work recv = w().recv(in, (r + n - 1) % n, 7);
  Work send = w().send(out, (r + 1) % n, 7);
  send.wait();
  recv.wait();
  EXPECT_EQ(in.to_vector<int64_t>(), std::vector<int64_t>(3, (r + n - 1) % n));
}

TEST(Collectives, BarrierCompletes) {
  Work b = w().barrier();
  b.wait();
  EXPECT_TRUE(b.test());
}

TEST(Collectives, UnsupportedTensorsAreClearErrors) {
  Tensor bf = Tensor::zeros({2}, {.dtype = kBF16});
  try {
    w().all_reduce(bf, ReduceOp::sum);
    FAIL() << "bf16 all_reduce was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("convert bf16 to f32"), std::string::npos) << e.what();
  }
  Tensor ints = Tensor::zeros({2}, {.dtype = kI64});
  EXPECT_THROW(w().all_reduce(ints, ReduceOp::avg), Error);
  Tensor out = Tensor::zeros({w().size() + 1});
  EXPECT_THROW(w().all_gather(out, Tensor::zeros({1})), Error);
}

}  // namespace
}  // namespace titan::dist
