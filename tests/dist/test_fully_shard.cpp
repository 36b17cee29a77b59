// FSDP, HSDP and DDP on however many ranks the test runs: the same losses as one rank on the
// same global batch, a 1/N share of the training state per rank, and checkpoints that load on fewer
// ranks than saved them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "titan/autograd/grad_mode.h"
#include "titan/core/rng.h"
#include "titan/core/allocator.h"
#include "titan/dist/process_group.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/llama3/model.h"
#include "titan/ops/loss.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/activation_checkpoint.h"
#include "titan/parallel/fully_shard.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using namespace testing;

struct Layout {
  const char* what;
  int64_t replicate;  // dp_shard takes the rest
  std::vector<std::string> overrides;
  std::string config = "configs/llama3/debug.toml";
  const char* logged = "FSDP";  // what rank 0's log says it runs
  double loss_tolerance = 1e-5;  // relative, per step
};

TEST(FullyShard, LossesMatchOneRankOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to shard";
  std::vector<Layout> layouts = {
      {"FSDP", 1, {}},
      // Every path of the hooks: gradients accumulated over micro-batches (reduced during the
      // last backward only), recomputation inside a gathered block (where every reduction waits
      // for the end of backward), blocks kept gathered from forward to backward.
      {"FSDP, 2 micro-batches", 1, {"--training.local_batch_size=" + std::to_string(kGlobalBatch / n / 2)}},
      {"FSDP, full activation checkpointing, no reshard after forward, 2 micro-batches",
       1,
       {"--activation_checkpoint.mode=full", "--parallelism.fsdp_reshard_after_forward=never",
        "--training.local_batch_size=" + std::to_string(kGlobalBatch / n / 2)}},
      {"DDP, 2 micro-batches",
       n,
       {"--training.local_batch_size=" + std::to_string(kGlobalBatch / n / 2)},
       "configs/llama3/debug.toml",
       "DDP"},
      // Without its balancing terms: the aux loss is a function of each rank's own batch (its
      // mean over ranks is not the global batch's, in titan as in PyTorch), and the expert bias
      // would need every rank's token counts.
      {"FSDP, Qwen 3 MoE", 1, {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0"},
       "configs/qwen3/debug_moe.toml"},
  };
  // bf16 products, gathers and the reduce-scatter in float32 (training.mixed_precision_reduce).
  // The first step agrees to float32's 1e-5; after it, a weight that float32's other order of
  // sums moved across a bf16 rounding boundary rounds to a neighbour 2^-8 away, and the curves
  // part by bf16's rounding, not float32's. A CPU without bf16 instructions refuses bf16.
  if (!kernels::cpu::onednn_bf16_isa().empty())
    layouts.push_back(
        {"FSDP, bf16", 1, {"--training.mixed_precision_param=bfloat16"}, "configs/llama3/debug.toml", "FSDP", 1e-3});
  if (n % 2 == 0 && n > 2) layouts.push_back({"HSDP", 2, {}, "configs/llama3/debug.toml", "HSDP"});
  for (const Layout& layout : layouts) {
    // The reference trains on the same global batch in one micro-batch.
    std::vector<std::string> reference_overrides;
    for (const std::string& o : layout.overrides)
      if (!o.starts_with("--training.local_batch_size")) reference_overrides.push_back(o);
    const OneRankReference want = one_rank_reference(reference_overrides, layout.config);
    ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps)) << layout.what;
    std::vector<std::string> o = {local_batch(n),
                                  "--parallelism.data_parallel_replicate_degree=" + std::to_string(layout.replicate),
                                  "--parallelism.data_parallel_shard_degree=" + std::to_string(n / layout.replicate)};
    o.insert(o.end(), layout.overrides.begin(), layout.overrides.end());
    std::ostringstream log;
    TrainResult all = Trainer(small_config(o, layout.config), log, world).train();
    ASSERT_EQ(all.losses.size(), static_cast<size_t>(kSteps)) << layout.what;
    double worst = 0;
    for (int64_t i = 0; i < kSteps; ++i) {
      worst = std::max(worst, std::abs(all.losses[i] - want.losses[i]) / want.losses[i]);
      const double tol = i == 0 ? 1e-5 : layout.loss_tolerance;
      EXPECT_NEAR(all.losses[i], want.losses[i], tol * want.losses[i]) << layout.what << ", step " << i + 1;
      EXPECT_NEAR(all.grad_norms[i], want.grad_norms[i], 10 * tol * want.grad_norms[i])
          << layout.what << ", step " << i + 1;
    }
    if (world.rank() == 0) {
      std::cout << layout.what << " on " << n << " ranks vs 1: largest relative loss difference over " << kSteps
                << " steps " << worst << "\n";
      EXPECT_NE(log.str().find(layout.logged), std::string::npos) << log.str();
    }
  }
}

// Bytes of the shards, their gradients and the optimizer's moments: what a rank keeps between
// steps.
int64_t training_state_bytes(const std::vector<Tensor>& params, const optim::AdamW& optimizer) {
  int64_t bytes = 0;
  for (const Tensor& p : params) bytes += static_cast<int64_t>(p.nbytes() + (p.grad().defined() ? p.grad().nbytes() : 0));
  for (const auto& [name, t] : optimizer.state_dict())
    if (t.dim() > 0) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

TEST(FullyShard, EachRankKeepsOneNthOfTheTrainingState) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to shard";
  using models::llama3::ModelArgs;
  using models::llama3::Transformer;
  const ModelArgs args = tiny_llama3_args();
  auto step = [](Transformer& model, optim::AdamW& optimizer, parallel::FullyShard* fsdp) {
    Tensor tokens = Tensor::arange(32).reshape({2, 16});
    optimizer.zero_grad();
    ops::cross_entropy(model(tokens), tokens).backward();
    if (fsdp) fsdp->reduce_gradients();
    optimizer.step();
  };
  Generator gen(1);
  Transformer single(args);
  single.init_weights(gen);
  optim::AdamW single_opt(single.named_parameters());
  step(single, single_opt, nullptr);
  const int64_t whole = training_state_bytes(single.parameters(), single_opt);

  Transformer model(args);
  model.init_weights(gen);
  std::vector<nn::Module*> blocks;
  for (const auto& [name, block] : model.layers->named_children()) blocks.push_back(block.get());
  parallel::FullyShard fsdp(model, blocks, world, dist::ProcessGroup::single());
  optim::AdamW optimizer(fsdp.named_shards());
  step(model, optimizer, &fsdp);
  const int64_t mine = training_state_bytes(fsdp.shards(), optimizer);
  const double ratio = static_cast<double>(mine) / static_cast<double>(whole);
  if (world.rank() == 0)
    std::cout << "parameters + gradients + AdamW moments: " << whole << " bytes on one rank, " << mine
              << " on each of " << n << " (" << ratio * n << " x 1/" << n << ")\n";
  EXPECT_NEAR(ratio * n, 1.0, 0.1);
  // Between steps the model's own parameters hold nothing.
  for (const auto& [name, p] : model.named_parameters()) EXPECT_EQ(p.storage()->nbytes(), 0u) << name;
  // And reading one says why it cannot.
  try {
    model.named_parameters()[0].second.data<float>();
    ADD_FAILURE() << "a sharded parameter's data was readable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sharded by FSDP"), std::string::npos) << e.what();
  }
}

// Parameters whose dim 0 is short of the ranks: FSDP2's split would leave most ranks padding,
// so they are split as a grid (parallel/shard_grid.h). The pieces gather to the tensor, and the
// reduced gradients are this rank's boxes of the whole gradient.
class Cubes : public nn::Module {
 public:
  explicit Cubes(Generator& gen) {
    a = register_parameter("a", Tensor::randn({2, 6}, gen));
    b = register_parameter("b", Tensor::randn({3, 5, 7}, gen));
  }
  Tensor operator()(const Tensor& x) {
    return run_forward([&] { return ops::add(ops::sum(ops::mul(ops::mul(a, a), x)), ops::sum(ops::mul(ops::mul(b, b), b))); });
  }
  Tensor a, b;
};

TEST(FullyShard, GridPiecesGatherAndReduceAsTheWholeTensor) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to shard";
  Generator gen(7), same(7);
  Cubes whole(same), model(gen);
  const Tensor x = Tensor::full({2, 6}, 0.5);
  whole(x).backward();
  parallel::FullyShard fsdp(model, {}, world, dist::ProcessGroup::single());
  const Tensor loss = model(x);
  EXPECT_NEAR(loss.item(), whole(x).item(), 1e-4 * std::abs(whole(x).item()));
  loss.backward();
  fsdp.reduce_gradients();
  for (const auto& [name, shard] : fsdp.named_shards()) {
    const parallel::ShardBox box = *fsdp.shard_box(name);
    const Tensor& want = name == "a" ? whole.a : whole.b;
    EXPECT_TRUE(relative_difference(box.valid(shard.detach()).contiguous(), box.of(want).contiguous()) == 0) << name;
    EXPECT_LT(relative_difference(box.valid(shard.grad()).contiguous(), box.of(want.grad()).contiguous()), 1e-6)
        << name;
    // On 4 ranks: a as 2 x 2 pieces; b (35 elements a rank by its rows, 26.25 its share) on its
    // last dim. On 2, b likewise (60 elements, not 70).
    if (n == 4) {
      EXPECT_EQ(shard.sizes(), name == "a" ? Shape({1, 3}) : Shape({3, 5, 2})) << name;
    }
    if (n == 2) {
      EXPECT_EQ(shard.sizes(), name == "a" ? Shape({1, 6}) : Shape({3, 5, 4})) << name;
    }
  }
}

// With activation checkpointing each block's gradients are released as the block below starts
// its backward (autograd::release_leaves); its reduce-scatter starts then, and frees its whole
// gradients once the next one starts, instead of every unit's waiting for the end of backward. So
// backward's peak is well under that of the same step holding every gradient whole until
// reduce_gradients (overlap off), and the gradients are a run's without checkpointing.
TEST(FullyShard, ActivationCheckpointingReducesEachBlocksGradientsDuringBackward) {
  dist::ProcessGroup& world = dist::world();
  // On 2 the gradients' shards, half the model, which both keep, hide much of the difference.
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks or more";
  models::llama3::ModelArgs args = tiny_llama3_args();
  args.n_layers = 8;
  const Tensor tokens = Tensor::arange(32).reshape({2, 16});
  Generator same(1);
  models::llama3::Transformer plain(args);
  plain.init_weights(same);
  ops::cross_entropy(plain(tokens), tokens).backward();
  auto backward_peak = [&](bool overlap) {
    Generator gen(1);
    models::llama3::Transformer model(args);
    model.init_weights(gen);
    parallel::apply_activation_checkpointing(*model.layers, parallel::ActivationCheckpointMode::full);
    std::vector<nn::Module*> blocks;
    for (const auto& [name, block] : model.layers->named_children()) blocks.push_back(block.get());
    parallel::FullyShard fsdp(model, blocks, world, dist::ProcessGroup::single(), {.overlap = overlap});
    CpuAllocator::instance().reset_peak();
    const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
    ops::cross_entropy(model(tokens), tokens).backward();
    const int64_t peak = CpuAllocator::instance().stats().peak_allocated_bytes - before;
    fsdp.reduce_gradients();
    const auto want = plain.named_parameters();
    const auto got = fsdp.named_shards();
    for (size_t i = 0; i < want.size(); ++i) {
      const parallel::ShardBox box = *fsdp.shard_box(got[i].first);
      EXPECT_LT(relative_difference(box.valid(got[i].second.grad()).contiguous(),
                                    box.of(want[i].second.grad()).contiguous()),
                1e-5)
          << got[i].first;
    }
    return static_cast<double>(peak);
  };
  const double released = backward_peak(true), held = backward_peak(false);
  if (world.rank() == 0)
    std::cout << "FSDP + full activation checkpointing, 8 blocks on " << world.size() << " ranks: backward's peak "
              << released << " bytes, " << held << " with every gradient held whole\n";
  EXPECT_LT(released, 0.8 * held);
}

TEST(FullyShard, CheckpointSavedOnAllRanksLoadsOnFewer) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to shard";
  const fs::path shared = job_dir(0) / "fsdp_reshard";
  if (world.rank() == 0) fs::remove_all(shared);
  world.barrier().wait();
  auto config = [&](int64_t ranks, int64_t steps, const fs::path& dump) {
    return small_config({local_batch(ranks), "--training.steps=" + std::to_string(steps),
                         "--job.dump_folder=" + dump.string(), "--checkpoint.enable=true",
                         "--checkpoint.interval=3", "--checkpoint.last_save_model_only=false"});
  };
  std::ostringstream log;
  TrainResult straight = Trainer(config(n, 4, shared / "straight"), log, world).train();
  Trainer(config(n, 3, shared / "saved"), log, world).train();
  const fs::path saved = shared / "saved" / "checkpoint" / "step-3";
  ASSERT_TRUE(fs::exists(saved / ("shard-00001-of-0000" + std::to_string(n) + ".safetensors")))
      << "every rank writes its own shard file";
  for (int m = n / 2; m >= 1; m /= 2) {
    // Ranks [0, m) resume from a copy of the checkpoint, as a job of m ranks.
    const fs::path dump = shared / ("on" + std::to_string(m));
    if (world.rank() == 0) {
      fs::create_directories(dump / "checkpoint");
      fs::copy(saved, dump / "checkpoint" / "step-3", fs::copy_options::recursive);
    }
    world.barrier().wait();
    dist::ProcessGroup fewer = world.split(world.rank() < m ? 0 : 1, world.rank(), "fewer");
    if (world.rank() < m) {
      std::ostringstream resumed_log;
      TrainResult resumed = Trainer(config(m, 4, dump), resumed_log, fewer).train();
      EXPECT_EQ(resumed.resumed_from, 3) << resumed_log.str();
      ASSERT_EQ(resumed.losses.size(), 1u);
      EXPECT_NEAR(resumed.losses[0], straight.losses[3], 1e-5 * straight.losses[3])
          << "step 4 on " << m << " ranks after a save on " << n;
      if (world.rank() == 0)
        std::cout << "saved on " << n << " ranks, step 4 on " << m << ": loss " << resumed.losses[0] << " vs "
                  << straight.losses[3] << " uninterrupted\n";
    }
    world.barrier().wait();
  }
}

}  // namespace
}  // namespace titan::train

namespace titan::train {
namespace {

using namespace testing;

// FSDP over 3 ranks, which divide neither the MoE debug model's widths nor its 8 experts (shards
// padded, experts split as grids): the losses of one rank on the same global batch, and
// checkpoints that resume across 3 -> 2 and 2 -> 3 ranks. Rank 0, in every group, compares.
TEST(FullyShard, UnevenShardsOnThreeRanksMatchOneRankAndResumeAcrossTwo) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks, for groups of 3 and of 2";
  const std::string config = "configs/qwen3/debug_moe.toml";
  // The balancing terms see each rank's own batch (see LossesMatchOneRankOnTheSameGlobalBatch).
  auto on = [](int ranks) {
    return std::vector<std::string>{"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0",
                                    "--training.global_batch_size=6",
                                    "--training.local_batch_size=" + std::to_string(6 / ranks),
                                    "--parallelism.data_parallel_shard_degree=" + std::to_string(ranks)};
  };
  dist::ProcessGroup three = world.split(world.rank() < 3 ? 0 : 1, world.rank(), "three");
  dist::ProcessGroup two = world.split(world.rank() < 2 ? 0 : 1, world.rank(), "two");
  const ResumeAcrossLayouts c("uneven_shards");
  c.fresh();
  const TrainResult one = c.one_rank(on(1), config);
  auto expect_one_rank = [&](const TrainResult& r, size_t first, const std::string& what) {
    if (world.rank() != 0) return;
    ASSERT_EQ(r.losses.size() + first, one.losses.size()) << what;
    for (size_t i = 0; i < r.losses.size(); ++i)
      EXPECT_NEAR(r.losses[i], one.losses[first + i], 1e-5 * one.losses[first + i]) << what << ", step " << first + i + 1;
  };
  for (const auto& [saver, resumer] : {std::pair{3, 2}, std::pair{2, 3}}) {
    dist::ProcessGroup& saving = saver == 3 ? three : two;
    dist::ProcessGroup& resuming = resumer == 3 ? three : two;
    std::ostringstream log;
    if (world.rank() < saver) {
      const TrainResult r = Trainer(small_config(join(on(saver), c.save), config), log, saving).train();
      expect_one_rank(r, 0, "FSDP over " + std::to_string(saver) + " ranks");
      if (world.rank() == 0) {
        EXPECT_NE(log.str().find("FSDP"), std::string::npos) << log.str();
      }
    }
    world.barrier().wait();
    if (world.rank() < resumer) {
      const TrainResult r = Trainer(small_config(join(on(resumer), c.resume), config), log, resuming).train();
      EXPECT_EQ(r.resumed_from, 5);
      expect_one_rank(r, 5, "saved on " + std::to_string(saver) + " ranks, resumed on " + std::to_string(resumer));
    }
    c.fresh();
  }
}

}  // namespace
}  // namespace titan::train
