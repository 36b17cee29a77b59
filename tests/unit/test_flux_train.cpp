// FLUX training in the trainer (train/flux/flux_workload.h): the loss falls on a tiny synthetic
// encoding cache, a resumed run continues bit for bit, graph mode trains as eager does with one
// compile, on one device or FSDP over two, and resumes as its uninterrupted run, what is not built
// is refused by key, and
// flux-dev's dry run under FSDP holds each rank's share of the parameters, gradients and moments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "support/graph_harness.h"
#include "support/image_fixtures.h"
#include "support/synthetic_flux_cache.h"
#include "support/test_util.h"
#include "titan/core/error.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/core/rng.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/flux/encoding_cache.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

// A cache of `count` synthetic shapes encoded for flux-tiny at 32 px (8 x 8 latents, 16 packed
// tokens) with 8 T5 tokens, "" when the reference Python could not make the images.
fs::path tiny_cache(const std::string& name, int count) {
  const fs::path shapes = test::make_shapes(name + "_shapes", count);
  if (shapes.empty()) return {};
  const fs::path out = test::fresh_temp_dir(name + "_cache");
  test::write_synthetic_cache(shapes, out, {.latent_channels = 4, .latent_side = 8, .t5_length = 8,
                                            .t5_width = 64, .clip_width = 32});
  return out;
}

std::vector<std::string> tiny(const fs::path& cache, const fs::path& dir, std::vector<std::string> extra) {
  std::vector<std::string> o = {"--flux.cache_path=" + cache.string(), "--flux.image_size=32", "--flux.t5_length=8",
                                "--job.dump_folder=" + (dir / "out").string(),
                                "--checkpoint.folder=" + (dir / "ckpt").string(), "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                                "--training.local_batch_size=4", "--lr_scheduler.warmup_steps=2",
                                "--validation.enable=false", "--flux.validation_samples=8"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::string kTiny = std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_tiny.toml";

TrainResult run(const std::vector<std::string>& overrides, std::string* log_out = nullptr) {
  std::ostringstream log;
  TrainResult r = Trainer(load_job_config(kTiny, overrides), log).train();
  if (log_out) *log_out = log.str();
  return r;
}

double mean(const std::vector<double>& v, size_t first, size_t n) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(first),
                         v.begin() + static_cast<std::ptrdiff_t>(first + n), 0.0) /
         static_cast<double>(n);
}

TEST(FluxTrain, LossFallsOnATinySyntheticCache) {
  const fs::path cache = tiny_cache("flux_learns", 24);
  TITAN_NEED_IMAGE_REFERENCE(cache);
  const fs::path dir = test::fresh_temp_dir("flux_learns_run");
  std::string log;
  const TrainResult r =
      run(tiny(cache, dir, {"--training.steps=30", "--checkpoint.enable=false", "--validation.enable=true",
                            "--validation.freq=10", "--flux.validation_samples=4", "--validation.local_batch_size=4"}),
          &log);
  ASSERT_EQ(r.losses.size(), 30u);
  EXPECT_LT(mean(r.losses, 25, 5), 0.8 * mean(r.losses, 0, 5)) << log;
  ASSERT_EQ(r.validations.size(), 3u) << log;
  EXPECT_LT(r.validations[2].loss, r.validations[0].loss) << log;
  std::cout << "flux-tiny: training loss " << mean(r.losses, 0, 5) << " (steps 1-5) -> " << mean(r.losses, 25, 5)
            << " (steps 26-30); validation " << r.validations[0].loss << " (step 10) -> " << r.validations[2].loss
            << " (step 30)\n";
  EXPECT_NE(log.find("20 training samples"), std::string::npos) << log;
  EXPECT_NE(log.find("t = (i + 0.5) / 8"), std::string::npos) << log;
}

// Every file of a checkpoint's step folder but its metadata (which records times).
std::map<std::string, std::string> tensors_of(const fs::path& step_dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(step_dir))
    if (e.is_regular_file() && e.path().extension() != ".json")
      files[fs::relative(e.path(), step_dir).string()] = test::slurp(e.path());
  return files;
}

TEST(FluxTrain, AResumedRunContinuesBitForBit) {
  const fs::path cache = tiny_cache("flux_resume", 10);
  TITAN_NEED_IMAGE_REFERENCE(cache);
  const fs::path a = test::fresh_temp_dir("flux_resume_a"), b = test::fresh_temp_dir("flux_resume_b");
  const std::vector<std::string> saves = {"--checkpoint.enable=true", "--checkpoint.interval=3",
                                          "--checkpoint.last_save_model_only=false", "--checkpoint.keep_latest_k=0"};
  const TrainResult straight = run(tiny(cache, a, with(saves, {"--training.steps=7"})));
  const TrainResult first = run(tiny(cache, b, with(saves, {"--training.steps=3"})));
  const TrainResult resumed = run(tiny(cache, b, with(saves, {"--training.steps=7"})));
  EXPECT_EQ(resumed.resumed_from, 3);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), resumed.losses.begin(), resumed.losses.end());
  EXPECT_EQ(joined, straight.losses);
  EXPECT_EQ(tensors_of(a / "ckpt" / "step-7"), tensors_of(b / "ckpt" / "step-7"));
}

TEST(FluxTrain, RefusesByKeyWhatIsNotBuilt) {
  const fs::path dir = test::fresh_temp_dir("flux_refusals");
  std::ostringstream log;
  auto refused = [&](const std::vector<std::string>& extra) {
    return [&, extra] { Trainer(load_job_config(kTiny, tiny("/nonexistent", dir, extra)), log); };
  };
  EXPECT_TITAN_ERROR(refused({"--parallelism.tensor_parallel_degree=2"})(), "parallelism.tensor_parallel_degree = 2");
  EXPECT_TITAN_ERROR(refused({"--compile.enable=true", "--parallelism.context_parallel_degree=2"})(),
                     "parallelism.context_parallel_degree = 2 with compile.enable = true");
  EXPECT_TITAN_ERROR(refused({"--parallelism.pipeline_parallel_degree=2"})(),
                     "parallelism.pipeline_parallel_degree = 2");
  EXPECT_TITAN_ERROR(refused({"--training.seq_len=64"})(), "training.seq_len");
  EXPECT_TITAN_ERROR(refused({"--attention.block_q=64"})(), "attention.block_q / block_kv");
  EXPECT_TITAN_ERROR(refused({"--model.vocab_size=10"})(), "model.vocab_size");
  EXPECT_TITAN_ERROR(refused({"--flux.cache_path="})(), "flux.cache_path is empty");
  EXPECT_TITAN_ERROR(refused({"--flux.guidance=3.5"})(), "flux.guidance", "no guidance_in");
  EXPECT_TITAN_ERROR(refused({"--flux.timestep_sampling=uniform", "--flux.time_shift=3"})(),
                     "read only under flux.timestep_sampling");
  EXPECT_TITAN_ERROR(Trainer(load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml",
                                             {"--flux.prompt_dropout=0.1"}),
                             log),
                     "flux.prompt_dropout", "model.name = \"flux\"");
}

// The model's tensors of checkpoint folder `dir`.
std::map<std::string, Tensor> model_tensors(const fs::path& dir) {
  checkpoint::Reader reader(dir);
  checkpoint::Pieces pieces;
  for (const auto& [name, meta] : reader.metadata().tensors)
    if (name.starts_with("model.")) pieces[name] = checkpoint::whole(Tensor::zeros(meta.shape, {.dtype = meta.dtype}));
  reader.load(pieces, {.scope = "model."});
  std::map<std::string, Tensor> out;
  for (const auto& [name, piece] : pieces) out[name] = piece.data;
  return out;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// Graph mode (the step as one program, the double and single blocks as loops, AdamW on the
// device) against eager over 10 steps at a learning rate that moves the weights: every loss within
// 1e-4 and the final weights within 1e-3; the program compiled once. Then graph mode resumed from
// the graph run's step-5 checkpoint continues as that run did.
// The cache's sizes against [flux]'s, and a cache from before titan recorded the autoencoder's
// scaling: refused naming the keys, before the first step.
TEST(FluxTrain, ACacheThatDoesNotFitTheConfigIsRefusedNamingTheKeys) {
  const fs::path cache = tiny_cache("flux_misfit", 10);
  TITAN_NEED_IMAGE_REFERENCE(cache);
  const fs::path dir = test::fresh_temp_dir("flux_misfit_run");
  std::ostringstream log;
  auto train = [&](const std::vector<std::string>& extra, const fs::path& c) {
    return [&, extra, c] { Trainer(load_job_config(kTiny, tiny(c, dir, extra)), log); };
  };
  // 64 px at flux_tiny.toml's latent_downscale 4 is 16 x 16 latents; the cache holds 8 x 8.
  EXPECT_TITAN_ERROR(train({"--flux.image_size=64"}, cache)(), "latent_downscale", "[4, 16, 16]");
  EXPECT_TITAN_ERROR(train({"--flux.image_size=36"}, cache)(), "flux.image_size = 36",
                     "must be a multiple of 8");
  const fs::path old = test::fresh_temp_dir("flux_misfit_old_cache");
  fs::copy(cache, old, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  nlohmann::json index = nlohmann::json::parse(test::slurp(old / "index.json"));
  index.erase("scaling_factor");
  std::ofstream(old / "index.json") << index.dump();
  EXPECT_TITAN_ERROR(train({}, old)(), "records no autoencoder scaling_factor", "run titan flux encode again");
}

TEST(FluxTrain, GraphModeMatchesEagerCompilesOnceAndResumes) {
  const fs::path cache = tiny_cache("flux_graph", 12);
  TITAN_NEED_IMAGE_REFERENCE(cache);
  const fs::path e = test::fresh_temp_dir("flux_graph_eager"), g = test::fresh_temp_dir("flux_graph_graph"),
                 r = test::fresh_temp_dir("flux_graph_resumed");
  const std::vector<std::string> o = {"--training.steps=10", "--optimizer.lr=3e-3", "--checkpoint.enable=true",
                                      "--checkpoint.interval=5", "--checkpoint.last_save_model_only=false",
                                      "--checkpoint.keep_latest_k=0"};
  const std::vector<std::string> graph = {"--compile.enable=true"};
  const TrainResult eager = run(tiny(cache, e, o));
  std::string log;
  const TrainResult graphed = run(tiny(cache, g, with(o, graph)), &log);
  ASSERT_EQ(graphed.losses.size(), 10u) << log;
  double worst = 0;
  for (size_t i = 0; i < 10; ++i) {
    worst = std::max(worst, relative(graphed.losses[i], eager.losses[i]));
    EXPECT_LE(relative(graphed.losses[i], eager.losses[i]), 1e-4) << "step " << i + 1;
  }
  EXPECT_EQ(test::occurrences(log, "compiled in"), 1u) << log;
  EXPECT_EQ(test::occurrences(log, "compiled before"), 0u) << log;
  EXPECT_NE(log.find("graph on cpu"), std::string::npos) << log;
  const std::map<std::string, Tensor> eager_w = model_tensors(e / "ckpt" / "step-10"),
                                      graph_w = model_tensors(g / "ckpt" / "step-10");
  ASSERT_EQ(eager_w.size(), graph_w.size());
  double worst_weight = 0;
  for (const auto& [name, w] : eager_w) {
    EXPECT_TRUE(test::tensors_close(graph_w.at(name), w, 1e-3, name));
    worst_weight = std::max(worst_weight, test::max_rel_error(graph_w.at(name), w));
  }
  std::cout << "[ measured ] flux-tiny graph vs eager, 10 steps: largest relative loss difference " << worst
            << ", largest relative weight error " << worst_weight << "\n";

  // The resumed run reads the graph run's step-5 checkpoint.
  fs::create_directories(r / "ckpt");
  fs::copy(g / "ckpt" / "step-5", r / "ckpt" / "step-5", fs::copy_options::recursive);
  const TrainResult resumed = run(tiny(cache, r, with(o, graph)));
  EXPECT_EQ(resumed.resumed_from, 5);
  ASSERT_EQ(resumed.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(resumed.losses[i], graphed.losses[5 + i]) << "step " << i + 6;
  EXPECT_EQ(tensors_of(r / "ckpt" / "step-10"), tensors_of(g / "ckpt" / "step-10"));

  // Over two devices, FSDP in the program: 2 rows each are the eager run's 4.
  const fs::path two = test::fresh_temp_dir("flux_graph_two");
  std::string two_log;
  const TrainResult sharded = run(tiny(cache, two, with(o, with(graph, {"--compile.plugin_options=cpu_device_count=2",
                                                                         "--training.local_batch_size=2"}))),
                                  &two_log);
  ASSERT_EQ(sharded.losses.size(), 10u) << two_log;
  double worst_two = 0;
  for (size_t i = 0; i < 10; ++i) {
    worst_two = std::max(worst_two, relative(sharded.losses[i], eager.losses[i]));
    EXPECT_LE(relative(sharded.losses[i], eager.losses[i]), 1e-4) << "step " << i + 1;
  }
  EXPECT_NE(two_log.find("dp_shard 2"), std::string::npos) << two_log;
  for (const auto& [name, w] : model_tensors(two / "ckpt" / "step-10"))
    EXPECT_TRUE(test::tensors_close(w, eager_w.at(name), 1e-3, name));
  std::cout << "[ measured ] flux-tiny graph over 2 devices (FSDP) vs eager on 1, 10 steps: largest relative loss "
               "difference "
            << worst_two << "\n";
}

// flux-dev over 8, 64 and 256 FSDP ranks: each rank's parameters, gradients and AdamW moments
// within 10% of the whole model's over the ranks.
TEST(FluxTrain, DryRunOfFluxDevHoldsEachRanksShare) {
  const std::string dev = std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_dev.toml";
  std::ostringstream one_log;
  const MemoryPlan whole = dry_run(load_job_config(dev, {"--training.memory_check=warn"}), 1, 0, one_log).plan;
  const double total = static_cast<double>(whole.param_bytes + whole.optimizer_bytes) + static_cast<double>(whole.param_bytes);
  for (int ranks : {8, 64, 256}) {
    std::ostringstream log;
    const MemoryPlan p = dry_run(load_job_config(dev, {"--training.memory_check=warn"}), ranks, 0, log).plan;
    // At rest after a step: the shards, their gradients and their moments.
    const double mine = static_cast<double>(p.param_bytes + p.param_bytes + p.optimizer_bytes);
    EXPECT_LE(mine, 1.1 * total / ranks) << ranks << " ranks\n" << log.str();
    EXPECT_GE(mine, 0.9 * total / ranks) << ranks << " ranks\n" << log.str();
    EXPECT_NE(log.str().find("model flux/flux-dev: "), std::string::npos) << log.str();
  }
}

}  // namespace
}  // namespace titan::train
