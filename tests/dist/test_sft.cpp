// Supervised fine-tuning (training.objective = "sft") across ranks: the loss masked to completions
// gives the same losses and gradient norms under FSDP and tensor parallelism as one rank.
//
// Each micro-batch's loss is the mean over its own labels that carry loss, and a step averages
// its micro-batches and data-parallel ranks. Under SFT the micro-batches hold different numbers of
// such labels, so one rank reproduces N data-parallel ranks when it runs their rows as N
// micro-batches (not as one), which is the reference here.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "support/paths.h"
#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

using namespace testing;

std::vector<std::string> sft(std::vector<std::string> extra) {
  return join({"--training.objective=sft",
               "--training.dataset_path=" + std::string(TITAN_SOURCE_DIR) + "/data/sft/addition_train.jsonl",
               "--attention.document_masking=true"},
              extra);
}

// Rank 0 alone over `overrides`; every rank returns after it, the others with nothing.
TrainResult on_rank_0(const std::vector<std::string>& overrides) {
  dist::ProcessGroup& world = dist::world();
  TrainResult r;
  if (world.rank() == 0) {
    std::ostringstream log;
    r = Trainer(small_config(overrides), log, dist::ProcessGroup::single()).train();
  }
  world.barrier().wait();
  return r;
}

TrainResult on_all_ranks(const std::vector<std::string>& overrides, std::string* log_out = nullptr) {
  std::ostringstream log;
  TrainResult r = Trainer(small_config(overrides), log, dist::world()).train();
  if (log_out) *log_out = log.str();
  return r;
}

TEST(Sft, FsdpOnTwoRanksMatchesOneRankOverTheSameMicroBatches) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "compares 2 ranks with 1";
  // The global batch of 8 rows as 2 micro-batches of 4: rows 0-3 are dp rank 0's, 4-7 rank 1's.
  const TrainResult one = on_rank_0(sft({local_batch(2)}));
  std::string log;
  const TrainResult two = on_all_ranks(sft({local_batch(2), "--parallelism.data_parallel_replicate_degree=1",
                                            "--parallelism.data_parallel_shard_degree=2"}),
                                       &log);
  if (world.rank() != 0) return;
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  const double worst = expect_one_rank_figures(
      two, {.losses = one.losses, .grad_norms = one.grad_norms, .validation_losses = {}}, "SFT, FSDP");
  std::cout << "SFT, FSDP on 2 ranks vs 1: largest relative loss difference " << worst << "\n";
  EXPECT_NE(log.find("FSDP"), std::string::npos) << log;
  EXPECT_NE(log.find("objective sft: 400 examples"), std::string::npos) << log;
  // The loss falls: the masked labels leave something to learn.
  EXPECT_LT(two.losses.back(), 0.8 * two.losses.front()) << ::testing::PrintToString(two.losses);
}

TEST(Sft, TensorParallelOnTwoRanksMatchesOneRank) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "compares 2 ranks with 1";
  // Both ranks read the same rows; the loss is vocabulary-parallel over the split logits.
  const OneRankReference want = one_rank_reference(sft({}), "configs/llama3/debug.toml");
  const TrainResult tp = on_all_ranks(sft({local_batch(1), "--parallelism.tensor_parallel_degree=2",
                                           "--parallelism.data_parallel_shard_degree=1"}));
  expect_one_rank_figures(tp, want, "SFT, tensor parallel 2");
}

TEST(Sft, PipelineOnTwoRanksMatchesOneRankOverTheSameMicroBatches) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "compares 2 ranks with 1";
  // Two stages; the batch of 8 rows runs as the schedule's 2 micro-batches of 4, the last stage
  // taking each one's loss.
  const TrainResult one = on_rank_0(sft({local_batch(2)}));
  const TrainResult pp = on_all_ranks(sft({local_batch(1), "--parallelism.pipeline_parallel_degree=2",
                                           "--parallelism.pipeline_parallel_microbatch_size=4",
                                           "--parallelism.data_parallel_shard_degree=1"}));
  if (world.rank() != 0) return;
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  expect_one_rank_figures(pp, {.losses = one.losses, .grad_norms = one.grad_norms, .validation_losses = {}},
                          "SFT, pipeline parallel 2");
}

}  // namespace
}  // namespace titan::train
