// Deferred initialisation on one process (parallel/deferred_init.h): a model built under a
// MetaScope and initialised in place equals the eager one, and tensor-parallel-like slices of a
// parameter get their box of the whole init. FSDP's part runs in tests/dist/test_deferred_init.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "support/test_util.h"
#include "titan/core/meta.h"
#include "titan/models/llama3/model.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/parallel/deferred_init.h"

namespace titan {
namespace {

// The box of `t`: [offsets, offsets + sizes) on each dim.
Tensor slice(Tensor t, const Shape& offsets, const Shape& sizes) {
  for (size_t d = 0; d < offsets.size(); ++d) t = t.narrow(static_cast<int64_t>(d), offsets[d], sizes[d]);
  return t.contiguous();
}

models::llama3::ModelArgs tiny_args() {
  models::llama3::ModelArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 50;
  args.multiple_of = 16;
  args.max_seq_len = 8;
  return args;
}

TEST(DeferredInitLocal, AMetaModelInitialisedInPlaceEqualsTheEagerOne) {
  Generator eager_gen(5);
  models::llama3::Transformer eager(tiny_args());
  eager.init_weights(eager_gen);
  std::unique_ptr<models::llama3::Transformer> meta;
  {
    const MetaScope scope;
    meta = std::make_unique<models::llama3::Transformer>(tiny_args());
  }
  Generator gen(5);
  parallel::deferred_init(*meta, gen);
  EXPECT_EQ(gen.offset(), eager_gen.offset());
  for (const auto& [name, p] : meta->named_parameters()) EXPECT_FALSE(p.is_meta()) << name;
  test::expect_same_state(meta->state_dict(), eager.state_dict());
  const auto buffers = meta->named_buffers(), want = eager.named_buffers();
  ASSERT_EQ(buffers.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(test::same_bits(buffers[i].second, want[i].second)) << want[i].first;
}

TEST(DeferredInitLocal, TensorParallelSlicesOnEitherDimGetTheirBoxOfTheWholeInit) {
  // Column-wise: a Linear's output rows split in two; row-wise stand-in: an Embedding's columns
  // split in two (normal_ does not depend on the shape, as Linear's bound would on in_features).
  struct Whole : nn::Module {
    std::shared_ptr<nn::Linear> proj;
    std::shared_ptr<nn::Embedding> emb;
    Whole(int64_t out, int64_t dim) {
      proj = register_module("proj", std::make_shared<nn::Linear>(8, out, true));
      emb = register_module("emb", std::make_shared<nn::Embedding>(10, dim));
    }
  };
  Generator whole_gen(9);
  Whole whole(6, 8);
  whole.init_weights(whole_gen);
  for (int64_t part = 0; part < 2; ++part) {
    std::unique_ptr<Whole> local;
    {
      const MetaScope meta;
      local = std::make_unique<Whole>(3, 4);
    }
    const parallel::SliceOf slice_of = [&](const std::string& name,
                                           const Tensor&) -> std::optional<parallel::GlobalSlice> {
      if (name == "proj.weight") return parallel::GlobalSlice{{6, 8}, {3 * part, 0}};
      if (name == "proj.bias") return parallel::GlobalSlice{{6}, {3 * part}};
      if (name == "emb.weight") return parallel::GlobalSlice{{10, 8}, {0, 4 * part}};
      return std::nullopt;
    };
    Generator gen(9);
    parallel::deferred_init(*local, gen, nullptr, slice_of);
    EXPECT_EQ(gen.offset(), whole_gen.offset());
    EXPECT_TRUE(test::same_bits(local->proj->weight, slice(whole.proj->weight, {3 * part, 0}, {3, 8})));
    EXPECT_TRUE(test::same_bits(local->proj->bias, slice(whole.proj->bias, {3 * part}, {3})));
    EXPECT_TRUE(test::same_bits(local->emb->weight, slice(whole.emb->weight, {0, 4 * part}, {10, 4})));
  }
}

TEST(DeferredInitLocal, MetaBuffersBecomeZerosUnlessTheyAreComputed) {
  struct WithBuffers : nn::Module {
    Tensor state, table;
    explicit WithBuffers(bool computed_table_is_meta) {
      state = register_buffer("state", Tensor::ones({3}));
      const MetaScope scope(computed_table_is_meta);
      table = register_buffer("table", Tensor::ones({2}), false);
    }
  };
  std::unique_ptr<WithBuffers> good, bad;
  {
    const MetaScope meta;
    good = std::make_unique<WithBuffers>(false);
    bad = std::make_unique<WithBuffers>(true);
  }
  EXPECT_TRUE(good->state.is_meta());
  Generator gen(1);
  parallel::deferred_init(*good, gen);
  EXPECT_EQ(good->state.to_vector<float>(), std::vector<float>(3, 0.0f)) << "as init_weights leaves it: zero";
  EXPECT_EQ(good->table.to_vector<float>(), std::vector<float>(2, 1.0f));
  EXPECT_TITAN_ERROR(parallel::deferred_init(*bad, gen), "non-persistent buffer table", "MetaScope(false)");
}

}  // namespace
}  // namespace titan
