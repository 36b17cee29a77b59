// The seams between the trainer loop and its execution modes (train/step/step_engine.h), the one
// resolved parallel layout (dist/parallel_dims.h), and the checks of a layout against the model
// that both modes share (train/layout_checks.h).
#include <gtest/gtest.h>

#include <sstream>

#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/core/rng.h"
#include "titan/data/tokenizer.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/registry.h"
#include "titan/ops/loss.h"
#include "titan/train/config/job_config.h"
#include "titan/train/layout_checks.h"
#include "titan/train/step/eager_step.h"
#include "titan/train/step/step_engine.h"

namespace titan::train {
namespace {

using dist::MeshAxis;
using dist::MeshDegrees;
using dist::ParallelDims;

TEST(ParallelDims, ResolvesOnceAndNamesEveryAxis) {
  const ParallelDims dims({.dp_replicate = 2, .dp_shard = -1, .tp = 2}, 8);
  EXPECT_EQ(dims.degree(MeshAxis::dp_shard), 2);
  EXPECT_EQ(dims.degree(MeshAxis::dp), 4);
  EXPECT_EQ(dims.model_parallel(), 2);
  EXPECT_EQ(dims.size(), 8);
  EXPECT_EQ(dims.describe(), "dp_replicate 2 x dp_shard 2 x tp 2 (8 ranks)");
  // Expert parallelism borrows dp_shard's ranks (TorchTitan's layout): ep 2 x dp_shard 2 is 2
  // ranks, and the experts are sharded over what ep leaves of dp_shard.
  const ParallelDims ep({.dp_shard = -1, .ep = 2}, 4);
  EXPECT_EQ(ep.size(), 4);
  EXPECT_EQ(ep.degree(MeshAxis::dp_shard), 4);
  EXPECT_EQ(ep.degree(MeshAxis::ep), 2);
  EXPECT_EQ(ep.degree(MeshAxis::efsdp), 2);
  EXPECT_EQ(ep.degree(MeshAxis::dp), 4);
  EXPECT_EQ(ep.describe(), "dp_replicate 1 x dp_shard 4 (ep 2 within it) (4 ranks)");
  EXPECT_EQ(ParallelDims({.dp_shard = 2, .ep = 2}, 2).degree(MeshAxis::efsdp), 1);
  // Without -1, as many as the degrees multiply to; -1 counts one, or ep's ranks.
  EXPECT_EQ(ParallelDims({.pp = 2, .tp = 3}).size(), 6);
  EXPECT_EQ((MeshDegrees{.dp_replicate = 2, .tp = 2}).named_size(), 4);
  EXPECT_EQ((MeshDegrees{.tp = 2, .ep = 4}).named_size(), 8);
  EXPECT_EQ(axis_name(MeshAxis::efsdp), std::string("efsdp"));
}

TEST(ParallelDims, ErrorsNameTheKeysAndWhatWasSplit) {
  EXPECT_TITAN_ERROR(ParallelDims({.tp = 3}, 4), "parallelism.tensor_parallel_degree = 3",
                     "does not divide the world of 4 ranks");
  EXPECT_TITAN_ERROR(ParallelDims({.tp = 3}, 4, dist::MeshUnits::devices), "does not divide the 4 devices of the plugin",
                     "cpu_device_count");
  EXPECT_TITAN_ERROR(ParallelDims({.dp_shard = 2, .cp = 2}, 2), "needs 4 ranks, but 2 were launched");
  EXPECT_TITAN_ERROR(ParallelDims({.pp = 0}, 2), "degree of pp is 0");
  EXPECT_TITAN_ERROR(ParallelDims({.dp_shard = 2, .ep = 4}, 2), "borrows its ranks from dp_shard",
                     "expert_parallel_degree = 4 must divide data_parallel_shard_degree = 2");
  EXPECT_TITAN_ERROR(ParallelDims({.dp_shard = -1, .ep = 0}, 2), "degree of ep is 0");
}

// Eager mode lays the degrees out over the world's ranks; the mesh it makes is the same layout.
TEST(ExecutionMode, EagerLaysOutTheRanksAndDescribesCheckpointing) {
  JobConfig c;
  const auto mode = make_execution_mode(c);
  ExecutionMode::Layout layout = mode->lay_out(MeshDegrees::from_config(c.parallelism), dist::ProcessGroup::single(), c);
  EXPECT_EQ(layout.dims.size(), 1);
  EXPECT_EQ(layout.mesh->degree(MeshAxis::dp_shard), 1);
  EXPECT_EQ(layout.mesh->dims().describe(), layout.dims.describe());
  EXPECT_EQ(mode->label(), "");
  EXPECT_EQ(mode->checkpointing(c).summary, "off");
  c.activation_checkpoint.mode = "selective";
  c.activation_checkpoint.selective_ac_option = "2";
  const ExecutionMode::Checkpointing ac = mode->checkpointing(c);
  EXPECT_EQ(ac.mode, "selective");
  EXPECT_EQ(ac.every_k, 2);
  EXPECT_EQ(ac.summary, "selective (1 block in 2 recomputed in backward)");
}

// The eager engine made from the trainer's parts takes the very step train_step takes.
TEST(ExecutionMode, EagerEngineStepsAsTrainStep) {
  JobConfig c;
  c.training.max_norm = 0.5;
  auto run = [&](bool through_engine) {
    Generator gen(3);
    auto model = std::make_shared<models::llama3::Transformer>(test::tiny_llama3_args());
    model->init_weights(gen);
    const auto named = model->named_parameters();
    optim::AdamW optimizer(named, c.optimizer.adamw_options());
    const data::Batch batch{.inputs = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 8}),
                            .labels = Tensor::from_vector(std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9}, {1, 8})};
    if (!through_engine) {
      std::vector<Tensor> params;
      for (const auto& [n, p] : named) params.push_back(p);
      return train_step(*model, optimizer, params, c.training.max_norm, 2, [&] { return batch; }).loss;
    }
    models::Parallelized plans;
    dist::ProcessGroup world = dist::ProcessGroup::single();
    dist::DeviceMesh mesh(world, ParallelDims());
    std::ostringstream log;
    const auto engine = make_execution_mode(c)->make_engine({.cfg = c,
                                                             .spec = models::get_train_spec("llama3"),
                                                             .model = *model,
                                                             .optimizer = optimizer,
                                                             .named_params = named,
                                                             .plans = plans,
                                                             .ddp = nullptr,
                                                             .mesh = mesh,
                                                             .world = world,
                                                             .log = log,
                                                             .tokenizer = *data::load_tokenizer("")});
    EXPECT_EQ(engine->describe(), "eager");
    EXPECT_EQ(engine->device_peak_bytes(), std::nullopt);
    return engine->step(2, [&] { return batch; }).loss;
  };
  const double first = run(false);
  EXPECT_GT(first, 0.0);
  EXPECT_EQ(run(true), first);
}

// Both modes check tensor parallelism against the model before anything is built, naming every
// dim that does not split.
TEST(LayoutChecks, TensorParallelSplitsAreCheckedInEveryMode) {
  for (const bool graph : {false, true}) {
    JobConfig c;
    c.compile.enable = graph;
    c.parallelism.tensor_parallel_degree = 3;
    const models::TrainSpec& spec = models::get_train_spec(c.model.name);
    const models::ModelSummary summary = spec.summarize(c.model, c.training.seq_len);
    EXPECT_TITAN_ERROR(check_model_layout(c, ParallelDims({.tp = 3}), spec, summary),
                       "parallelism.tensor_parallel_degree = 3", "query and", "key/value heads do not split into 3",
                       "tok_embeddings.weight", "does not split into 3 equal parts");
    EXPECT_NO_THROW(check_model_layout(c, ParallelDims({.tp = 2}), spec, summary)) << (graph ? "graph" : "eager");
  }
}

// The parallelisms graph mode does not split are refused by key, with the rest of what the job
// cannot do, before any plugin loads.
TEST(LayoutChecks, GraphModeRefusesWhatItDoesNotSplit) {
  JobConfig c;
  c.compile.enable = true;
  c.parallelism.pipeline_parallel_degree = 2;
  c.parallelism.expert_parallel_degree = 2;
  EXPECT_TITAN_ERROR(refuse_unsupported(c, MeshDegrees::from_config(c.parallelism)),
                     "parallelism.pipeline_parallel_degree = 2 with compile.enable = true",
                     "parallelism.expert_parallel_degree = 2 with compile.enable = true");
  c.compile.enable = false;
  EXPECT_NO_THROW(refuse_unsupported(c, MeshDegrees::from_config(c.parallelism)));
}

}  // namespace
}  // namespace titan::train
