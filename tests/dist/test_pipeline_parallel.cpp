// Pipeline parallelism under every schedule, alone and with data and tensor parallelism, on
// however many ranks the test runs: the same losses and gradients as one rank on the same global
// batch; checkpoints saved under one layout resume under another; a Hugging Face export gathers
// every stage's weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/dist/process_group.h"
#include "titan/models/registry.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using namespace testing;

struct PpLayout {
  std::string what;
  int64_t pp = 2;
  std::string schedule = "1F1B";
  std::vector<std::string> overrides = {};  // model and batch keys, which the one-rank reference shares
  std::vector<std::string> parallel = {};   // other [parallelism] keys (tp, dp_replicate)
  int64_t tp = 1;
  std::string config = "configs/llama3/debug.toml";
  int64_t ep = 1;
};

std::vector<std::string> layout_overrides(const PpLayout& l, int n) {
  // Data- and expert-parallel ranks read batches of their own.
  const int64_t batch_ranks = n / l.pp / l.tp;
  std::vector<std::string> o = {local_batch(batch_ranks),
                                "--parallelism.pipeline_parallel_degree=" + std::to_string(l.pp),
                                "--parallelism.pipeline_parallel_schedule=" + l.schedule,
                                "--parallelism.tensor_parallel_degree=" + std::to_string(l.tp),
                                "--parallelism.expert_parallel_degree=" + std::to_string(l.ep)};
  o = join(o, l.overrides);
  return join(o, l.parallel);
}

void expect_one_rank_losses(const std::vector<PpLayout>& layouts) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  for (const PpLayout& layout : layouts) {
    const OneRankReference want = one_rank_reference(layout.overrides, layout.config);
    ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps)) << layout.what;
    std::ostringstream log;
    TrainResult all = Trainer(small_config(layout_overrides(layout, n), layout.config), log, world).train();
    const double worst = expect_one_rank_figures(all, want, layout.what);
    if (world.rank() == 0) {
      std::cout << layout.what << " on " << n << " ranks vs 1: largest relative loss difference over " << kSteps
                << " steps " << worst << "\n";
      EXPECT_NE(log.str().find("pipeline parallel over " + std::to_string(layout.pp) + " ranks"), std::string::npos)
          << log.str();
    }
  }
}

const std::vector<std::string> kSchedules = {"GPipe", "1F1B", "Interleaved1F1B", "ZBH1", "ZBVZeroBubble"};

TEST(PipelineParallel, LossesMatchOneRankOnTheSameGlobalBatch) {
  const int n = dist::world().size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  // Micro-batches of one sequence: 8 per step at 1 rank of data parallelism, 4 at 2.
  const std::string one_sequence = "--parallelism.pipeline_parallel_microbatch_size=1";
  std::vector<PpLayout> layouts;
  if (n == 2) {
    for (const std::string& schedule : kSchedules)
      layouts.push_back({"PP 2, " + schedule, 2, schedule, {}, {one_sequence}});
    layouts.push_back({"PP 2, 1F1B, full activation checkpointing, 2 micro-batches of 2 per local batch, "
                       "gradient accumulation over 2 local batches",
                       2,
                       "1F1B",
                       {"--activation_checkpoint.mode=full", "--training.local_batch_size=4"},
                       {"--parallelism.pipeline_parallel_microbatch_size=2"}});
    layouts.push_back({"PP 2, Interleaved1F1B at split points layers.1,layers.2,layers.4",
                       2,
                       "Interleaved1F1B",
                       {},
                       {one_sequence, "--parallelism.pipeline_parallel_split_points=layers.1,layers.2,layers.4"}});
    // The bias follows every stage's token counts, which a pipeline splits by micro-batch and
    // one rank counts whole: the same. The auxiliary loss is each micro-batch's own.
    layouts.push_back({"PP 2, ZBH1, Qwen 3 MoE with the expert bias",
                       2,
                       "ZBH1",
                       {"--moe.load_balance_bias=true", "--moe.aux_loss_coeff=0"},
                       {one_sequence},
                       1,
                       "configs/qwen3/debug_moe.toml"});
  }
  if (n == 4) {
    for (const std::string& schedule : kSchedules)
      layouts.push_back({"PP 4, " + schedule + ", 8 layers", 4, schedule, {"--model.n_layers=8"}, {one_sequence}});
    layouts.push_back({"PP 2 x FSDP 2, 1F1B", 2, "1F1B", {}, {one_sequence}});
    layouts.push_back({"PP 2 x DDP 2, ZBH1", 2, "ZBH1", {}, {one_sequence, "--parallelism.data_parallel_replicate_degree=2"}});
    layouts.push_back({"PP 2 x TP 2, Interleaved1F1B", 2, "Interleaved1F1B", {}, {one_sequence}, 2});
    // ep borrows dp_shard's ranks, so FSDP runs, which the zero-bubble schedules refuse.
    layouts.push_back({"PP 2 x EP 2 (within dp_shard 2), 1F1B, Qwen 3 MoE with the expert bias",
                       2,
                       "1F1B",
                       {"--moe.load_balance_bias=true", "--moe.aux_loss_coeff=0"},
                       {one_sequence},
                       1,
                       "configs/qwen3/debug_moe.toml",
                       2});
  }
  expect_one_rank_losses(layouts);
}

// After one step the AdamW first moments, (1 - beta1) times the clipped gradients, of every
// parameter equal one rank's: the gradients of every stage are right, not only the loss.
TEST(PipelineParallel, GradientsEqualOneRanksAfterOneStep) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const fs::path dir = job_dir(0) / "pp_gradients";
  auto ckpt = [&](const std::string& name) {
    return std::vector<std::string>{"--checkpoint.enable=true", "--checkpoint.folder=" + (dir / name).string(),
                                    "--checkpoint.keep_latest_k=0", "--checkpoint.last_save_model_only=false",
                                    "--training.steps=1", "--lr_scheduler.warmup_steps=0",
                                    // Deep enough for ZBV's two stages per rank on 4 ranks.
                                    "--model.n_layers=8"};
  };
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier().wait();
  if (world.rank() == 0) {
    std::ostringstream log;
    Trainer(small_config(join({local_batch(1)}, ckpt("one"))), log, dist::ProcessGroup::single()).train();
  }
  world.barrier().wait();
  for (const std::string& schedule : {std::string("1F1B"), std::string("ZBVZeroBubble")}) {
    std::ostringstream log;
    const PpLayout layout{"PP " + std::to_string(n), n, schedule, {}, {"--parallelism.pipeline_parallel_microbatch_size=1"}};
    Trainer(small_config(join(layout_overrides(layout, n), ckpt(schedule))), log, world).train();
    world.barrier().wait();
    if (world.rank() != 0) continue;
    checkpoint::Reader one(dir / "one" / "step-1"), pp(dir / schedule / "step-1");
    checkpoint::Pieces a, b;
    for (const auto& [name, info] : one.metadata().tensors) {
      a.emplace(name, checkpoint::whole(Tensor::zeros(info.shape, {.dtype = info.dtype})));
      b.emplace(name, checkpoint::whole(Tensor::zeros(info.shape, {.dtype = info.dtype})));
    }
    one.load(a);
    pp.load(b);
    int64_t compared = 0;
    for (const auto& [name, piece] : a) {
      if (!name.ends_with(".exp_avg")) continue;
      EXPECT_LE(relative_difference(piece.data, b.at(name).data), 1e-4) << schedule << ": " << name;
      ++compared;
    }
    EXPECT_GT(compared, 10) << "no first moments compared";
  }
  world.barrier().wait();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST(PipelineParallel, CheckpointsResumeAcrossLayouts) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const ResumeAcrossLayouts c("pp_checkpoints");
  const std::string config = "configs/llama3/debug.toml";
  const OneRankReference want = one_rank_reference({}, config);
  auto layout_run = [&](const PpLayout& layout, const std::vector<std::string>& o) {
    std::ostringstream log;
    return Trainer(small_config(join(layout_overrides(layout, n), o)), log, world).train();
  };
  const PpLayout one_f_one_b{"PP 2, 1F1B", 2, "1F1B"}, interleaved{"PP 2, Interleaved1F1B", 2, "Interleaved1F1B"};
  c.fresh();
  layout_run(one_f_one_b, c.save);
  const TrainResult on_one = c.one_rank(c.resume, config);
  if (world.rank() == 0) c.expect_second_half(on_one, want, "saved under PP 2 (1F1B), resumed on one rank");
  c.fresh();
  c.one_rank(c.save, config);
  c.expect_second_half(layout_run(one_f_one_b, c.resume), want, "saved on one rank, resumed under PP 2");
  c.fresh();
  layout_run(one_f_one_b, c.save);
  c.expect_second_half(layout_run(interleaved, c.resume), want,
                       "saved under PP 2 (1F1B, 2 stages), resumed under Interleaved1F1B (4 stages)");
  c.fresh();
}

// The final Hugging Face export of a pipeline run holds every stage's weights, as one rank trains
// them: Llama 3 over all ranks, and on 4 ranks Qwen 3 MoE under PP 2 x EP 2 (experts gathered over
// ep, stages over pp).
TEST(PipelineParallel, HuggingFaceExportGathersTheStages) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const fs::path root = job_dir(0) / "pp_hf";
  auto hf = [&](const fs::path& folder) {
    return std::vector<std::string>{"--checkpoint.enable=true", "--checkpoint.folder=" + folder.string(),
                                    "--checkpoint.interval=100", "--checkpoint.keep_latest_k=0",
                                    "--checkpoint.last_save_in_hf=true"};
  };
  std::vector<PpLayout> layouts = {{"PP " + std::to_string(n) + ", Llama 3", n, "1F1B"}};
  // The bias follows token counts that one rank and the layout add up in different orders of
  // micro-batches; without it and the auxiliary loss the runs differ by rounding only.
  const std::vector<std::string> moe = {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0"};
  if (n == 4) layouts.push_back({"PP 2 x EP 2, Qwen 3 MoE", 2, "1F1B", moe, {}, 1, "configs/qwen3/debug_moe.toml", 2});
  for (const PpLayout& layout : layouts) {
    if (world.rank() == 0) fs::remove_all(root);
    world.barrier().wait();
    if (world.rank() == 0) {
      std::ostringstream log;
      Trainer(small_config(join(join({local_batch(1)}, layout.overrides), hf(root / "one")), layout.config), log,
              dist::ProcessGroup::single())
          .train();
    }
    world.barrier().wait();
    {
      std::ostringstream log;
      Trainer(small_config(join(layout_overrides(layout, n), hf(root / "pp")), layout.config), log, world).train();
    }
    world.barrier().wait();
    if (world.rank() == 0) {
      checkpoint::HfReader one(root / "one" / "step-10"), pp(root / "pp" / "step-10");
      const std::string family = layout.ep > 1 ? "qwen3_moe" : "llama3";
      const auto shapes = models::get_train_spec(family).state_dict_adapter->hf_shapes(one.config());
      const auto a = one.load(shapes, kF32), b = pp.load(shapes, kF32);
      // Ten AdamW steps turn float32's other order of the micro-batches' gradient sums into up to
      // about 1e-4 of a weight's scale; a tensor from the wrong stage or expert would be off by its
      // whole scale.
      for (const auto& [name, t] : a)
        EXPECT_LE(relative_difference(t, b.at(name)), 1e-3) << layout.what << ": " << name;
    }
    world.barrier().wait();
  }
  if (world.rank() == 0) fs::remove_all(root);
}

TEST(PipelineParallel, LayoutsThatDoNotSplitAreRefusedBeforeBuilding) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "pp needs ranks";
  auto message = [&](const std::vector<std::string>& o, const std::string& config = "configs/llama3/debug.toml") {
    return error_of([&] {
      std::ostringstream log;
      Trainer(small_config(join(layout_overrides({"PP", n, "1F1B"}, n), o), config), log, world);
    });
  };
  EXPECT_NE(message({"--parallelism.pipeline_parallel_split_points=layers.3,layers.2"}).find("split_points"),
            std::string::npos);
  EXPECT_NE(message({"--parallelism.pipeline_parallel_split_points=layers.9"}).find("split_points"), std::string::npos);
  EXPECT_NE(message({"--model.n_layers=1"}).find("layers"), std::string::npos);
  EXPECT_NE(message({"--parallelism.context_parallel_degree=" + std::to_string(n)}).find("context_parallel_degree"),
            std::string::npos);
  EXPECT_NE(message({"--validation.enable=true", "--validation.seq_len=32"}).find("validation.enable"), std::string::npos);
  EXPECT_NE(message({"--model.weight_tying=true"}, "configs/qwen3/debug.toml").find("tie_embeddings"),
            std::string::npos);
}

}  // namespace
}  // namespace titan::train
