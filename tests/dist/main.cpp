// The distributed tests' entry point: every rank runs the same tests, which call collectives in
// the same order. Rank 0 prints GoogleTest's report; the other ranks print only their failures,
// prefixed with the rank. `--scenario=rank_exits_early`, `--scenario=rank_dies_in_all_to_all` and
// `--scenario=rank_dies_in_pipeline` run a whole job that must fail (see tests/CMakeLists.txt)
// instead of the tests.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"
#include "titan/ops/linalg.h"
#include "titan/parallel/expert_parallel.h"
#include "titan/parallel/pipeline_executor.h"
#include "trainer_fixture.h"

namespace titan::train::testing {
extern int64_t g_job_id;
}

namespace {

// Prints this rank's failures, prefixed with the rank (rank 0 leaves that to GoogleTest's
// printer). A fatal one ends the whole job: the failing rank returns from its test early, so the
// others would wait in their next collective until the timeout.
class RankFailures : public testing::EmptyTestEventListener {
 public:
  RankFailures(int rank, bool print) : rank_(rank), print_(print) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed() && print_)
      std::cerr << "rank " << rank_ << ": " << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number()
                << ": failure\n"
                << r.summary() << std::endl;
    if (r.fatally_failed()) {
      std::cerr << "rank " << rank_ << ": fatal failure; ending the job" << std::endl;
      titan::dist::abort_job(1);
    }
  }

 private:
  int rank_;
  bool print_;
};

// Rank 1 leaves the job (MPI finalized, as after a clean early return) while rank 0 waits for it
// in an all-reduce: rank 0 must fail within the timeout with an error naming rank 1, and end the
// job, rather than hang.
int rank_exits_early(titan::dist::ProcessGroup& world) {
  world.set_timeout_seconds(2);
  if (world.rank() == 1) return 0;
  titan::Tensor t = titan::Tensor::ones({4});
  try {
    world.all_reduce(t, titan::dist::ReduceOp::sum).wait();
  } catch (const titan::Error& e) {
    std::cerr << "rank " << world.rank() << ": error: " << e.what() << std::endl;
    titan::dist::abort_job(1);
  }
  std::cerr << "rank " << world.rank() << ": the all-reduce completed without rank 1" << std::endl;
  return 1;
}

// Rank 1 leaves the job between expert parallelism's dispatch and combine, while rank 0 sends it
// the experts' outputs back in an all-to-all: rank 0 must fail within the timeout with an error
// naming rank 1, and end the job.
int rank_dies_in_all_to_all(titan::dist::ProcessGroup& world) {
  world.set_timeout_seconds(2);
  titan::parallel::AllToAllTokenDispatcher dispatcher(world, 1);
  const int64_t experts = world.size();
  titan::Tensor x = titan::Tensor::ones({4, 8});
  titan::Tensor ids = titan::Tensor::zeros({4, 1}, {.dtype = titan::kI64});
  for (int64_t t = 0; t < 4; ++t) ids.data<int64_t>()[t] = t % experts;
  const titan::nn::moe::TokenDispatcher::Dispatched d = dispatcher.dispatch(x, ids, experts);
  if (world.rank() == 1) return 0;
  try {
    dispatcher.combine(d.rows, titan::Tensor::ones({4, 1}), d);
  } catch (const titan::Error& e) {
    std::cerr << "rank " << world.rank() << ": error: " << e.what() << std::endl;
    titan::dist::abort_job(1);
  }
  std::cerr << "rank " << world.rank() << ": the all-to-all completed without rank 1" << std::endl;
  return 1;
}

// Rank 1, the second stage of a two-stage 1F1B pipeline, leaves before running its stage: rank 0
// sends it the first micro-batch's activations and then waits for their gradient, and must fail
// within the timeout with an error naming rank 1, and end the job.
int rank_dies_in_pipeline(titan::dist::ProcessGroup& world) {
  world.set_timeout_seconds(2);
  if (world.rank() == 1) return 0;
  titan::parallel::PipelineExecutor executor(titan::parallel::make_schedule("1F1B", 2, 2), world, {2, 4});
  titan::Tensor w = titan::Tensor::ones({4, 4}).requires_grad_(true);
  try {
    executor.run([](int64_t) { return titan::Tensor::ones({2, 4}); },
                 [&](int64_t, int64_t, const titan::Tensor& in) {
                   return titan::parallel::StageResult{.output = titan::ops::matmul(in, w)};
                 },
                 0.5);
  } catch (const titan::Error& e) {
    std::cerr << "rank " << world.rank() << ": error: " << e.what() << std::endl;
    titan::dist::abort_job(1);
  }
  std::cerr << "rank " << world.rank() << ": the pipeline completed without rank 1" << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  titan::dist::ProcessGroup& world = titan::dist::world();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--scenario=rank_exits_early") return rank_exits_early(world);
    if (arg == "--scenario=rank_dies_in_all_to_all") return rank_dies_in_all_to_all(world);
    if (arg == "--scenario=rank_dies_in_pipeline") return rank_dies_in_pipeline(world);
  }
  // A test that fails on one rank before a collective must not leave the others waiting long.
  world.set_timeout_seconds(60);
  // Rank 0's process id names this job's temporary folders (trainer_fixture.h).
  titan::Tensor id = titan::Tensor::scalar<int64_t>(static_cast<int64_t>(getpid()));
  world.broadcast(id, 0).wait();
  titan::train::testing::g_job_id = static_cast<int64_t>(id.item());
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailures(world.rank(), world.rank() != 0));
  const int failed = RUN_ALL_TESTS();
  // This job's folders go once no rank reads them; a failed run leaves them for a look.
  world.barrier().wait();
  if (failed == 0) std::filesystem::remove_all(titan::train::testing::job_dir(world.rank()));
  return failed;
}
