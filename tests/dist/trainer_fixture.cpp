#include "trainer_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "support/paths.h"
#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"

namespace titan::train::testing {

namespace fs = std::filesystem;

namespace {

// Rank 0's `values` on every rank, of whatever length rank 0 has.
std::vector<double> from_rank_0(const std::vector<double>& values) {
  dist::ProcessGroup& world = dist::world();
  Tensor size = Tensor::full({1}, static_cast<double>(values.size()), {.dtype = kF64});
  world.broadcast(size, 0).wait();
  Tensor all = Tensor::zeros({static_cast<int64_t>(size.item())}, {.dtype = kF64});
  if (world.rank() == 0) std::copy(values.begin(), values.end(), all.data<double>());
  world.broadcast(all, 0).wait();
  return all.to_vector<double>();
}

}  // namespace

// Set by main() before any test runs.
extern int64_t g_job_id;
int64_t g_job_id = 0;

fs::path job_dir(int rank) {
  return fs::temp_directory_path() /
         ("titan_dist_test_" + std::to_string(g_job_id) + "_rank" + std::to_string(rank));
}

JobConfig small_config(const std::vector<std::string>& overrides, const std::string& config) {
  fs::path dir = job_dir(dist::world().rank());
  fs::create_directories(dir);
  fs::path text = dir / "corpus.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  std::vector<std::string> o = {"--training.dataset_path=" + text.string(), "--model.tokenizer_path=",
                                "--training.seq_len=32", "--training.steps=" + std::to_string(kSteps),
                                "--training.global_batch_size=" + std::to_string(kGlobalBatch),
                                "--lr_scheduler.warmup_steps=2", "--optimizer.lr=3e-3", "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                // debug.toml checkpoints for `make train`; a test that wants
                                // checkpoints turns them on, so no run resumes from another's.
                                "--checkpoint.enable=false", "--checkpoint.keep_latest_k=0",
                                // A stuck collective fails the test in a minute, not five.
                                "--comm.timeout_seconds=60"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return load_job_config(std::string(TITAN_SOURCE_DIR) + "/" + config, o);
}

models::llama3::ModelArgs tiny_llama3_args() {
  models::llama3::ModelArgs args;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 96;
  args.multiple_of = 16;
  args.max_seq_len = 16;
  return args;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string local_batch(int64_t ranks) {
  return "--training.local_batch_size=" + std::to_string(kGlobalBatch / ranks);
}

OneRankReference one_rank_reference(const std::vector<std::string>& overrides, const std::string& config) {
  // Many layouts of many tests compare with the same one-rank run, which on 2 shared cores is a
  // good part of the distributed suites' time: each is trained once per process. Every rank asks
  // for the same references in the same order, so every rank's cache holds the same keys.
  static std::map<std::vector<std::string>, OneRankReference> trained;
  std::vector<std::string> key = overrides;
  key.push_back(config);
  if (auto it = trained.find(key); it != trained.end()) return it->second;
  std::vector<std::string> o = overrides;
  o.push_back(local_batch(1));
  OneRankReference reference = one_rank_run(small_config(o, config));
  trained.emplace(std::move(key), reference);
  return reference;
}

OneRankReference one_rank_run(const JobConfig& cfg) {
  TrainResult one;
  if (dist::world().rank() == 0) {
    std::ostringstream log;
    one = Trainer(cfg, log, dist::ProcessGroup::single()).train();
  }
  std::vector<double> validation_losses;
  for (const ValidationMetrics& v : one.validations) validation_losses.push_back(v.loss);
  return {.losses = from_rank_0(one.losses),
          .grad_norms = from_rank_0(one.grad_norms),
          .validation_losses = from_rank_0(validation_losses)};
}

double expect_one_rank_figures(const TrainResult& got, const OneRankReference& want, const std::string& what) {
  EXPECT_EQ(got.losses.size(), want.losses.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < std::min(got.losses.size(), want.losses.size()); ++i) {
    worst = std::max(worst, std::abs(got.losses[i] - want.losses[i]) / want.losses[i]);
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << what << ", step " << i + 1;
    EXPECT_NEAR(got.grad_norms[i], want.grad_norms[i], 1e-4 * want.grad_norms[i]) << what << ", step " << i + 1;
  }
  return worst;
}

double expect_one_rank_validation(const TrainResult& got, const OneRankReference& want, const std::string& what) {
  EXPECT_EQ(got.validations.size(), want.validation_losses.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < std::min(got.validations.size(), want.validation_losses.size()); ++i) {
    const double w = want.validation_losses[i];
    worst = std::max(worst, std::abs(got.validations[i].loss - w) / w);
    EXPECT_NEAR(got.validations[i].loss, w, 1e-5 * w) << what << ", validation " << i;
  }
  return worst;
}

double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(kF32).to_vector<float>(), y = b.to(kF32).to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::abs(x[i])));
  }
  return worst / scale;
}

std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

ResumeAcrossLayouts::ResumeAcrossLayouts(const std::string& name)
    : dir(job_dir(0) / name),
      save({"--checkpoint.enable=true", "--checkpoint.interval=5", "--checkpoint.folder=" + dir.string(),
            "--checkpoint.keep_latest_k=0", "--checkpoint.last_save_model_only=false"}),
      resume(join(save, {"--checkpoint.load_step=5"})) {}

void ResumeAcrossLayouts::fresh() const {
  dist::ProcessGroup& world = dist::world();
  world.barrier().wait();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier().wait();
}

TrainResult ResumeAcrossLayouts::one_rank(const std::vector<std::string>& overrides, const std::string& config) const {
  dist::ProcessGroup& world = dist::world();
  TrainResult r;
  if (world.rank() == 0) {
    std::ostringstream log;
    r = Trainer(small_config(join({local_batch(1)}, overrides), config), log, dist::ProcessGroup::single()).train();
  }
  world.barrier().wait();
  return r;
}

void ResumeAcrossLayouts::expect_second_half(const TrainResult& r, const OneRankReference& want,
                                             const std::string& what) {
  ASSERT_EQ(r.resumed_from, 5) << what;
  ASSERT_EQ(r.losses.size(), 5u) << what;
  for (size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(r.losses[i], want.losses[5 + i], 1e-5 * want.losses[5 + i]) << what << ", step " << 6 + i;
}

}  // namespace titan::train::testing
