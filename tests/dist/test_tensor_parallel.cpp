// Tensor parallelism (with and without sequence parallelism and the vocabulary-parallel loss),
// alone and with FSDP, on however many ranks the test runs: the same losses as one rank on the
// same global batch; checkpoints saved under one layout resume under another; bad layouts refused
// before anything is built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "titan/autograd/grad_mode.h"
#include "titan/dist/process_group.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/registry.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/parallel/comm_ops.h"
#include "titan/parallel/deferred_init.h"
#include "titan/parallel/loss_parallel.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using namespace testing;

struct TpLayout {
  std::string what;
  int64_t tp = 2;
  int64_t replicate = 1;  // dp_shard takes the rest
  std::vector<std::string> overrides;
  std::string config = "configs/llama3/debug.toml";
  int64_t cp = 1;
};

std::vector<std::string> layout_overrides(const TpLayout& l, int n) {
  const int64_t dp = n / l.tp / l.cp;
  std::vector<std::string> o = {local_batch(dp), "--parallelism.tensor_parallel_degree=" + std::to_string(l.tp),
                                "--parallelism.context_parallel_degree=" + std::to_string(l.cp),
                                "--parallelism.data_parallel_replicate_degree=" + std::to_string(l.replicate),
                                "--parallelism.data_parallel_shard_degree=" + std::to_string(dp / l.replicate)};
  o.insert(o.end(), l.overrides.begin(), l.overrides.end());
  return o;
}

// Trains each layout on all ranks and compares its losses and gradient norms with one rank
// training the same global batch.
void expect_one_rank_losses(const std::vector<TpLayout>& layouts) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  for (const TpLayout& layout : layouts) {
    std::vector<std::string> reference_overrides;
    for (const std::string& o : layout.overrides)
      if (!o.starts_with("--training.local_batch_size") && !o.starts_with("--parallelism."))
        reference_overrides.push_back(o);
    const OneRankReference want = one_rank_reference(reference_overrides, layout.config);
    ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps)) << layout.what;
    std::ostringstream log;
    TrainResult all = Trainer(small_config(layout_overrides(layout, n), layout.config), log, world).train();
    const double worst = expect_one_rank_figures(all, want, layout.what);
    if (world.rank() == 0) {
      std::cout << layout.what << " on " << n << " ranks vs 1: largest relative loss difference over " << kSteps
                << " steps " << worst << "\n";
      EXPECT_NE(log.str().find(layout.tp > 1 ? "tensor parallel over " + std::to_string(layout.tp) + " ranks"
                                           : "context parallel over " + std::to_string(layout.cp) + " ranks"), std::string::npos)
          << log.str();
    }
  }
}

TEST(TensorParallel, LossesMatchOneRankOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  // MoE without its balancing terms, as in the FSDP test: with data parallelism over several
  // ranks the aux loss is each rank's own batch's.
  const std::vector<std::string> moe = {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0"};
  // Two ranks try each style; four, the compositions with data parallelism and a degree of 4.
  std::vector<TpLayout> layouts;
  if (n == 2)
    layouts = {
      {"TP 2, sequence parallel, loss parallel", 2, 1, {}},
      {"TP 2 without sequence parallelism", 2, 1, {"--parallelism.enable_sequence_parallel=false"}},
      {"TP 2, logits gathered for the loss", 2, 1, {"--parallelism.disable_loss_parallel=true"}},
      {"TP 2, full activation checkpointing, 2 micro-batches",
       2,
       1,
       {"--activation_checkpoint.mode=full", "--training.local_batch_size=" + std::to_string(kGlobalBatch / (n / 2) / 2)}},
      // At the fixture's lr of 3e-3 the tied model's gradient norm climbs to 14 by step 10 and
      // rounding differences of 1e-9 at step 1 grow to 1e-3 by step 6 (measured); at 1e-3 it
      // trains smoothly and one rank's rounding is all that separates the runs.
      {"TP 2, Qwen 3 dense (QK-norm, tied embeddings)",
       2,
       1,
       {"--model.weight_tying=true", "--optimizer.lr=1e-3"},
       "configs/qwen3/debug.toml"},
      {"TP 2, Qwen 3 dense without sequence parallelism",
       2,
       1,
       {"--parallelism.enable_sequence_parallel=false"},
       "configs/qwen3/debug.toml"},
      {"TP 2, Qwen 3 MoE (experts replicated)", 2, 1, moe, "configs/qwen3/debug_moe.toml"},
  };
  if (n == 4)
    layouts = {{"TP 2 x FSDP 2", 2, 1, {}},
               {"TP 2 x DDP 2", 2, 2, {}},
               {"TP 2 x FSDP 2, Qwen 3 MoE", 2, 1, moe, "configs/qwen3/debug_moe.toml"},
               {"TP 4", 4, 1, {}}};
  expect_one_rank_losses(layouts);
}

// Context parallelism: each rank trains on two chunks of every sequence, attention runs round the
// ring, and the losses are one rank's on the same global batch.
TEST(ContextParallelTraining, LossesMatchOneRankOnTheSameGlobalBatch) {
  const int n = dist::world().size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const std::vector<std::string> moe = {"--moe.load_balance_bias=false", "--moe.aux_loss_coeff=0"};
  // The corpus's documents are a line each; with the KJV tokenizer's end-of-text id the loader
  // marks them, and ring attention must keep them apart across the ranks' chunks.
  const std::vector<std::string> documents = {"--attention.document_masking=true",
                                              "--model.tokenizer_path=data/kjv_tokenizer", "--attention.block_q=4",
                                              "--attention.block_kv=4"};
  std::vector<TpLayout> layouts;
  if (n == 2)
    layouts = {{"CP 2", 1, 1, {}, "configs/llama3/debug.toml", 2},
               {"CP 2, documents masked", 1, 1, documents, "configs/llama3/debug.toml", 2},
               {"CP 2, full activation checkpointing", 1, 1, {"--activation_checkpoint.mode=full"},
                "configs/llama3/debug.toml", 2},
               {"CP 2, Qwen 3 MoE", 1, 1, moe, "configs/qwen3/debug_moe.toml", 2}};
  if (n == 4)
    layouts = {{"CP 2 x FSDP 2", 1, 1, {}, "configs/llama3/debug.toml", 2},
               {"CP 4, documents masked", 1, 1, documents, "configs/llama3/debug.toml", 4},
               {"CP 2 x TP 2, Qwen 3 dense", 2, 1, {}, "configs/qwen3/debug.toml", 2}};
  expect_one_rank_losses(layouts);
}

// Deferred initialisation under the real plans: a model built on meta, split by tensor
// parallelism (and sharded by FSDP on 4 ranks), then initialised rank by rank, holds bit for bit
// the slices of the same model built and initialised whole on one rank.
TEST(TensorParallel, ShardedInitialisationEqualsTheSlicesOfOneRanks) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  for (const char* name : {"llama3", "qwen3"}) {
    const models::TrainSpec& spec = models::get_train_spec(name);
    models::ModelConfig cfg;
    cfg.name = name;
    cfg.flavor = "debugmodel";
    Generator whole_gen(11);
    const nn::StateDict want = spec.build(cfg, 64, whole_gen)->state_dict();
    std::shared_ptr<models::CausalLM> model;
    Generator gen(11);
    {
      const MetaScope meta;
      model = spec.build(cfg, 64, gen);
    }
    dist::DeviceMesh mesh(world, {.dp_shard = n / 2, .tp = 2});
    models::Parallelized parts = spec.parallelize(*model, {.mesh = &mesh});
    ASSERT_TRUE(parts.tp) << name;
    parallel::deferred_init(*model, gen, parts.fsdp.get(), [&](const std::string& p, const Tensor&) {
      return parts.tp->slice_of(p);
    });
    EXPECT_EQ(gen.offset(), whole_gen.offset()) << name;
    // Each parameter's local values (FSDP's valid rows, else the TP slice) against that box of the
    // whole one.
    std::map<std::string, std::pair<Tensor, Shape>> local;  // name -> values, FSDP piece's offsets
    if (parts.fsdp)
      for (const auto& ps : parts.fsdp->param_shards()) local[ps.name] = {ps.where.valid(ps.shard), ps.where.offsets};
    else
      for (const auto& [p, t] : model->named_parameters()) local[p] = {t, Shape(t.dim(), 0)};
    ASSERT_FALSE(local.empty());
    for (const auto& [p, values] : local) {
      Tensor box = want.at(p);
      const std::optional<parallel::GlobalSlice> slice = parts.tp->slice_of(p);
      for (int64_t d = 0; d < box.dim(); ++d) {
        const int64_t offset = (slice ? slice->offsets[d] : 0) + values.second[d];
        box = box.narrow(d, offset, values.first.size(d));
      }
      EXPECT_EQ(box.contiguous().to_vector<float>(), values.first.contiguous().to_vector<float>())
          << name << " " << p;
    }
  }
}

// The vocabulary-parallel loss and its gradient against ops::cross_entropy on the whole logits,
// with ignored rows and targets on every rank.
TEST(TensorParallel, VocabParallelCrossEntropyMatchesTheWholeVocabulary) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  const int64_t rows = 12, local = 5, vocab = local * n;
  Generator gen(3);
  Tensor logits = Tensor::randn({3, 4, vocab}, gen, {.dtype = kF64});
  Tensor targets = Tensor::rand({3, 4}, gen, {}, 0, static_cast<double>(vocab)).to(kI64);
  targets.data<int64_t>()[5] = -100;
  Tensor whole = logits.clone().requires_grad_();
  Tensor want = ops::cross_entropy(whole, targets);
  want.backward();
  Tensor mine = logits.narrow(2, world.rank() * local, local).contiguous().requires_grad_();
  Tensor got = parallel::vocab_parallel_cross_entropy(mine, targets, world.rank() * local, vocab, world);
  got.backward();
  EXPECT_NEAR(got.item(), want.item(), 1e-12);
  Tensor want_grad = whole.grad().narrow(2, world.rank() * local, local).contiguous();
  const double* a = mine.grad().data<double>();
  const double* b = want_grad.data<double>();
  for (int64_t i = 0; i < rows * local; ++i) EXPECT_NEAR(a[i], b[i], 1e-14) << i;
}

// Every pair of differentiable collectives against its definition: forward values, and a
// backward whose gradient is what the pair promises (summed, sliced or gathered).
TEST(TensorParallel, DifferentiableCollectivesPairTheirGradients) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size(), r = world.rank();
  Generator gen(7);
  // The same [2, 2n, 3] on every rank, and a distinct gradient per rank.
  Tensor all = Tensor::randn({2, 2 * n, 3}, gen, {.dtype = kF64});
  Tensor mine = all.narrow(1, 2 * r, 2).contiguous();
  auto grad_of = [&](const Shape& shape, int rank) {
    Generator g(100 + rank);
    return Tensor::randn(shape, g, {.dtype = kF64});
  };
  auto sum_over_ranks = [&](const Shape& shape) {
    Tensor s = Tensor::zeros(shape, {.dtype = kF64});
    for (int k = 0; k < n; ++k) s = ops::add(s, grad_of(shape, k));
    return s;
  };
  auto expect_equal = [](const Tensor& a, const Tensor& b, const char* what) {
    ASSERT_EQ(a.sizes(), b.sizes()) << what;
    Tensor ac = a.contiguous(), bc = b.contiguous();
    for (int64_t i = 0; i < ac.numel(); ++i) EXPECT_NEAR(ac.data<double>()[i], bc.data<double>()[i], 1e-12) << what;
  };
  {
    Tensor x = mine.clone().requires_grad_();
    Tensor y = parallel::gather_along(x, 1, world);
    expect_equal(y, all, "gather_along forward");
    y.backward(grad_of(all.sizes(), r));
    expect_equal(x.grad(), sum_over_ranks(all.sizes()).narrow(1, 2 * r, 2), "gather_along backward");
  }
  {
    Tensor x = all.clone().requires_grad_();
    Tensor y = parallel::reduce_scatter_along(x, 1, world);
    expect_equal(y, ops::scale(mine, n), "reduce_scatter_along forward");
    Tensor g = grad_of(mine.sizes(), r);
    y.backward(g);
    expect_equal(x.grad(), parallel::all_gather_dim(g, 1, world), "reduce_scatter_along backward");
  }
  {
    Tensor x = all.clone().requires_grad_();
    Tensor y = parallel::copy_to_group(x, world);
    y.backward(grad_of(all.sizes(), r));
    expect_equal(x.grad(), sum_over_ranks(all.sizes()), "copy_to_group backward");
  }
  {
    Tensor x = all.clone().requires_grad_();
    Tensor y = parallel::reduce_from_group(x, world);
    expect_equal(y, ops::scale(all, n), "reduce_from_group forward");
    Tensor g = grad_of(all.sizes(), 0);
    y.backward(g);
    expect_equal(x.grad(), g, "reduce_from_group backward");
  }
  {
    Tensor x = mine.clone().requires_grad_();
    Tensor y = parallel::gather_along_replicated(x, 1, world);
    Tensor g = grad_of(all.sizes(), 0);
    y.backward(g);
    expect_equal(x.grad(), g.narrow(1, 2 * r, 2), "gather_along_replicated backward");
  }
  {
    Tensor x = all.clone().requires_grad_();
    Tensor y = parallel::split_along(x, 1, world);
    expect_equal(y, mine, "split_along forward");
    y.backward(grad_of(mine.sizes(), r));
    Tensor want = Tensor::zeros(all.sizes(), {.dtype = kF64});
    for (int k = 0; k < n; ++k) want.narrow(1, 2 * k, 2).copy_(grad_of(mine.sizes(), k));
    expect_equal(x.grad(), want, "split_along backward");
  }
}

// A checkpoint saved under TP resumes on one rank, one saved on one rank under TP, one saved under
// CP under TP (with FSDP too on 4 ranks), each with the losses an uninterrupted one-rank run has.
TEST(TensorParallel, CheckpointsResumeAcrossLayouts) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const ResumeAcrossLayouts c("tp_checkpoints");
  const std::string config = "configs/llama3/debug.toml";
  const OneRankReference want = one_rank_reference({}, config);
  auto layout_run = [&](const TpLayout& layout, const std::vector<std::string>& o) {
    std::ostringstream log;
    return Trainer(small_config(join(layout_overrides(layout, n), o)), log, world).train();
  };
  const TpLayout tp = {"TP 2", 2, 1, {}}, cp = {"CP 2", 1, 1, {}, config, 2};
  c.fresh();
  layout_run(tp, c.save);
  const TrainResult on_one = c.one_rank(c.resume, config);
  if (world.rank() == 0) c.expect_second_half(on_one, want, "saved under TP, resumed on one rank");
  c.fresh();
  c.one_rank(c.save, config);
  c.expect_second_half(layout_run(tp, c.resume), want, "saved on one rank, resumed under TP");
  c.fresh();
  layout_run(cp, c.save);
  c.expect_second_half(layout_run(tp, c.resume), want, "saved under CP, resumed under TP");
  c.fresh();
}

// The final Hugging Face export of a TP run (slices gathered over tp, FSDP shards over dp_shard)
// holds the weights one rank trains; a TP run starting from a Hugging Face folder slices it and
// trains as one rank does from it.
TEST(TensorParallel, HuggingFaceExportAndImport) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const fs::path root = job_dir(0) / "tp_hf";
  auto run = [&](bool tp, const fs::path& folder, std::vector<std::string> extra) {
    std::vector<std::string> o = {"--checkpoint.enable=true", "--checkpoint.folder=" + folder.string(),
                                  "--checkpoint.interval=100", "--checkpoint.keep_latest_k=0",
                                  "--checkpoint.last_save_in_hf=true"};
    o.insert(o.end(), extra.begin(), extra.end());
    TrainResult r;
    if (tp) {
      std::vector<std::string> layout = layout_overrides({"TP", 2, 1, {}}, n);
      o.insert(o.begin(), layout.begin(), layout.end());
      std::ostringstream log;
      r = Trainer(small_config(o), log, world).train();
    } else if (world.rank() == 0) {
      o.insert(o.begin(), local_batch(1));
      std::ostringstream log;
      r = Trainer(small_config(o), log, dist::ProcessGroup::single()).train();
    }
    world.barrier().wait();
    return r;
  };
  if (world.rank() == 0) fs::remove_all(root);
  world.barrier().wait();
  run(false, root / "one", {});
  run(true, root / "tp", {});
  if (world.rank() == 0) {
    checkpoint::HfReader one(root / "one" / "step-10"), tp(root / "tp" / "step-10");
    const auto shapes = models::get_train_spec("llama3").state_dict_adapter->hf_shapes(one.config());
    const auto a = one.load(shapes, kF32), b = tp.load(shapes, kF32);
    for (const auto& [name, t] : a) {
      const std::vector<float> x = t.to_vector<float>(), y = b.at(name).to_vector<float>();
      double worst = 0, scale = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
        scale = std::max(scale, static_cast<double>(std::abs(x[i])));
      }
      // AdamW normalises every update, so an element whose gradient is rounding noise moves by up to
      // the learning rate per step, in whichever direction each run's rounding says: ten steps leave
      // differences near 1e-4 of the tensor's largest weight (1.05e-4 on an Intel AVX-512 machine,
      // o_proj of the last layer), far below the 10 * lr either run moves it.
      EXPECT_LE(worst, 3e-4 * scale) << name;
    }
  }
  const std::vector<std::string> from_hf = {"--checkpoint.initial_load_path=" + (root / "one" / "step-10").string(),
                                            "--checkpoint.initial_load_model_only=true", "--training.steps=2"};
  const TrainResult one = run(false, root / "one_from_hf", from_hf), tp = run(true, root / "tp_from_hf", from_hf);
  if (world.rank() == 0) {
    ASSERT_EQ(one.losses.size(), 2u);
    ASSERT_EQ(tp.losses.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(tp.losses[i], one.losses[i], 1e-5 * one.losses[i]) << i;
  }
  world.barrier().wait();
  if (world.rank() == 0) fs::remove_all(root);
}

TEST(TensorParallel, LayoutsThatDoNotSplitAreRefusedBeforeBuilding) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n != 4) GTEST_SKIP() << "tp 4 needs 4 ranks";
  auto message = [&](const std::vector<std::string>& o, const std::string& config) {
    try {
      std::ostringstream log;
      Trainer(small_config(o, config), log, world);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Qwen 3's debug model has 4 key/value heads and 8 query heads: tp 4 splits them, so a vocabulary
  // that does not divide is the refusal here.
  const std::string vocab = message({local_batch(1), "--parallelism.tensor_parallel_degree=4",
                                     "--parallelism.data_parallel_shard_degree=1", "--model.vocab_size=2050"},
                                    "configs/qwen3/debug.toml");
  EXPECT_NE(vocab.find("parallelism.tensor_parallel_degree = 4"), std::string::npos) << vocab;
  EXPECT_NE(vocab.find("vocabulary of 2050"), std::string::npos) << vocab;
  const std::string seq = message({local_batch(1), "--parallelism.tensor_parallel_degree=4",
                                   "--parallelism.data_parallel_shard_degree=1", "--training.seq_len=30"},
                                  "configs/llama3/debug.toml");
  EXPECT_NE(seq.find("training.seq_len = 30"), std::string::npos) << seq;
}

}  // namespace
}  // namespace titan::train
