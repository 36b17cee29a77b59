// FLUX training with the frozen encoders run every step, FSDP over the world's ranks (the
// transformer's weights and the encoders' sharded over dp_shard, each gathered block by block),
// takes the steps one rank takes on the same
// global batch, validation included.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>
#include <sstream>

#include "support/flux_live_pipeline.h"
#include "support/paths.h"
#include "titan/core/autocast.h"
#include "titan/dist/process_group.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/train/flux/conditioning.h"
#include "titan/train/flux/conditioning_memory.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

TEST(FluxLive, ShardedEncodersOverTheRanksTakeOneRanksSteps) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const fs::path dir = testing::job_dir(0) / "flux_live";
  double made = 0;  // rank 0 makes the data and the pipeline
  if (world.rank() == 0) {
    fs::remove_all(dir);
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                            "/scripts/make_shapes.py' make --count 12 --out '" + (dir / "data").string() + "' > /dev/null";
    made = std::system(cmd.c_str()) == 0 && !test::flux_live_pipeline().empty() ? 1 : 0;
  }
  made = world.all_reduce(made, dist::ReduceOp::sum);
  ASSERT_EQ(made, 1) << "the reference Python (numpy, Pillow, torch, diffusers) did not run: make deps-test";
  const fs::path pipeline = fs::path(TITAN_PARITY_DIR) / "flux_live" / "pipeline";
  const int64_t global_batch = 4;
  auto config = [&](int ranks, const std::string& out) {
    return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_tiny.toml",
                           {"--flux.cache_path=", "--flux.data_path=" + (dir / "data").string(),
                            "--flux.pipeline_path=" + pipeline.string(), "--flux.image_size=32",
                            "--flux.t5_length=8", "--flux.validation_samples=4", "--validation.enable=true",
                            "--validation.freq=3", "--validation.local_batch_size=1", "--training.steps=3",
                            "--training.local_batch_size=" + std::to_string(global_batch / ranks),
                            "--lr_scheduler.warmup_steps=2", "--checkpoint.enable=false", "--metrics.log_freq=100",
                            "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11", "--optimizer.lr=3e-3",
                            "--job.dump_folder=" + (dir / out).string()});
  };
  const testing::OneRankReference want = testing::one_rank_run(config(1, "one"));

  std::ostringstream log;
  const TrainResult all = Trainer(config(n, "all"), log, world).train();
  if (world.rank() == 0) {
    EXPECT_NE(log.str().find("the encoders FSDP-sharded over the " + std::to_string(n) + " dp_shard ranks"),
              std::string::npos)
        << log.str();
    EXPECT_NE(log.str().find("+ frozen models "), std::string::npos) << "the memory plan leaves the encoders out";
  }
  const double worst = std::max(testing::expect_one_rank_figures(all, want, "flux-tiny, encoders every step, FSDP"),
                                testing::expect_one_rank_validation(all, want, "flux-tiny, encoders every step, FSDP"));
  if (world.rank() == 0)
    std::cout << "flux-tiny, encoders every step, FSDP on " << n << " ranks vs 1: largest relative loss difference "
              << worst << "\n";
}

// Sharded T5, CLIP and the autoencoder's encoder hold a block whole only while it runs (and the
// next, prefetched): when block i starts, blocks before it are freed again, and after the call
// nothing is gathered. The encodings are the unsharded encoders', and the memory plan's figures
// (conditioning_memory.h) are what the encoders hold and gather.
TEST(FluxLive, ShardedEncodersGatherBlockByBlock) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "one rank has nothing to split";
  double made = world.rank() == 0 && !test::flux_live_pipeline().empty() ? 1 : 0;
  made = world.all_reduce(made, dist::ReduceOp::sum);
  ASSERT_EQ(made, 1) << "the reference Python (numpy, Pillow, torch, diffusers) did not run: make deps-test";
  const flux::ConditioningPaths paths =
      flux::ConditioningPaths::of_pipeline(fs::path(TITAN_PARITY_DIR) / "flux_live" / "pipeline");
  const std::vector<std::string> captions = {"a red circle at the top left", "a blue square"};
  flux::ConditioningStack whole(paths, 8);
  const std::map<std::string, Tensor> want = whole.encode_text(captions);
  Generator gen(5);
  const Tensor images = Tensor::rand({2, 3, 32, 32}, gen, {}, -1.0, 1.0);
  const std::map<std::string, Tensor> want_latents = whole.encode_images(images);

  flux::ConditioningStack sharded(paths, 8);
  sharded.shard(world, dist::ProcessGroup::single());
  auto gathered_bytes = [](nn::Module& m) {
    int64_t bytes = 0;
    for (const auto& [name, p] : m.named_parameters()) bytes += static_cast<int64_t>(p.impl()->storage->nbytes());
    return bytes;
  };
  auto gathered = [&](nn::Module& m) { return gathered_bytes(m) > 0; };
  std::vector<std::string> held_too_long;
  int64_t most_gathered = 0;
  nn::Module& image_encoder = *sharded.autoencoder().encoder;
  for (const std::vector<nn::Module*>& blocks :
       {flux::block_units(*sharded.t5().layers), flux::block_units(*sharded.clip().layers), sharded.autoencoder().encoder->blocks()}) {
    ASSERT_GE(blocks.size(), 2u);
    for (size_t i = 0; i < blocks.size(); ++i)
      blocks[i]->register_forward_pre_hook([&, blocks, i](nn::Module&) {
        // Block i is gathered now (FSDP's hook ran first), the next one on its way.
        most_gathered = std::max({most_gathered, gathered_bytes(sharded.t5()), gathered_bytes(sharded.clip()),
                                  gathered_bytes(image_encoder)});
        for (size_t j = 0; j < i; ++j)
          if (gathered(*blocks[j]))
            held_too_long.push_back("block " + std::to_string(j) + " when block " + std::to_string(i) + " starts");
      });
  }
  // The memory plan's figures for these encoders (reckoned from their configs): what this rank
  // keeps is its shards, and what it gathers covers the root unit and two blocks of each.
  const flux::EncoderBatch batch{.rows = 2, .image_size = 32, .t5_length = 8};
  const FrozenBytes planned = flux::conditioning_memory(paths, world.size(), false, batch);
  EXPECT_EQ(planned.kept, sharded.weight_bytes());
  const FrozenBytes unsharded = flux::conditioning_memory(paths, 1, false, batch);
  EXPECT_EQ(unsharded.kept, whole.weight_bytes());
  EXPECT_EQ(unsharded.gathered, 0);
  if (!kernels::cpu::onednn_bf16_isa().empty()) {
    // Whole and under bf16, the stack keeps its products' bf16 copies of the text encoders' weights.
    const AutocastGuard bf16(kBF16);
    (void)whole.encode_text(captions);
    EXPECT_EQ(flux::conditioning_memory(paths, 1, true, batch).kept, whole.weight_bytes());
  }
  const std::map<std::string, Tensor> got = sharded.encode_text(captions);
  const std::map<std::string, Tensor> got_latents = sharded.encode_images(images);
  EXPECT_GT(most_gathered, 0);
  // The plan's figures are the encoder's whose weights and activations together are the most.
  EXPECT_LE(most_gathered, planned.gathered + planned.activations);
  EXPECT_TRUE(held_too_long.empty()) << held_too_long.front();
  EXPECT_FALSE(gathered(sharded.t5())) << "T5 left gathered after the call";
  EXPECT_FALSE(gathered(sharded.clip())) << "CLIP left gathered after the call";
  EXPECT_FALSE(gathered(sharded.autoencoder())) << "the autoencoder left gathered after the call";
  for (const char* key : {"t5", "clip_pooled"})
    EXPECT_EQ(testing::relative_difference(got.at(key), want.at(key)), 0.0) << key;
  for (const char* key : {"latent_mean", "latent_logvar"})
    EXPECT_EQ(testing::relative_difference(got_latents.at(key), want_latents.at(key)), 0.0) << key;
}

}  // namespace
}  // namespace titan::train
