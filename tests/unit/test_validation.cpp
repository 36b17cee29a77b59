// The validation loop ([validation], train/validator.h): what it measures, that it measures the
// same thing every pass, that training runs exactly as without it (data order, MoE load
// statistics and expert bias, resume), and where its figures go.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "titan/data/dataset.h"
#include "titan/data/tokenizer.h"
#include "titan/dist/process_group.h"
#include "titan/models/registry.h"
#include "titan/train/trainer.h"
#include "titan/train/validator.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeqLen = 32;

// A folder of this test's own with a corpus of a few dozen windows of kSeqLen.
fs::path test_dir() {
  const fs::path dir = test::temp_dir(std::string("validation_") +
                                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  if (!fs::exists(dir / "corpus.txt")) {
    fs::create_directories(dir);
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 60; ++i)
      f << "And God said, Let there be light: and there was light. " << i << "\n\n";
  }
  return dir;
}

// `base` (a shipped config) shrunk to a unit test's size, training and validating on the corpus,
// with `overrides` last.
JobConfig config(const std::vector<std::string>& overrides, const std::string& base = "llama3/debug.toml") {
  const fs::path dir = test_dir();
  const std::string corpus = (dir / "corpus.txt").string();
  std::vector<std::string> o = {"--training.dataset_path=" + corpus,
                                "--training.seq_len=" + std::to_string(kSeqLen),
                                "--training.local_batch_size=4",
                                "--training.steps=4",
                                "--lr_scheduler.warmup_steps=1",
                                "--optimizer.lr=3e-3",
                                "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false",
                                "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                "--checkpoint.enable=false",
                                "--validation.dataset_path=" + corpus,
                                "--validation.seq_len=" + std::to_string(kSeqLen),
                                "--validation.local_batch_size=4",
                                "--validation.steps=3"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/" + base, o);
}

TrainResult run(const JobConfig& cfg, std::string* log_out = nullptr) {
  std::ostringstream log;
  TrainResult r = Trainer(cfg, log).train();
  if (log_out) *log_out = log.str();
  return r;
}

// The validation set of `cfg` as its tokenizer reads it.
data::TokenStream validation_tokens(const JobConfig& cfg) {
  const auto tokenizer = data::load_tokenizer(cfg.model.tokenizer_path);
  const ValidationConfig& v = cfg.validation;
  return data::load_dataset(v.dataset_options(cfg.data),
                            *tokenizer)
      .stream;
}

std::vector<double> losses_of(const std::vector<ValidationMetrics>& validations) {
  std::vector<double> out;
  for (const ValidationMetrics& v : validations) out.push_back(v.loss);
  return out;
}

std::vector<int64_t> steps_of(const std::vector<ValidationMetrics>& validations) {
  std::vector<int64_t> out;
  for (const ValidationMetrics& v : validations) out.push_back(v.step);
  return out;
}

TEST(Validation, SectionHasTorchTitansKeysAndDefaults) {
  const ValidationConfig defaults = JobConfig{}.validation;
  EXPECT_FALSE(defaults.enable);
  EXPECT_EQ(defaults.dataset, "kjv");
  EXPECT_EQ(defaults.dataset_path, "");
  EXPECT_EQ(defaults.local_batch_size, 8);
  EXPECT_EQ(defaults.seq_len, -1);  // training.seq_len
  EXPECT_EQ(defaults.freq, 10);
  EXPECT_EQ(defaults.steps, -1);
  const JobConfig c = parse_job_config(
      "[training]\nseq_len = 512\n[validation]\nenable = true\ndataset = \"held_out\"\n"
      "dataset_path = \"v.jsonl\"\nlocal_batch_size = 2\nseq_len = 128\nfreq = 50\nsteps = 7\n",
      "v.toml");
  EXPECT_TRUE(c.validation.enable);
  EXPECT_EQ(c.validation.dataset, "held_out");
  EXPECT_EQ(c.validation.dataset_path, "v.jsonl");
  EXPECT_EQ(c.validation.local_batch_size, 2);
  EXPECT_EQ(c.validation.seq_len, 128);
  EXPECT_EQ(c.validation.freq, 50);
  EXPECT_EQ(c.validation.steps, 7);
  const std::string printed = to_toml(c);
  EXPECT_NE(printed.find("[validation]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\nfreq = 50  # validate after every this many steps, and after the last"),
            std::string::npos)
      << printed;
  EXPECT_EQ(to_json(parse_job_config(printed, "printed.toml")), to_json(c));
}

// One batch holding every window of the corpus is the same data for both: training's first batch
// is a permutation of the windows, validation's their stream order. With optimizer.lr = 0 the
// model validated after step 1 is the untrained one that step's loss was computed with.
TEST(Validation, UntrainedModelsLossEqualsTheFirstTrainingStepsLossOnTheSameData) {
  const int64_t windows = (validation_tokens(config({})).size() - 1) / kSeqLen;
  ASSERT_GE(windows, 8);
  const std::string batch = std::to_string(windows);
  const TrainResult r =
      run(config({"--optimizer.lr=0", "--training.steps=1", "--training.local_batch_size=" + batch,
                  "--validation.enable", "--validation.local_batch_size=" + batch, "--validation.steps=-1"}));
  ASSERT_EQ(r.losses.size(), 1u);
  ASSERT_EQ(r.validations.size(), 1u);
  EXPECT_EQ(r.validations[0].step, 1);
  EXPECT_EQ(r.validations[0].tokens, windows * kSeqLen);
  EXPECT_NEAR(r.validations[0].loss, r.losses[0], 1e-6 * r.losses[0]);
  EXPECT_DOUBLE_EQ(r.validations[0].perplexity(), std::exp(r.validations[0].loss));
}

TEST(Validation, EveryPassReadsTheSameBatchesAndGivesBitwiseTheSameLoss) {
  const JobConfig cfg = config({"--validation.enable"});
  Generator gen(static_cast<uint64_t>(cfg.training.seed));
  auto model = models::get_train_spec(cfg.model.name).build(cfg.model, cfg.training.seq_len, gen);
  Validator validator(cfg.validation, validation_tokens(cfg), -1, dist::ProcessGroup::single());
  EXPECT_EQ(validator.num_batches(), 3);
  const ValidationMetrics first = validator.validate(0, *model), second = validator.validate(0, *model);
  EXPECT_EQ(second.loss, first.loss);
  EXPECT_EQ(first.tokens, 3 * 4 * kSeqLen);
  EXPECT_TRUE(model->is_training()) << "validation must leave the model in training mode";

  // Through the trainer, every pass on an unchanging model (lr 0): the loader is rewound each time.
  const TrainResult r =
      run(config({"--optimizer.lr=0", "--training.steps=3", "--validation.enable", "--validation.freq=1"}));
  ASSERT_EQ(r.validations.size(), 3u);
  for (const ValidationMetrics& v : r.validations) EXPECT_EQ(v.loss, first.loss) << "step " << v.step;
}

// Validation every 2 steps leaves the training loss curve bit for bit as it is without: the
// training loader, the RNG and the parameters are untouched. The MoE model balances its experts
// with an auxiliary loss and a bias nudged by each step's token counts: tokens counted during
// validation would change the bias, and so the routing and losses of later steps, and the expert
// load the metrics report.
TEST(Validation, DoesNotChangeTheTrainingLossesOfTheFollowingSteps) {
  for (const char* base : {"llama3/debug.toml", "qwen3/debug_moe.toml"}) {
    const fs::path out = test_dir() / "out";
    auto records = [&](bool validate, TrainResult& r) {
      fs::remove_all(out);
      std::vector<std::string> o = {"--metrics.enable_jsonl=true", "--metrics.log_freq=1"};
      if (validate) o.insert(o.end(), {"--validation.enable", "--validation.freq=2"});
      r = run(config(o, base));
      std::vector<nlohmann::json> steps;
      std::ifstream in(out / "metrics.jsonl");
      for (std::string line; std::getline(in, line);)
        if (nlohmann::json j = nlohmann::json::parse(line); j.contains("loss")) steps.push_back(j);
      return steps;
    };
    TrainResult plain, validated;
    const std::vector<nlohmann::json> plain_steps = records(false, plain);
    const std::vector<nlohmann::json> validated_steps = records(true, validated);
    ASSERT_EQ(plain.losses.size(), 4u) << base;
    EXPECT_EQ(validated.losses, plain.losses) << base;
    EXPECT_EQ(validated.grad_norms, plain.grad_norms) << base;
    EXPECT_TRUE(plain.validations.empty()) << base;
    EXPECT_EQ(steps_of(validated.validations), (std::vector<int64_t>{2, 4})) << base;
    // The validation set is the training text: the loss falls on it as training goes.
    EXPECT_LT(validated.validations.back().loss, validated.validations.front().loss) << base;
    ASSERT_EQ(validated_steps.size(), plain_steps.size()) << base;
    for (size_t i = 0; i < plain_steps.size(); ++i)
      for (const char* key :
           {"loss", "grad_norm", "aux_loss", "moe/tokens_min", "moe/tokens_max", "moe/tokens_cv"})
        EXPECT_EQ(validated_steps[i].value(key, nlohmann::json()),
                  plain_steps[i].value(key, nlohmann::json()))
            << base << ", step " << i + 1 << ", " << key;
  }
}

// A run resumed from a checkpoint validates as the uninterrupted run does: validation keeps no
// state a checkpoint would have to hold.
TEST(Validation, ResumedRunTrainsAndValidatesAsTheUninterruptedOne) {
  const fs::path ckpt = test_dir() / "ckpt";
  fs::remove_all(ckpt);
  const std::vector<std::string> validate = {"--validation.enable", "--validation.freq=1",
                                             "--training.steps=4"};
  const TrainResult straight = run(config(validate));
  std::vector<std::string> saving = validate;
  saving.insert(saving.end(), {"--checkpoint.enable=true", "--checkpoint.interval=2",
                               "--checkpoint.last_save_model_only=false", "--checkpoint.keep_latest_k=0",
                               "--checkpoint.folder=" + ckpt.string()});
  run(config(saving));
  saving.push_back("--checkpoint.load_step=2");
  const TrainResult resumed = run(config(saving));
  EXPECT_EQ(resumed.resumed_from, 2);
  EXPECT_EQ(resumed.losses, std::vector<double>(straight.losses.begin() + 2, straight.losses.end()));
  EXPECT_EQ(steps_of(resumed.validations), (std::vector<int64_t>{3, 4}));
  const std::vector<double> straight_validations = losses_of(straight.validations);
  EXPECT_EQ(losses_of(resumed.validations),
            std::vector<double>(straight_validations.begin() + 2, straight_validations.end()));
  fs::remove_all(ckpt);
}

TEST(Validation, ConsoleAndMetricsJsonlHoldEachPass) {
  const fs::path out = test_dir() / "out";
  fs::remove_all(out);
  std::string log;
  const TrainResult r = run(config({"--validation.enable", "--validation.freq=2", "--training.steps=3",
                                    "--metrics.enable_jsonl=true", "--metrics.log_freq=1"}),
                            &log);
  ASSERT_EQ(steps_of(r.validations), (std::vector<int64_t>{2, 3})) << "every freq-th step and the last";
  EXPECT_NE(log.find("titan: validation every 2 steps and after the last: "), std::string::npos) << log;
  EXPECT_NE(log.find("(the training data), 3 batches of 4 x 32 tokens per rank"), std::string::npos) << log;
  std::vector<nlohmann::json> records;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (nlohmann::json j = nlohmann::json::parse(line); j.contains("validation/loss")) records.push_back(j);
  ASSERT_EQ(records.size(), 2u);
  for (size_t i = 0; i < records.size(); ++i) {
    const ValidationMetrics& v = r.validations[i];
    EXPECT_NE(log.find(format_validation_line(v)), std::string::npos) << log;
    EXPECT_NE(log.find("validate step " + std::to_string(v.step) + "  loss "), std::string::npos) << log;
    EXPECT_EQ(records[i].at("step").get<int64_t>(), v.step);
    EXPECT_EQ(records[i].at("validation/loss").get<double>(), v.loss);
    EXPECT_DOUBLE_EQ(records[i].at("validation/perplexity").get<double>(), std::exp(v.loss));
    EXPECT_EQ(records[i].at("validation/tokens").get<int64_t>(), 3 * 4 * kSeqLen);
    EXPECT_FALSE(records[i].contains("loss"));
  }
}

// TorchTitan's validator takes the training length when none is given: a shipped config with a
// shorter training.seq_len validates without naming validation.seq_len.
TEST(Validation, SeqLenLeftUnsetFollowsTrainingSeqLen) {
  const JobConfig shipped = load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml",
                                            {"--training.seq_len=64", "--validation.enable=true"});
  EXPECT_EQ(shipped.validation.seq_len, -1);
  EXPECT_EQ(shipped.validation.seq_len_with(shipped.training.seq_len), 64);
  std::ostringstream log;
  const TrainResult r = Trainer(config({"--validation.enable", "--validation.seq_len=-1"}), log).train();
  ASSERT_FALSE(r.validations.empty());
  EXPECT_EQ(r.validations.back().tokens, 3 * 4 * kSeqLen);
  EXPECT_NE(log.str().find("batches of 4 x " + std::to_string(kSeqLen) + " tokens per rank"),
            std::string::npos)
      << log.str();
}

TEST(Validation, ImpossibleSettingsAreClearErrorsBeforeTraining) {
  EXPECT_TITAN_ERROR(config({"--validation.enable", "--validation.seq_len=64"}),
                     "validation.seq_len = 64 exceeds training.seq_len = 32");
  // Out of the section's own ranges whether or not it is enabled.
  EXPECT_TITAN_ERROR(config({"--validation.steps=0"}), "validation.steps = 0");
  EXPECT_TITAN_ERROR(config({"--validation.freq=0"}), "validation.freq = 0");
  std::ostringstream log;
  EXPECT_TITAN_ERROR(Trainer(config({"--validation.enable", "--validation.steps=1000"}), log),
                     "validation.steps = 1000 batches of 4 windows exceed the validation set",
                     "set it to -1");
  EXPECT_TITAN_ERROR(Trainer(config({"--validation.enable", "--validation.local_batch_size=100000"}), log),
                     "too few for one batch of 100000 windows", "lower validation.local_batch_size");
  EXPECT_TITAN_ERROR(
      Trainer(config({"--validation.enable", "--validation.dataset_path=/nonexistent/v.txt"}), log),
      "validation.dataset_path: '/nonexistent/v.txt' does not exist");
  // Without dataset_path, dataset names the data: the error names the key that was set.
  EXPECT_TITAN_ERROR(
      Trainer(config({"--validation.enable", "--validation.dataset=nosuch", "--validation.dataset_path="}),
              log),
      "validation.dataset: 'nosuch' does not exist");
}

}  // namespace
}  // namespace titan::train
