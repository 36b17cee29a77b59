// Graph mode over several devices ([parallelism] degrees with compile.enable = true): the debug
// Llama 3 and Qwen 3 models trained over 4 CPU devices of one process, split FSDP 4, TP 2 x FSDP 2
// and HSDP 2 x 2 by XLA's partitioner, against one device with the same global batch; resumes
// across layouts and modes; the layouts that cannot be split are named before anything compiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "support/graph_harness.h"
#include "support/small_run.h"
#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/graph/runner.h"
#include "titan/models/llama3/parallelize.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/tp_layout.h"
#include "titan/train/graph_mode/graph_sharding.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/layout_checks.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// The 4 devices come from the CPU plugin's device count; elsewhere the run goes where
// $TITAN_GRAPH_PLUGIN says, whose device count these layouts may not fit.
bool on_cpu_plugin() { return test::test_runtime_options().plugin == "cpu"; }

struct Layout {
  std::string name;
  std::vector<std::string> keys;  // the [parallelism] degrees and the per-device batch
  // Whether the collectives the partitioner inserted must come near the plan's traffic (FSDP and
  // HSDP do; tensor parallelism's come to more, which the log shows and the note explains).
  bool traffic_as_planned;
};

// 4 sequences per step in every layout: one device takes all 4, 4 data-parallel devices one each.
const std::vector<Layout> kLayouts = {
    {"FSDP 4", {"--parallelism.data_parallel_shard_degree=4", "--training.local_batch_size=1"}, true},
    {"TP 2 x FSDP 2 (sequence and loss parallel, the defaults)",
     {"--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2",
      "--training.local_batch_size=2"},
     false},
    {"TP 2 x FSDP 2 without sequence or loss parallelism",
     {"--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2",
      "--training.local_batch_size=2", "--parallelism.enable_sequence_parallel=false",
      "--parallelism.disable_loss_parallel=true"},
     false},
    {"HSDP 2 x 2",
     {"--parallelism.data_parallel_replicate_degree=2", "--parallelism.data_parallel_shard_degree=2",
      "--training.local_batch_size=1"},
     true},
};

std::vector<std::string> graph_run(const std::vector<std::string>& keys, int steps) {
  std::vector<std::string> o = {"--compile.enable=true", "--training.steps=" + std::to_string(steps),
                                "--optimizer.lr=3e-3", "--metrics.log_freq=1"};
  o.insert(o.end(), keys.begin(), keys.end());
  return o;
}

void expect_layouts_match_one_device(const std::string& base) {
  if (!on_cpu_plugin()) GTEST_SKIP() << "4 devices come from the CPU plugin's device count";
  const TrainResult one = run(small_config(graph_run({"--training.local_batch_size=4"}, 10), base));
  ASSERT_EQ(one.losses.size(), 10u);
  for (const Layout& layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    std::ostringstream log;
    const TrainResult split = Trainer(small_config(graph_run(layout.keys, 10), base), log).train();
    ASSERT_EQ(split.losses.size(), 10u);
    // "...the layout needs 52.90 MiB on paper (...): 1.03x": measured over planned traffic.
    const std::string text = log.str();
    const size_t line = text.find("collectives per step, from the compiled program");
    ASSERT_NE(line, std::string::npos) << text;
    const std::string collectives = text.substr(line, text.find('\n', line) - line);
    const size_t colon = collectives.rfind("): ");
    ASSERT_NE(colon, std::string::npos) << collectives;
    const double ratio = std::stod(collectives.substr(colon + 3));
    if (layout.traffic_as_planned) {
      EXPECT_GT(ratio, 0.8) << collectives;
      EXPECT_LT(ratio, 1.3) << collectives;
    }
    std::cout << base << ", " << layout.name << ": " << collectives << "\n";
    double worst = 0;
    for (size_t i = 0; i < 10; ++i) {
      worst = std::max(worst, relative(split.losses[i], one.losses[i]));
      EXPECT_LE(relative(split.losses[i], one.losses[i]), 1e-5) << "step " << i + 1;
      EXPECT_LE(relative(split.grad_norms[i], one.grad_norms[i]), 1e-4) << "step " << i + 1;
    }
    EXPECT_LT(split.losses.back(), 0.9 * split.losses.front()) << "the run must learn";
    std::cout << base << ", " << layout.name << " over 4 devices against 1: largest relative loss difference "
              << worst << "\n";
  }
}

TEST(GraphParallel, LlamaLayoutsOverFourDevicesMatchOneDevice) { expect_layouts_match_one_device("llama3/debug.toml"); }

TEST(GraphParallel, Qwen3LayoutsOverFourDevicesMatchOneDevice) { expect_layouts_match_one_device("qwen3/debug.toml"); }

// A run moves between layouts and modes at each checkpoint: graph FSDP 4, graph TP 2 x FSDP 2,
// eager in one process, graph HSDP 2 x 2, eager again. The checkpoint holds whole tensors whichever
// layout saved it, so the chain trains as one uninterrupted run on one device (at a constant
// learning rate, which does not depend on training.steps). Eager's steps differ from graph's by
// float32 rounding only, hence 1e-4.
TEST(GraphParallel, ResumesAcrossLayoutsAndModes) {
  if (!on_cpu_plugin()) GTEST_SKIP() << "4 devices come from the CPU plugin's device count";
  const fs::path dir = test::temp_dir("graph_parallel_resume");
  fs::remove_all(dir);
  const auto config = [&](std::vector<std::string> keys, int steps, const std::string& folder) {
    for (const std::string& k : {std::string("--training.steps=") + std::to_string(steps), std::string("--optimizer.lr=3e-3"),
                                 std::string("--lr_scheduler.warmup_steps=0"), std::string("--lr_scheduler.decay_ratio=0"),
                                 std::string("--checkpoint.enable=true"), std::string("--checkpoint.interval=2"),
                                 std::string("--checkpoint.last_save_model_only=false"),
                                 "--checkpoint.folder=" + (dir / folder).string()})
      keys.push_back(k);
    return small_config(keys);
  };
  const std::vector<std::string> graph = {"--compile.enable=true"};
  const auto plus = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> chain = {
      {"graph FSDP 4", plus(graph, kLayouts[0].keys)},
      {"graph TP 2 x FSDP 2", plus(graph, kLayouts[1].keys)},
      {"eager", {"--training.local_batch_size=4"}},
      {"graph HSDP 2 x 2", plus(graph, kLayouts[2].keys)},
      {"eager again", {"--training.local_batch_size=4"}},
  };
  std::vector<double> losses;
  int steps = 0;
  for (const auto& [name, keys] : chain) {
    SCOPED_TRACE(name);
    steps += 2;
    const TrainResult r = run(config(keys, steps, "ckpt"));
    ASSERT_EQ(r.resumed_from, steps - 2);
    ASSERT_EQ(r.losses.size(), 2u);
    losses.insert(losses.end(), r.losses.begin(), r.losses.end());
  }
  const TrainResult whole = run(config(plus(graph, {"--training.local_batch_size=4"}), steps, "whole"));
  ASSERT_EQ(whole.losses.size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_LE(relative(losses[i], whole.losses[i]), 1e-4) << "step " << i + 1 << " (" << chain[i / 2].first << ")";
}

// A tiny Llama 3 (vocabulary 16) and a batch of 2 sequences of 8 tokens, whose training step the
// tests below capture over tensor-parallel layouts.
struct TinyTpCase {
  std::shared_ptr<models::llama3::Transformer> model = [] {
    models::llama3::ModelArgs a = test::tiny_llama3_args(8);
    a.vocab_size = 16;
    auto m = std::make_shared<models::llama3::Transformer>(a);
    Generator gen(3);
    m->init_weights(gen);
    return m;
  }();
  std::vector<std::pair<std::string, Tensor>> named = model->named_parameters();
  optim::AdamW optimizer{named, {}};
  Tensor tokens = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0}, {2, 8});
  std::vector<data::Batch> batch = {{tokens, tokens}};
  std::string captured(const GraphStepOptions& o) { return capture_train_step(*model, optimizer, named, batch, o).text; }
};

// The tensor-parallel plan as graph mode reads it (parallel::TpLayout): the dims it splits, and
// Megatron's activation layout held at the regions' edges by sharding constraints, which leave
// with the layout; an eager forward is unchanged by them.
TEST(GraphParallel, TheTpPlansSplitsAndActivationLayoutHoldWhileTheLayoutLives) {
  TinyTpCase c;
  auto& model = c.model;
  const Tensor& tokens = c.tokens;
  GraphStepOptions options{.custom_kernels = false, .mesh = GraphMesh({.tp = 2})};
  const auto constraints = [&](const GraphStepOptions& o) {
    return test::occurrences(c.captured(o), "call_target_name = \"Sharding\"");
  };
  const size_t carry_only = constraints(options);
  const Tensor before = (*model)(tokens);
  {
    parallel::TpLayout layout(2);
    models::llama3::apply_tp(*model, layout);
    EXPECT_EQ(layout.split_dim("layers.0.attention.wq.weight"), 0);
    EXPECT_EQ(layout.split_dim("layers.1.feed_forward.w2.weight"), 1);
    EXPECT_EQ(layout.split_dim("tok_embeddings.weight"), 0);
    EXPECT_EQ(layout.split_dim("output.weight"), 0);
    EXPECT_EQ(layout.split_dim("norm.weight"), std::nullopt);
    options.tp_splits = layout.splits();
    // The layer loop writes its block once: wq, wk, wv, wo, w1, w2, w3 and the two norms entering
    // split regions, forward and backward; then the embedding's, the final norm's and the output's.
    EXPECT_GE(constraints(options), carry_only + 2 * 9 + 2 * 3);
    EXPECT_TRUE(test::tensors_close((*model)(tokens), before, 0, "eager logits under the layout's hooks"));
  }
  EXPECT_EQ(constraints(options), carry_only) << "the hooks left with the layout";
}

// Sequence parallelism in the captured step: over tp 2 (batch 2 unsplit), the residual stream, the
// row-wise and the embedding's outputs split along the sequence ({devices=[1,2,1]0,1}); without it
// nothing is; and without loss parallelism the logits are held whole after their split product.
TEST(GraphParallel, SequenceAndLossParallelismLayTheActivationsOut) {
  TinyTpCase c;
  const auto text_for = [&](parallel::TensorParallelOptions tp) {
    parallel::TpLayout layout(2, tp);
    models::llama3::apply_tp(*c.model, layout);
    return c.captured({.custom_kernels = false,
                       .mesh = GraphMesh({.tp = 2}),
                       .tp_splits = layout.splits(),
                       .sequence_parallel = tp.sequence_parallel});
  };
  // The sharding constraints (not the parameters' shardings) that lay an activation out so.
  const auto constraints = [](const std::string& text, const std::string& layout) {
    size_t n = 0;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      n += line.find("call_target_name = \"Sharding\"") != std::string::npos &&
           line.find("mhlo.sharding = \"" + layout + "\"") != std::string::npos;
    return n;
  };
  const std::string seq_split = "{devices=[1,2,1]0,1}", vocab_split = "{devices=[1,1,2]0,1}", whole = "{replicated}";
  const std::string sp = text_for({.sequence_parallel = true, .loss_parallel = true});
  const std::string plain = text_for({.sequence_parallel = false, .loss_parallel = true});
  const std::string gathered = text_for({.sequence_parallel = false, .loss_parallel = false});
  // The carry, wo's and w2's outputs (forward and backward) and the embedding's at least.
  EXPECT_GE(constraints(sp, seq_split), 1u + 2 * 2 + 2);
  EXPECT_EQ(constraints(plain, seq_split), 0u);
  // The logits held whole after their split product, forward and backward.
  EXPECT_EQ(constraints(gathered, whole), constraints(plain, whole) + 2);
  EXPECT_EQ(constraints(gathered, vocab_split), constraints(plain, vocab_split));
  EXPECT_GT(constraints(plain, vocab_split), 0u);
}

// The mesh's devices are numbered (r * dp_shard + s) * tp + t. A colwise weight split on tp along
// dim 0 and FSDP along dim 1 puts tile (i, j) on the device with t = i, s = j.
TEST(GraphMeshSharding, MapsMeshAxesToTilesAndDevices) {
  const GraphMesh tp2_fsdp2({.dp_replicate = 1, .dp_shard = 2, .tp = 2});
  const graph::Sharding colwise = parameter_sharding(tp2_fsdp2, {8, 6}, /*stacked=*/false, /*tp_dim=*/0);
  EXPECT_EQ(colwise.attr(), "{devices=[2,2]0,2,1,3}");
  // A stack's layer dim is never split: its dims shift by one.
  EXPECT_EQ(parameter_sharding(tp2_fsdp2, {3, 8, 6}, true, 1).attr(), "{devices=[1,2,2]0,1,2,3}");
  // Replicated over tp where the plan does not split the parameter: a norm's weight.
  EXPECT_EQ(parameter_sharding(tp2_fsdp2, {8}, false, std::nullopt).attr(),
            "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
  // The batch: split over the data-parallel devices, replicated over tp.
  EXPECT_EQ(batch_sharding(tp2_fsdp2, 2).attr(), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  const GraphMesh hsdp({.dp_replicate = 2, .dp_shard = 2, .tp = 1});
  // FSDP shards over dp_shard and replicates over dp_replicate: devices 0 and 2 hold rows 0-3.
  EXPECT_EQ(parameter_sharding(hsdp, {8, 6}, false, std::nullopt).attr(),
            "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(batch_sharding(hsdp, 2).attr(), "{devices=[4,1]0,1,2,3}");
  // FSDP takes the first dim that divides; nothing divides: replicated.
  const GraphMesh fsdp4({.dp_shard = 4});
  EXPECT_EQ(parameter_sharding(fsdp4, {6, 8}, false, std::nullopt).attr(), "{devices=[1,4]0,1,2,3}");
  EXPECT_TRUE(parameter_sharding(fsdp4, {6, 3}, false, std::nullopt).replicated());
  // When only the tp dim divides by both, FSDP joins tp there, tp the major axis.
  EXPECT_EQ(parameter_sharding(tp2_fsdp2, {8, 3}, false, 0).attr(), "{devices=[4,1]0,2,1,3}");
}

// Where no single dim divides dp_shard, FSDP splits a grid of dims whose parts divide them
// (parallel/shard_grid.h) instead of replicating: dp_shard's coordinate spreads over them, the
// first dim its major part; dp_replicate still replicates.
TEST(GraphMeshSharding, SplitsDpShardOverSeveralDimsWhereNoneDivides) {
  const GraphMesh fsdp4({.dp_shard = 4});
  EXPECT_EQ(parameter_sharding(fsdp4, {2, 6}, false, std::nullopt).attr(), "{devices=[2,2]0,1,2,3}");
  const GraphMesh hsdp({.dp_replicate = 2, .dp_shard = 4});
  EXPECT_EQ(parameter_sharding(hsdp, {2, 6}, false, std::nullopt).attr(),
            "{devices=[2,2,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}");
  // A stack of 8 experts over 16 devices: 8 x 2 pieces, its layer dim whole; each device a 16th.
  const GraphMesh fsdp16({.dp_shard = 16});
  const Shape experts = {3, 8, 4, 6};
  const graph::Sharding stacked = parameter_sharding(fsdp16, experts, true, std::nullopt);
  EXPECT_EQ(stacked.tiles, (Shape{1, 8, 2, 1}));
  for (const auto& [mesh, shape, is_stack] : {std::tuple{fsdp4, Shape{2, 6}, false}, std::tuple{hsdp, Shape{2, 6}, false},
                                              std::tuple{fsdp16, experts, true}}) {
    const Tensor whole = test::rand_f32(shape, 2);
    const graph::Sharding sharding = parameter_sharding(mesh, shape, is_stack, std::nullopt);
    std::vector<Tensor> pieces;
    for (int64_t d = 0; d < mesh.size(); ++d) pieces.push_back(graph::shard_of(whole, sharding, d));
    EXPECT_EQ(pieces[0].numel() * mesh.size() / sharding.replicas, whole.numel()) << sharding.attr();
    EXPECT_TRUE(test::tensors_close(graph::unshard(pieces, sharding), whole, 0, sharding.attr()));
  }
}

// shard_of and unshard follow a sharding's device order and replicas: every device's piece put
// back gives the whole.
TEST(GraphMeshSharding, PiecesGoBackTogetherUnderEveryLayout) {
  const Tensor whole = test::rand_f32({8, 6}, 1);
  for (const GraphMesh& mesh : {GraphMesh({.dp_shard = 4}), GraphMesh({.dp_shard = 2, .tp = 2}),
                                GraphMesh({.dp_replicate = 2, .dp_shard = 2})}) {
    for (const std::optional<int64_t> tp_dim : {std::optional<int64_t>{}, std::optional<int64_t>{0},
                                                std::optional<int64_t>{1}}) {
      const graph::Sharding sharding = parameter_sharding(mesh, whole.sizes(), false, tp_dim);
      std::vector<Tensor> pieces;
      for (int64_t d = 0; d < mesh.size(); ++d) pieces.push_back(graph::shard_of(whole, sharding, d));
      EXPECT_EQ(pieces[0].numel() * sharding.num_devices() / sharding.replicas, whole.numel()) << sharding.attr();
      EXPECT_TRUE(test::tensors_close(graph::unshard(pieces, sharding), whole, 0, sharding.attr()));
    }
  }
  // Device 2 of TP 2 x FSDP 2 is (s = 1, t = 0): the colwise weight's rows 0-3, columns 3-5.
  const graph::Sharding colwise = parameter_sharding(GraphMesh({.dp_shard = 2, .tp = 2}), whole.sizes(), false, 0);
  EXPECT_TRUE(test::tensors_close(graph::shard_of(whole, colwise, 2), whole.narrow(0, 0, 4).narrow(1, 3, 3), 0,
                                  "device 2's piece"));
}

// Graph mode's mesh is the job's layout resolved over the plugin's devices.
TEST(GraphMeshSharding, DegreesThatDoNotFitTheDevicesAreNamed) {
  dist::ParallelismConfig p;
  auto devices = [&](int64_t n) {
    return GraphMesh(dist::MeshDegrees::from_config(p), n, dist::MeshUnits::devices);
  };
  p.tensor_parallel_degree = 3;
  EXPECT_TITAN_ERROR(devices(4), "tensor_parallel_degree = 3", "does not divide the 4 devices");
  p.tensor_parallel_degree = 2;
  p.data_parallel_shard_degree = 4;
  EXPECT_TITAN_ERROR(devices(4), "dp_shard 4 x tp 2 (8 devices) do not multiply to the 4 devices",
                     "data_parallel_shard_degree = -1");
  p.data_parallel_shard_degree = -1;
  EXPECT_EQ(devices(4).degree(MeshAxis::dp_shard), 2);
  // The parallelisms graph mode does not split are refused with the job's other refusals.
  JobConfig job;
  job.compile.enable = true;
  job.parallelism.context_parallel_degree = 2;
  EXPECT_TITAN_ERROR(refuse_unsupported(job, dist::MeshDegrees::from_config(job.parallelism)),
                     "context_parallel_degree = 2");
}

// The log is the console: graph mode's start-up lines leave its number format as it was, so that
// `titan train` prints the final loss as precisely over several devices as over one.
TEST(GraphParallel, TheLogKeepsItsNumberFormat) {
  if (!on_cpu_plugin()) GTEST_SKIP() << "4 devices come from the CPU plugin's device count";
  std::ostringstream log;
  Trainer(small_config(graph_run(kLayouts[0].keys, 1)), log).train();
  ASSERT_NE(log.str().find("on paper"), std::string::npos) << log.str();
  EXPECT_EQ(log.precision(), 6);
  EXPECT_EQ(log.flags() & std::ios::floatfield, std::ios::fmtflags{});
}

// Before anything compiles: the device count against the degrees, and the model's heads against tp.
TEST(GraphParallel, LayoutsThatCannotSplitAreNamedBeforeCompiling) {
  if (!on_cpu_plugin()) GTEST_SKIP() << "device counts of the CPU plugin";
  EXPECT_TITAN_ERROR(run(small_config(graph_run({"--compile.plugin_options=cpu_device_count=4",
                                                 "--parallelism.tensor_parallel_degree=3", "--training.seq_len=48"},
                                                1))),
                     "tensor_parallel_degree = 3", "does not divide the 4 devices", "cpu_device_count");
  EXPECT_TITAN_ERROR(run(small_config(graph_run({"--compile.plugin_options=cpu_device_count=4",
                                                 "--parallelism.data_parallel_shard_degree=2"}, 1))),
                     "do not multiply to the 4 devices");
  // A dim the plan splits must divide by tp (the devices are made for the degree): the vocabulary
  // of 2048 rows does not split 3 ways, and 16 heads do not split 32 ways.
  EXPECT_TITAN_ERROR(run(small_config(graph_run({"--parallelism.tensor_parallel_degree=3", "--training.seq_len=48"}, 1))),
                     "tok_embeddings.weight", "dim 0 of size 2048 does not split into 3 equal parts");
  EXPECT_TITAN_ERROR(run(small_config(graph_run({"--parallelism.tensor_parallel_degree=32"}, 1))),
                     "16 query and 16 key/value heads", "do not split into 32 equal parts");
  // Sequence parallelism splits the training sequence over tp (validation runs on the host's
  // whole model, so its length is free).
  EXPECT_TITAN_ERROR(run(small_config(graph_run({"--parallelism.tensor_parallel_degree=2", "--training.seq_len=31"}, 1))),
                     "training.seq_len = 31 does not divide by parallelism.tensor_parallel_degree = 2",
                     "enable_sequence_parallel = false");
}

}  // namespace
}  // namespace titan::train
