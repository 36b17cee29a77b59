// Expert parallelism on however many ranks the test runs: the all-to-all dispatcher computes what
// one rank holding every expert computes, forward and backward; training under EP (alone, with
// FSDP, with DDP) has one rank's losses on the same global batch; the expert bias follows the
// global token counts; the Hugging Face export gathers the experts; checkpoints saved under one
// EP layout resume under another; layouts that cannot split are refused before anything is built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/dist/process_group.h"
#include "titan/models/registry.h"
#include "titan/autograd/grad_mode.h"
#include "titan/nn/moe/experts.h"
#include "titan/nn/moe/moe.h"
#include "titan/nn/moe/token_dispatcher.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/parallel/comm_ops.h"
#include "titan/parallel/expert_parallel.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using namespace testing;

constexpr const char* kMoeConfig = "configs/qwen3/debug_moe.toml";

// max |a - b| over max |b|: the error relative to the tensor's scale.
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::abs(y[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::randn(shape, gen);
}

// Each rank routes its own tokens to two of the `allowed` experts, unevenly.
Tensor routing_ids(int64_t tokens, int rank, const std::vector<int64_t>& allowed) {
  const int64_t n = static_cast<int64_t>(allowed.size());
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t a = (t * t + 3 * rank) % n, b = (a + 1 + t % 3) % n;
    ids.push_back(allowed[static_cast<size_t>(a)]);
    ids.push_back(allowed[static_cast<size_t>(b)]);
  }
  return Tensor::from_vector(ids, {tokens, 2});
}

constexpr int64_t kExperts = 8;

// The forward outputs and the gradients of the tokens, the routing weights and the experts, routed
// to the `allowed` experts, against LocalTokenDispatcher with every expert on each rank.
void expect_dispatch_matches_local(const std::vector<int64_t>& allowed, int64_t empty_expert) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size(), rank = world.rank();
  constexpr int64_t kDim = 16, kHidden = 8, kTokens = 12;
  const int64_t local = kExperts / n;
  Generator init(7);
  nn::moe::GroupedExperts all(kExperts, kDim, kHidden, 0.05);
  all.init_weights(init);
  nn::moe::GroupedExperts mine(local, kDim, kHidden, 0.05);
  {
    autograd::NoGradGuard no_grad;
    mine.w1.copy_(all.w1.narrow(0, rank * local, local));
    mine.w2.copy_(all.w2.narrow(0, rank * local, local));
    mine.w3.copy_(all.w3.narrow(0, rank * local, local));
  }
  const Tensor x0 = random_tensor({kTokens, kDim}, 100 + rank);
  const Tensor w0 = random_tensor({kTokens, 2}, 200 + rank);
  const Tensor out_grad = random_tensor({kTokens, kDim}, 300 + rank);
  const Tensor ids = routing_ids(kTokens, rank, allowed);

  auto run = [&](nn::moe::TokenDispatcher& dispatcher, nn::moe::GroupedExperts& experts) {
    Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    nn::moe::TokenDispatcher::Dispatched d = dispatcher.dispatch(x, ids, kExperts);
    Tensor out = dispatcher.combine(experts(d.rows, d.rows_per_expert), w, d);
    ops::sum(out * out_grad).backward();
    return std::tuple{out, x.grad(), w.grad(), d.rows_per_expert.host};
  };
  nn::moe::LocalTokenDispatcher local_dispatcher;
  const auto [want_out, want_dx, want_dw, want_counts] = run(local_dispatcher, all);
  parallel::AllToAllTokenDispatcher ep_dispatcher(world, local);
  const auto [out, dx, dw, counts] = run(ep_dispatcher, mine);

  // Not a comparison of zeros.
  ASSERT_GT(relative_error(want_out, Tensor::zeros(want_out.sizes())), 0.0);
  ASSERT_GT(relative_error(all.w1.grad(), Tensor::zeros(all.w1.sizes())), 0.0);
  EXPECT_LE(relative_error(out, want_out), 1e-6);
  EXPECT_LE(relative_error(dx, want_dx), 1e-6);
  EXPECT_LE(relative_error(dw, want_dw), 1e-6);
  // This rank's experts got every rank's tokens for them, and their gradients sum every rank's.
  Tensor global_counts = Tensor::from_vector(want_counts, {kExperts});
  world.all_reduce(global_counts, dist::ReduceOp::sum).wait();
  for (int64_t e = 0; e < local; ++e)
    EXPECT_EQ(counts[static_cast<size_t>(e)], global_counts.to_vector<int64_t>()[rank * local + e]) << e;
  if (rank * local <= empty_expert && empty_expert < (rank + 1) * local) {
    EXPECT_EQ(counts[static_cast<size_t>(empty_expert - rank * local)], 0) << "no rank routes there";
  }
  for (auto [whole, slice, name] :
       {std::tuple{all.w1, mine.w1, "w1"}, {all.w2, mine.w2, "w2"}, {all.w3, mine.w3, "w3"}}) {
    Tensor summed = whole.grad().contiguous().clone();
    world.all_reduce(summed, dist::ReduceOp::sum).wait();
    EXPECT_LE(relative_error(slice.grad(), summed.narrow(0, rank * local, local)), 1e-6) << name;
  }
}

TEST(ExpertParallel, AllToAllDispatchMatchesOneRankHoldingEveryExpert) {
  const int n = dist::world().size();
  if (n == 1 || kExperts % n != 0) GTEST_SKIP() << "needs 2 or 4 ranks";
  parallel::reset_comm_stats();
  // Uneven, expert 5 gets no token.
  expect_dispatch_matches_local({0, 1, 2, 3, 4, 6, 7}, 5);
  const parallel::CommStats& stats = parallel::comm_stats();
  EXPECT_GT(stats.all_to_all_calls, 0);
  EXPECT_GT(stats.all_to_all_bytes, 0);
  // The last rank's experts get no token at all: it receives no rows and sends none back.
  std::vector<int64_t> allowed;
  for (int64_t e = 0; e < kExperts - kExperts / n; ++e) allowed.push_back(e);
  expect_dispatch_matches_local(allowed, kExperts - 1);
}

struct EpLayout {
  std::string what;
  int64_t ep = 2;
  int64_t replicate = 1;  // dp_shard takes the rest
  std::vector<std::string> overrides = {};
};

// ep borrows from dp_shard (TorchTitan's layout): every rank is a data-parallel rank.
std::vector<std::string> ep_overrides(const EpLayout& l, int n) {
  std::vector<std::string> o = {local_batch(n), "--parallelism.expert_parallel_degree=" + std::to_string(l.ep),
                                "--parallelism.data_parallel_replicate_degree=" + std::to_string(l.replicate),
                                "--parallelism.data_parallel_shard_degree=" + std::to_string(n / l.replicate)};
  o.insert(o.end(), l.overrides.begin(), l.overrides.end());
  return o;
}

std::vector<EpLayout> layouts_for(int n) {
  std::vector<EpLayout> out;
  if (n == 2) {
    out.push_back({"EP 2 x dp_shard 2", 2, 1});
    // Recomputation re-runs the all-to-alls inside backward; the experts' gradients accumulate
    // over micro-batches and are scaled once.
    out.push_back({"EP 2, full activation checkpointing, 2 micro-batches",
                   2,
                   1,
                   {"--activation_checkpoint.mode=full",
                    "--training.local_batch_size=" + std::to_string(kGlobalBatch / 4)}});
  }
  if (n == 4) {
    out.push_back({"EP 4 x dp_shard 4", 4, 1});
    // The experts FSDP-sharded over efsdp 2, the rest over all 4.
    out.push_back({"EP 2 x dp_shard 4", 2, 1});
    out.push_back({"EP 2 x dp_shard 2 x dp_replicate 2 (HSDP)", 2, 2});
  }
  return out;
}

void expect_losses(const TrainResult& got, const std::vector<double>& want_losses,
                   const std::vector<double>& want_norms, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want_losses.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < want_losses.size(); ++i) {
    worst = std::max(worst, std::abs(got.losses[i] - want_losses[i]) / want_losses[i]);
    EXPECT_NEAR(got.losses[i], want_losses[i], 1e-5 * want_losses[i]) << what << ", step " << i + 1;
    if (!want_norms.empty()) {
      EXPECT_NEAR(got.grad_norms[i], want_norms[i], 1e-4 * want_norms[i]) << what << ", step " << i + 1;
    }
  }
  if (dist::world().rank() == 0)
    std::cout << what << " on " << dist::world().size() << " ranks vs 1: largest relative loss difference over "
              << want_losses.size() << " steps " << worst << "\n";
}

// Two validation batches of kGlobalBatch windows over `ranks` ranks, after steps 5 and 10.
std::vector<std::string> validation(int64_t ranks) {
  return {"--validation.enable",
          "--validation.freq=5",
          "--validation.steps=2",
          "--validation.seq_len=32",
          "--validation.local_batch_size=" + std::to_string(kGlobalBatch / ranks),
          "--validation.dataset_path=" + (job_dir(dist::world().rank()) / "corpus.txt").string()};
}

// Without the balancing terms, whose aux loss is a function of each rank's own batch; validation
// splits its batches over the ep ranks too.
TEST(ExpertParallel, LossesMatchOneRankOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  const std::vector<EpLayout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "EP layouts need 2 or 4 ranks";
  const std::vector<std::string> plain = {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0"};
  const OneRankReference want = one_rank_reference(join(plain, validation(1)), kMoeConfig);
  ASSERT_EQ(want.validation_losses.size(), 2u);
  for (const EpLayout& layout : layouts) {
    std::ostringstream log;
    const TrainResult all =
        Trainer(small_config(join(join(ep_overrides(layout, n), plain), validation(n)), kMoeConfig), log, world)
            .train();
    expect_losses(all, want.losses, want.grad_norms, layout.what);
    ASSERT_EQ(all.validations.size(), 2u) << layout.what;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(all.validations[i].tokens, 2 * kGlobalBatch * 32) << layout.what;
      EXPECT_NEAR(all.validations[i].loss, want.validation_losses[i], 1e-5 * want.validation_losses[i])
          << layout.what << ", validation " << i;
    }
    if (world.rank() == 0) {
      EXPECT_NE(log.str().find("expert parallel over " + std::to_string(layout.ep) + " of the dp_shard ranks"),
                std::string::npos)
          << log.str();
    }
  }
}

// With the auxiliary loss and the expert bias on, as debug_moe.toml trains: each rank's aux loss
// is its own micro-batch's, so the reference is one rank accumulating gradients over the same
// micro-batches (rank r's is the r-th); the bias follows the counts of all of them.
TEST(ExpertParallel, WithBalancingMatchesOneRankAccumulatingTheSameMicroBatches) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  const std::vector<EpLayout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "EP layouts need 2 or 4 ranks";
  TrainResult one;
  if (world.rank() == 0) {
    std::ostringstream log;
    one = Trainer(small_config({local_batch(n)}, kMoeConfig), log, dist::ProcessGroup::single()).train();
  }
  for (const EpLayout& layout : layouts) {
    // Smaller micro-batches would be other micro-batches than the reference's.
    if (!layout.overrides.empty()) continue;
    std::ostringstream log;
    const TrainResult all = Trainer(small_config(ep_overrides(layout, n), kMoeConfig), log, world).train();
    if (world.rank() == 0) expect_losses(all, one.losses, {}, layout.what + ", aux loss and expert bias");
  }
}

// The expert bias under data and context parallelism follows the global batch's counts: one
// rank's losses on the whole batch, which the bias changes within these steps.
TEST(ExpertParallel, ExpertBiasFollowsGlobalCountsUnderDataAndContextParallelism) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank counts alone";
  const OneRankReference want = one_rank_reference({"--moe.aux_loss_coeff=0"}, kMoeConfig);
  const OneRankReference unbiased =
      one_rank_reference({"--moe.aux_loss_coeff=0", "--moe.load_balance_bias=false"}, kMoeConfig);
  double moved = 0;
  for (size_t i = 0; i < want.losses.size(); ++i)
    moved = std::max(moved, std::abs(want.losses[i] - unbiased.losses[i]) / want.losses[i]);
  EXPECT_GT(moved, 1e-4) << "the bias does not change these steps' losses, so this test could not fail";
  const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"FSDP with the expert bias",
       {local_batch(n), "--parallelism.data_parallel_shard_degree=" + std::to_string(n)}},
      // Each cp rank counts the tokens of its chunks.
      {"CP 2 with the expert bias",
       {local_batch(n / 2), "--parallelism.context_parallel_degree=2",
        "--parallelism.data_parallel_shard_degree=" + std::to_string(n / 2)}}};
  for (const auto& [what, o] : layouts) {
    std::ostringstream log;
    const TrainResult all =
        Trainer(small_config(join(o, {"--moe.aux_loss_coeff=0"}), kMoeConfig), log, world).train();
    expect_losses(all, want.losses, want.grad_norms, what);
  }
}

// A checkpoint saved under EP 2 resumes on one rank and under EP 4 (on 4 ranks), one saved on one
// rank resumes under EP, each with the losses of an uninterrupted one-rank run.
TEST(ExpertParallel, CheckpointsResumeAcrossLayouts) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  const std::vector<EpLayout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "EP layouts need 2 or 4 ranks";
  const ResumeAcrossLayouts c("ep_checkpoints");
  const std::vector<std::string> plain = {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0"};
  const OneRankReference want = one_rank_reference(plain, kMoeConfig);
  auto ep_run = [&](const EpLayout& layout, const std::vector<std::string>& o) {
    std::ostringstream log;
    return Trainer(small_config(join(join(ep_overrides(layout, n), plain), o), kMoeConfig), log, world).train();
  };
  const EpLayout saver = layouts[1];  // EP 2 x dp_shard 4 on 4 ranks, EP 2 with recomputation on 2
  c.fresh();
  ep_run(saver, c.save);
  const TrainResult on_one = c.one_rank(join(plain, c.resume), kMoeConfig);
  if (world.rank() == 0) c.expect_second_half(on_one, want, "saved under " + saver.what + ", resumed on one rank");
  c.expect_second_half(ep_run(layouts[0], c.resume), want,
                       "saved under " + saver.what + ", resumed under " + layouts[0].what);
  c.fresh();
  c.one_rank(join(plain, c.save), kMoeConfig);
  c.expect_second_half(ep_run(saver, c.resume), want, "saved on one rank, resumed under " + saver.what);
  c.fresh();
}

// The final Hugging Face export of an EP run gathers the experts: the weights one rank trains; an EP
// run starting from a Hugging Face folder takes its slice of the experts and trains as one rank
// does from it.
TEST(ExpertParallel, HuggingFaceExportAndImport) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  const std::vector<EpLayout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "EP layouts need 2 or 4 ranks";
  const fs::path root = job_dir(0) / "ep_hf";
  const std::vector<std::string> o = {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0",
                                      "--checkpoint.enable=true", "--checkpoint.interval=100",
                                      "--checkpoint.keep_latest_k=0", "--checkpoint.last_save_in_hf=true"};
  world.barrier().wait();
  if (world.rank() == 0) fs::remove_all(root);
  world.barrier().wait();
  if (world.rank() == 0) {
    std::ostringstream log;
    Trainer(small_config(join({local_batch(1), "--checkpoint.folder=" + (root / "one").string()}, o), kMoeConfig),
            log, dist::ProcessGroup::single())
        .train();
  }
  world.barrier().wait();
  {
    std::ostringstream log;
    const EpLayout& layout = layouts.back();
    Trainer(small_config(join(join(ep_overrides(layout, n), o), {"--checkpoint.folder=" + (root / "ep").string()}),
                         kMoeConfig),
            log, world)
        .train();
  }
  if (world.rank() == 0) {
    checkpoint::HfReader one(root / "one" / "step-10"), ep(root / "ep" / "step-10");
    const auto shapes = models::get_train_spec("qwen3_moe").state_dict_adapter->hf_shapes(one.config());
    const auto a = one.load(shapes, kF32), b = ep.load(shapes, kF32);
    // Ten AdamW steps turn float32's other order of the gradient sums into about 1e-4 of a
    // weight's scale (the losses agree to 1e-7); an expert gathered into the wrong place would be
    // off by its whole scale.
    for (const auto& [name, t] : a) EXPECT_LE(relative_error(b.at(name), t), 1e-3) << name;
  }
  world.barrier().wait();
  const std::vector<std::string> from_hf = {
      "--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0", "--checkpoint.enable=true",
      "--checkpoint.initial_load_path=" + (root / "one" / "step-10").string(),
      "--checkpoint.initial_load_model_only=true", "--training.steps=2"};
  TrainResult one;
  if (world.rank() == 0) {
    std::ostringstream log;
    one = Trainer(small_config(join({local_batch(1), "--checkpoint.folder=" + (root / "one_from_hf").string()},
                                    from_hf),
                               kMoeConfig),
                  log, dist::ProcessGroup::single())
              .train();
  }
  world.barrier().wait();
  std::ostringstream log;
  const TrainResult ep = Trainer(small_config(join(join(ep_overrides(layouts[1], n), from_hf),
                                                   {"--checkpoint.folder=" + (root / "ep_from_hf").string()}),
                                              kMoeConfig),
                                 log, world)
                             .train();
  if (world.rank() == 0) expect_losses(ep, one.losses, {}, "from Hugging Face under " + layouts[1].what);
  world.barrier().wait();
  if (world.rank() == 0) fs::remove_all(root);
}

TEST(ExpertParallel, LayoutsThatDoNotSplitAreRefusedBeforeBuilding) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "ep needs ranks";
  const std::vector<std::string> ep_all = {local_batch(n), "--parallelism.data_parallel_shard_degree=-1",
                                           "--parallelism.expert_parallel_degree=" + std::to_string(n)};
  const std::string dense = error_of([&] {
    std::ostringstream log;
    Trainer(small_config(ep_all, "configs/qwen3/debug.toml"), log, world);
  });
  EXPECT_NE(dense.find("parallelism.expert_parallel_degree = " + std::to_string(n)), std::string::npos) << dense;
  EXPECT_NE(dense.find("no MoE layers"), std::string::npos) << dense;
  const std::string llama = error_of([&] {
    std::ostringstream log;
    Trainer(small_config(ep_all), log, world);
  });
  EXPECT_NE(llama.find("no MoE layers"), std::string::npos) << llama;
  if (n == 4) {
    const std::string with_tp = error_of([&] {
      std::ostringstream log;
      Trainer(small_config({local_batch(2), "--parallelism.data_parallel_shard_degree=2",
                            "--parallelism.expert_parallel_degree=2", "--parallelism.tensor_parallel_degree=2"},
                           kMoeConfig),
              log, world);
    });
    EXPECT_NE(with_tp.find("parallelism.tensor_parallel_degree = 2 is not supported yet"), std::string::npos)
        << with_tp;
  }
  // No flavor has experts that 2 or 4 ranks cannot split: the plan's own check.
  nn::moe::MoE odd(0, 16, {.num_experts = 2 * n + 1, .top_k = 2, .hidden_dim = 8}, 0.02);
  parallel::ExpertParallel ep(world);
  const std::string uneven = error_of([&] { ep.apply(odd); });
  EXPECT_NE(uneven.find("parallelism.expert_parallel_degree = " + std::to_string(n)), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("moe.num_experts"), std::string::npos) << uneven;
}

}  // namespace
}  // namespace titan::train
