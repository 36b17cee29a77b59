// Deferred initialisation on however many ranks the test runs: a model built under a MetaScope,
// sharded by FSDP over the world and initialised shard by shard, holds exactly the rows of the same
// model built whole and initialised on one rank, trains to the same losses as FSDP over that
// eager model, and never holds much more than its shards.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include "titan/core/allocator.h"
#include "titan/core/meta.h"
#include "titan/dist/process_group.h"
#include "titan/models/llama3/model.h"
#include "titan/models/qwen3/model.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/deferred_init.h"
#include "titan/parallel/fully_shard.h"

namespace titan {
namespace {

constexpr uint64_t kSeed = 20260;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

std::vector<nn::Module*> blocks_of(nn::Module& layers) {
  std::vector<nn::Module*> blocks;
  for (const auto& [name, block] : layers.named_children()) blocks.push_back(block.get());
  return blocks;
}

// Cross-entropy on this rank's own tokens for `steps` AdamW steps; the losses.
template <typename Model>
std::vector<double> train(Model& model, parallel::FullyShard& fsdp, int steps) {
  const int64_t vocab = model.args().vocab_size, rank = dist::world().rank();
  Tensor tokens = Tensor::arange(32).reshape({2, 16});
  {
    int64_t* t = tokens.data<int64_t>();
    for (int64_t i = 0; i < tokens.numel(); ++i) t[i] = (t[i] * (rank + 3) + 7) % vocab;
  }
  optim::AdamW optimizer(fsdp.named_shards());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    Tensor loss = ops::cross_entropy(model(tokens, Tensor()), tokens);
    losses.push_back(loss.item());
    loss.backward();
    fsdp.reduce_gradients();
    optimizer.step();
  }
  return losses;
}

template <typename Model, typename Args>
void expect_deferred_equals_eager(const char* what, Args args) {
  dist::ProcessGroup& world = dist::world();
  args.max_seq_len = 16;  // the RoPE tables (computed, whole on every rank) stay small
  Generator eager_gen(kSeed);
  Model eager(args);
  eager.init_weights(eager_gen);
  const nn::StateDict want = eager.state_dict();
  int64_t model_bytes = 0, buffer_bytes = 0;
  for (const auto& [name, p] : eager.named_parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
  for (const auto& [name, b] : eager.named_buffers()) buffer_bytes += static_cast<int64_t>(b.nbytes());

  // Meta build, shard, init: what this rank allocates on the way, at most.
  CpuAllocator& allocator = CpuAllocator::instance();
  const int64_t before = allocator.stats().allocated_bytes;
  allocator.reset_peak();
  std::unique_ptr<Model> model;
  {
    const MetaScope meta;
    model = std::make_unique<Model>(args);
  }
  parallel::FullyShard fsdp(*model, blocks_of(*model->layers), world, dist::ProcessGroup::single());
  Generator gen(kSeed);
  parallel::deferred_init(*model, gen, &fsdp);
  const int64_t peak = allocator.stats().peak_allocated_bytes - before;
  const int64_t bound = fsdp.shard_bytes() + buffer_bytes + 256 * 1024;
  EXPECT_LE(peak, bound) << what << ": peak over the meta build, sharding and init; the whole model is "
                         << model_bytes << " bytes, this rank's shards " << fsdp.shard_bytes();
  if (world.rank() == 0)
    std::cout << what << " on " << world.size() << " ranks: whole model " << model_bytes << " bytes, shards "
              << fsdp.shard_bytes() << ", peak during meta build + shard + init " << peak << "\n";
  EXPECT_EQ(gen.offset(), eager_gen.offset()) << what << ": the stream ends where one rank's does";

  // Every parameter (under each of its names) is this rank's rows of the eager one, then zero
  // padding; every persistent buffer is the eager one.
  const nn::StateDict got = fsdp.state_dict();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.contains(name)) << what << ": " << name;
    const Tensor& g = got.at(name);
    const std::optional<parallel::ShardBox> box = fsdp.shard_box(name);
    if (!box) {
      EXPECT_TRUE(same_bits(g, w)) << what << ": buffer " << name;
      continue;
    }
    EXPECT_EQ(box->global_shape, w.sizes()) << what << ": " << name;
    EXPECT_TRUE(same_bits(box->valid(g), box->of(w)))
        << what << ": box at " << shape_str(box->offsets) << " of " << shape_str(box->sizes) << " of " << name;
    // Everything outside the valid corner is zero padding.
    Tensor padding = g.detach().clone();
    box->valid(padding).zero_();
    EXPECT_TRUE(same_bits(padding, Tensor::zeros(padding.sizes(), {.dtype = padding.dtype()})))
        << what << ": padding of " << name;
  }
  for (const auto& [name, b] : model->named_buffers()) EXPECT_FALSE(b.is_meta()) << what << ": " << name;

  // Training: the same losses as FSDP over the eagerly built model (which keeps rank 0's rows).
  Model reference(args);
  Generator reference_gen(kSeed);
  reference.init_weights(reference_gen);
  parallel::FullyShard reference_fsdp(reference, blocks_of(*reference.layers), world, dist::ProcessGroup::single());
  const std::vector<double> want_losses = train(reference, reference_fsdp, 2);
  const std::vector<double> losses = train(*model, fsdp, 2);
  for (size_t i = 0; i < want_losses.size(); ++i)
    EXPECT_EQ(losses[i], want_losses[i]) << what << ": step " << i + 1;
}

TEST(DeferredInit, Llama3DebugModelShardsEqualTheEagerRows) {
  expect_deferred_equals_eager<models::llama3::Transformer>("llama3 debugmodel",
                                                            models::llama3::flavor("debugmodel"));
}

TEST(DeferredInit, Qwen3DenseDebugModelShardsEqualTheEagerRows) {
  expect_deferred_equals_eager<models::qwen3::Transformer>(
      "qwen3 debugmodel", models::qwen3::flavor(models::qwen3::Family::dense, "debugmodel"));
}

TEST(DeferredInit, Qwen3MoeDebugModelShardsEqualTheEagerRows) {
  expect_deferred_equals_eager<models::qwen3::Transformer>(
      "qwen3_moe debugmodel", models::qwen3::flavor(models::qwen3::Family::moe, "debugmodel"));
}

// Tensor parallelism composed with FSDP, as the trainer will: each "TP part" holds a slice of
// a parameter (rows of one Linear, columns of an Embedding), which FSDP then shards over the world;
// the shard's valid rows are that slice's rows of the whole init.
TEST(DeferredInit, SlicesShardedByFsdpGetTheirBoxOfTheWholeInit) {
  dist::ProcessGroup& world = dist::world();
  struct Net : nn::Module {
    std::shared_ptr<nn::Linear> proj;
    std::shared_ptr<nn::Embedding> emb;
    Net(int64_t out, int64_t dim) {
      proj = register_module("proj", std::make_shared<nn::Linear>(16, out, true));
      emb = register_module("emb", std::make_shared<nn::Embedding>(10, dim));
    }
  };
  Generator whole_gen(kSeed);
  Net whole(12, 8);
  whole.init_weights(whole_gen);
  const nn::StateDict want = whole.state_dict();
  for (int64_t part = 0; part < 2; ++part) {
    std::unique_ptr<Net> local;
    {
      const MetaScope meta;
      local = std::make_unique<Net>(6, 4);
    }
    std::map<std::string, parallel::GlobalSlice> slices = {{"proj.weight", {{12, 16}, {6 * part, 0}}},
                                                           {"proj.bias", {{12}, {6 * part}}},
                                                           {"emb.weight", {{10, 8}, {0, 4 * part}}}};
    parallel::FullyShard fsdp(*local, {}, world, dist::ProcessGroup::single());
    Generator gen(kSeed);
    parallel::deferred_init(*local, gen, &fsdp,
                            [&](const std::string& name, const Tensor&) -> std::optional<parallel::GlobalSlice> {
                              return slices.at(name);
                            });
    EXPECT_EQ(gen.offset(), whole_gen.offset());
    for (const auto& [name, shard] : fsdp.named_shards()) {
      const parallel::ShardBox box = *fsdp.shard_box(name);
      const parallel::GlobalSlice& slice = slices.at(name);
      Tensor expected = want.at(name);
      for (int64_t d = 0; d < expected.dim(); ++d)
        expected = expected.narrow(d, slice.offsets[d] + box.offsets[d], box.sizes[d]);
      EXPECT_TRUE(same_bits(box.valid(shard.detach()), expected))
          << "part " << part << ", rank " << world.rank() << ": " << name;
    }
  }
}

}  // namespace
}  // namespace titan
