// Meta tensors (core/meta.h): shapes without memory under a MetaScope, refused clearly wherever
// data is touched, and made real in place.
#include <gtest/gtest.h>

#include "support/test_util.h"
#include "titan/core/allocator.h"
#include "titan/core/meta.h"
#include "titan/models/llama3/model.h"
#include "titan/nn/init.h"
#include "titan/nn/linear.h"
#include "titan/nn/norm.h"
#include "titan/ops/arith.h"
#include "titan/ops/rope.h"

namespace titan {
namespace {

TEST(MetaTensor, FactoriesUnderAScopeMakeShapesWithoutMemory) {
  const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
  Tensor z, o, f, e, real_inside;
  {
    const MetaScope meta;
    EXPECT_TRUE(MetaScope::active());
    z = Tensor::zeros({1000, 1000});
    o = Tensor::ones({3, 4}, {.dtype = kF64});
    f = Tensor::full({2}, 7.0);
    e = Tensor::empty({5, 6}, {.dtype = kBF16});
    {
      const MetaScope real(false);
      EXPECT_FALSE(MetaScope::active());
      real_inside = Tensor::zeros({2, 2});
    }
    EXPECT_TRUE(MetaScope::active());
  }
  EXPECT_FALSE(MetaScope::active());
  EXPECT_EQ(CpuAllocator::instance().stats().allocated_bytes - before,
            static_cast<int64_t>(CpuAllocator::round_size(real_inside.nbytes())))
      << "only the tensor made under MetaScope(false) holds memory";
  for (const Tensor& t : {z, o, f, e}) EXPECT_TRUE(t.is_meta()) << t.desc();
  EXPECT_FALSE(real_inside.is_meta());
  EXPECT_EQ(z.sizes(), (Shape{1000, 1000}));
  EXPECT_EQ(z.strides(), (Shape{1000, 1}));
  EXPECT_EQ(o.dtype(), kF64);
  EXPECT_EQ(e.dtype(), kBF16);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_EQ(z.storage()->nbytes(), 4000000u) << "a meta storage knows its size";
  EXPECT_FALSE(Tensor::zeros({2}).is_meta()) << "outside the scope factories are real again";
}

TEST(MetaTensor, DataAccessSaysTheTensorIsNotMaterialised) {
  Tensor t;
  {
    const MetaScope meta;
    t = Tensor::zeros({3, 4});
  }
  Tensor real = Tensor::ones({3, 4});
  EXPECT_TITAN_ERROR(t.data<float>(), "f32[3, 4]", "meta", "not materialised");
  EXPECT_TITAN_ERROR(t.data_ptr(), "f32[3, 4]", "not materialised");
  EXPECT_TITAN_ERROR(t.to_vector<float>(), "f32[3, 4]", "not materialised");
  EXPECT_TITAN_ERROR(t.narrow(0, 0, 1).narrow(1, 2, 1).item(), "f32[1, 1]", "not materialised");
  EXPECT_TITAN_ERROR(t.clone(), "f32[3, 4]", "not materialised");
  EXPECT_TITAN_ERROR(Tensor(t).fill_(1.0), "f32[3, 4]", "not materialised");
  EXPECT_TITAN_ERROR(Tensor(t).copy_(real), "f32[3, 4]", "not materialised");
  EXPECT_TITAN_ERROR(Tensor(real).copy_(t), "f32[3, 4]", "not materialised");
  EXPECT_TITAN_ERROR(ops::add(t, real), "f32[3, 4]", "not materialised");
  Generator gen(0);
  EXPECT_TITAN_ERROR(nn::init::normal_(t, 0, 1, gen), "f32[3, 4]", "meta", "deferred_init");
  EXPECT_TITAN_ERROR(nn::init::ones_(t), "f32[3, 4]", "meta", "deferred_init");
}

TEST(MetaTensor, TensorsWithValuesStayRealAndRandomOnesAreRefused) {
  const MetaScope meta;
  EXPECT_FALSE(Tensor::from_vector<float>({1, 2, 3}, {3}).is_meta());
  EXPECT_FALSE(Tensor::scalar<int64_t>(4).is_meta());
  EXPECT_FALSE(Tensor::arange(5).is_meta());
  EXPECT_EQ(Tensor::arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Generator gen(1);
  EXPECT_TITAN_ERROR(Tensor::randn({2, 3}, gen), "Tensor::randn", "f32[2, 3]", "MetaScope",
                     "reset_parameters");
  EXPECT_TITAN_ERROR(Tensor::rand({2}, gen), "Tensor::rand", "MetaScope");
  EXPECT_EQ(gen.offset(), 0u) << "a refused draw takes no indices";
}

TEST(MetaTensor, ViewsShareTheStorageAndMaterialiseWithIt) {
  Tensor t;
  {
    const MetaScope meta;
    t = Tensor::ones({4, 3});
  }
  Tensor view = t.detach().narrow(0, 1, 2);
  EXPECT_TRUE(view.is_meta());
  EXPECT_EQ(view.storage(), t.storage());
  EXPECT_TITAN_ERROR(t.narrow(0, 3, 2), "narrow");  // bounds are still checked
  t.storage()->materialize();
  EXPECT_FALSE(t.is_meta());
  EXPECT_FALSE(view.is_meta());
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(12, 0.0f)) << "materialised memory is zeroed";
  EXPECT_TITAN_ERROR(t.storage()->materialize(), "already holds memory");
}

TEST(MetaTensor, ModulesBuildMetaParametersButComputedTablesStayReal) {
  const MetaScope meta;
  nn::Linear linear(8, 4, true);
  nn::RMSNorm norm(8);
  EXPECT_TRUE(linear.weight.is_meta());
  EXPECT_TRUE(linear.bias.is_meta());
  EXPECT_TRUE(norm.weight.is_meta());
  EXPECT_TRUE(linear.weight.requires_grad());
  EXPECT_EQ(linear.in_features(), 8);

  ops::RopeTable rope = ops::RopeTable::build(8, 16, 10000.0);
  EXPECT_FALSE(rope.cos.is_meta());
  EXPECT_FALSE(rope.sin.is_meta());
  {
    const MetaScope real(false);
    ops::RopeTable eager = ops::RopeTable::build(8, 16, 10000.0);
    EXPECT_TRUE(test::same_bits(rope.cos, eager.cos));
    EXPECT_TRUE(test::same_bits(rope.sin, eager.sin));
  }
  EXPECT_TRUE(MetaScope::active()) << "the table's own scope ended with it";

  models::llama3::ModelArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 50;
  args.multiple_of = 16;
  args.max_seq_len = 8;
  models::llama3::Transformer model(args);
  for (const auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p.is_meta()) << name;
  for (const auto& [name, b] : model.named_buffers()) EXPECT_FALSE(b.is_meta()) << name;
  EXPECT_EQ(model.state_dict().size(), model.named_parameters().size())
      << "views of meta parameters are made";
}

}  // namespace
}  // namespace titan
