// How pipeline parallelism lays a model out before any rank runs: the layers' split into stages,
// the stages per rank each schedule takes, and which parameters a rank keeps.
#include <gtest/gtest.h>

#include "titan/core/meta.h"
#include "titan/models/llama3/model.h"
#include "titan/parallel/pipeline_parallel.h"
#include "support/test_util.h"

namespace titan::parallel {
namespace {

std::vector<std::pair<int64_t, int64_t>> pairs(const std::vector<StageSpan>& spans) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const StageSpan& s : spans) out.emplace_back(s.first, s.last);
  return out;
}

TEST(PipelineLayout, LayersSplitEvenlyWithTheRemainderOnTheFirstStages) {
  using P = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(pairs(split_layers(6, 2, {})), (P{{0, 3}, {3, 6}}));
  EXPECT_EQ(pairs(split_layers(7, 3, {})), (P{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_EQ(pairs(split_layers(4, 4, {})), (P{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(pairs(split_layers(6, 3, {"layers.1", "layers.5"})), (P{{0, 1}, {1, 5}, {5, 6}}));
}

TEST(PipelineLayout, BadSplitsAreRefusedNamingTheKey) {
  EXPECT_TITAN_ERROR(split_layers(3, 4, {}), "pipeline_parallel_degree");
  EXPECT_TITAN_ERROR(split_layers(6, 3, {"layers.4", "layers.2"}), "pipeline_parallel_split_points");
  EXPECT_TITAN_ERROR(split_layers(6, 2, {"layers.6"}), "pipeline_parallel_split_points");
  EXPECT_TITAN_ERROR(split_layers(6, 2, {"norm"}), "pipeline_parallel_split_points");
  EXPECT_TITAN_ERROR(split_layers(6, 3, {"layers.2"}), "give 2");
}

TEST(PipelineLayout, StagesPerRankFollowTheSchedule) {
  EXPECT_EQ(stages_per_rank("1F1B", 4, 0), 1);
  EXPECT_EQ(stages_per_rank("GPipe", 2, 1), 1);
  EXPECT_EQ(stages_per_rank("Interleaved1F1B", 2, 0), 2);
  EXPECT_EQ(stages_per_rank("Interleaved1F1B", 2, 5), 3);
  EXPECT_EQ(stages_per_rank("ZBVZeroBubble", 2, 0), 2);
  EXPECT_TITAN_ERROR(stages_per_rank("1F1B", 2, 2), "pipeline_parallel_split_points");
  EXPECT_TITAN_ERROR(stages_per_rank("Interleaved1F1B", 2, 2), "pipeline_parallel_split_points");
}

// Rank 1 of 2 under 1F1B keeps layers 3-5, the final norm and the output; everything else is an
// empty slice whose box names the whole tensor.
TEST(PipelineLayout, ARankKeepsItsStagesParametersAndEmptiesTheOthers) {
  models::llama3::ModelArgs args;
  args.dim = 32;
  args.n_layers = 6;
  args.n_heads = 4;
  args.n_kv_heads = 4;
  args.vocab_size = 64;
  args.multiple_of = 16;
  args.max_seq_len = 16;
  std::shared_ptr<models::llama3::Transformer> model;
  {
    const MetaScope meta;
    model = std::make_shared<models::llama3::Transformer>(args);
  }
  const Shape embedding = model->tok_embeddings->weight.sizes();
  PipelineParallel pp(*model, make_schedule("1F1B", 2, 4), split_layers(6, 2, {}), dist::ProcessGroup::simulated(1, 2, "pp"));
  pp.place("tok_embeddings", 0);
  pp.place("norm", 1);
  pp.place("output", 1);
  pp.apply();
  for (const auto& [name, p] : model->named_parameters()) {
    const bool mine = name.starts_with("layers.3") || name.starts_with("layers.4") || name.starts_with("layers.5") ||
                      name.starts_with("norm") || name.starts_with("output");
    EXPECT_EQ(pp.holds(name), mine) << name;
    EXPECT_EQ(p.numel() > 0, mine) << name;
    EXPECT_EQ(pp.slice_of(name).has_value(), !mine) << name;
  }
  EXPECT_EQ(pp.slice_of("tok_embeddings.weight")->global_shape, embedding);
  EXPECT_EQ(pp.local_stages(), std::vector<int64_t>{1});
  EXPECT_EQ(pp.stage_of("layers.2.attention.wq.weight"), 0);
}

}  // namespace
}  // namespace titan::parallel
