// Validation over data-parallel ranks: each rank reads its slice of every validation batch and
// the loss is averaged over the tokens of all ranks, so FSDP and DDP give one rank's figure on the
// same global batches; and training after each pass goes on as on one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "titan/dist/process_group.h"
#include "titan/models/llama3/model.h"
#include "titan/parallel/fully_shard.h"
#include "titan/train/trainer.h"
#include "titan/train/validator.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

using namespace testing;

// Two validation batches of kGlobalBatch windows over all ranks, after steps 5 and 10, on the
// training text.
std::vector<std::string> validation(int64_t ranks) {
  return {"--validation.enable",
          "--validation.freq=5",
          "--validation.steps=2",
          "--validation.seq_len=32",
          "--validation.local_batch_size=" + std::to_string(kGlobalBatch / ranks),
          "--validation.dataset_path=" + (job_dir(dist::world().rank()) / "corpus.txt").string()};
}

TEST(Validation, LossUnderFsdpAndDdpEqualsOneRanksAndTrainingGoesOnAsOnOneRank) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  struct Layout {
    const char* what;
    int64_t replicate;  // dp_shard takes the rest
    std::vector<std::string> overrides;
  };
  // Blocks kept gathered from forward to backward, and checkpointed: in validation there is no
  // backward to free or recompute them.
  const std::vector<Layout> layouts = {
      {"FSDP", 1, {}},
      {"FSDP, no reshard after forward, full activation checkpointing",
       1,
       {"--parallelism.fsdp_reshard_after_forward=never", "--activation_checkpoint.mode=full"}},
      {"DDP", n, {}},
  };
  for (const Layout& layout : layouts) {
    std::vector<std::string> reference = validation(1);
    reference.insert(reference.end(), layout.overrides.begin(), layout.overrides.end());
    const OneRankReference want = one_rank_reference(reference, "configs/llama3/debug.toml");
    ASSERT_EQ(want.validation_losses.size(), 2u) << layout.what;

    std::vector<std::string> o = validation(n);
    o.insert(o.end(), {local_batch(n),
                       "--parallelism.data_parallel_replicate_degree=" + std::to_string(layout.replicate),
                       "--parallelism.data_parallel_shard_degree=" + std::to_string(n / layout.replicate)});
    o.insert(o.end(), layout.overrides.begin(), layout.overrides.end());
    std::ostringstream log;
    const TrainResult all = Trainer(small_config(o), log, world).train();

    ASSERT_EQ(all.validations.size(), 2u) << layout.what;
    double worst = 0;
    for (size_t i = 0; i < all.validations.size(); ++i) {
      const ValidationMetrics& v = all.validations[i];
      EXPECT_EQ(v.step, 5 * static_cast<int64_t>(i + 1)) << layout.what;
      EXPECT_EQ(v.tokens, 2 * kGlobalBatch * 32) << layout.what;
      worst = std::max(worst, std::abs(v.loss - want.validation_losses[i]) / want.validation_losses[i]);
      EXPECT_NEAR(v.loss, want.validation_losses[i], 1e-5 * want.validation_losses[i])
          << layout.what << ", validation after step " << v.step;
      // Every rank reports the global figure.
      EXPECT_EQ(world.all_reduce(v.loss, dist::ReduceOp::max), v.loss) << layout.what;
    }
    ASSERT_EQ(all.losses.size(), want.losses.size()) << layout.what;
    for (size_t i = 0; i < all.losses.size(); ++i)
      EXPECT_NEAR(all.losses[i], want.losses[i], 1e-5 * want.losses[i]) << layout.what << ", step " << i + 1;
    if (world.rank() == 0)
      std::cout << layout.what << " on " << n << " ranks vs 1: largest relative validation loss difference "
                << worst << "\n";
  }
}

// Without a backward to follow, FSDP's forward hooks still gather each unit for its forward and
// free it after, and the validator frees the root unit that training frees after backward: after
// a pass the model's own parameters hold nothing, whether blocks are resharded after forward or
// kept (they would be freed by the backward that never comes).
TEST(Validation, UnderFsdpEveryGatheredParameterIsFreedAfterThePass) {
  dist::ProcessGroup& world = dist::world();
  const int64_t n = world.size();
  const models::llama3::ModelArgs args = tiny_llama3_args();
  std::vector<int32_t> ids(600);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 % 96);
  const ValidationConfig cfg{.enable = true, .local_batch_size = 2, .seq_len = 16, .steps = 2};
  ValidationConfig whole = cfg;
  whole.local_batch_size = 2 * n;

  Generator gen(1);
  models::llama3::Transformer single(args);
  single.init_weights(gen);
  const double want =
      Validator(whole, data::TokenStream(ids), -1, dist::ProcessGroup::single()).validate(0, single).loss;

  for (bool reshard_after_forward : {true, false}) {
    Generator same(1);
    models::llama3::Transformer model(args);
    model.init_weights(same);
    std::vector<nn::Module*> blocks;
    for (const auto& [name, block] : model.layers->named_children()) blocks.push_back(block.get());
    parallel::FullyShard fsdp(model, blocks, world, dist::ProcessGroup::single(),
                              {.reshard_after_forward = reshard_after_forward});
    Validator validator(cfg, data::TokenStream(ids), -1, world);
    for (int pass = 0; pass < 2; ++pass) {
      const ValidationMetrics got = validator.validate(0, model, &fsdp);
      EXPECT_NEAR(got.loss, want, 1e-6 * want) << "reshard_after_forward " << reshard_after_forward;
      for (const auto& [name, p] : model.named_parameters())
        EXPECT_EQ(p.storage()->nbytes(), 0u) << name << ", reshard_after_forward " << reshard_after_forward;
    }
  }
}

}  // namespace
}  // namespace titan::train
