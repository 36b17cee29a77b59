// GRPO (rl/grpo_engine.h): the generator's log-probabilities against the trainer's for the same
// tokens (eager, batched and graph decoders), a step whose advantages are all zero leaves the
// weights as they were, the same seed gives the same run, and the config's refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/rng.h"
#include "titan/data/tokenizer.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/registry.h"
#include "titan/ops/token_log_probs.h"
#include "titan/rl/generate.h"
#include "titan/rl/graph_decoder.h"
#include "titan/rl/grpo_engine.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;

// The trainer's log-probabilities of `tokens` after `prompt`: one forward over the whole sequence.
std::vector<double> trainer_log_probs(models::CausalLM& model, const std::vector<int64_t>& prompt,
                                      const std::vector<int64_t>& tokens, double temperature) {
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  const auto n = static_cast<int64_t>(seq.size()) - 1;
  std::vector<int64_t> inputs(seq.begin(), seq.end() - 1), labels(static_cast<size_t>(n), -100);
  for (int64_t t = static_cast<int64_t>(prompt.size()) - 1; t < n; ++t)
    labels[static_cast<size_t>(t)] = seq[static_cast<size_t>(t + 1)];
  const Tensor logp = ops::token_log_probs(model(Tensor::from_vector(inputs, {1, n})),
                                           Tensor::from_vector(labels, {1, n}), temperature);
  const std::vector<float> all = logp.to_vector<float>();
  return {all.begin() + static_cast<std::ptrdiff_t>(prompt.size()) - 1, all.end()};
}

void expect_log_probs_match(models::CausalLM& model, const std::vector<int64_t>& prompt,
                            const GenerateResult& r, double temperature, const std::string& what) {
  ASSERT_EQ(r.logprobs.size(), r.tokens.size()) << what;
  const std::vector<double> trainer = trainer_log_probs(model, prompt, r.tokens, temperature);
  ASSERT_EQ(trainer.size(), r.tokens.size()) << what;
  for (size_t i = 0; i < trainer.size(); ++i)
    EXPECT_NEAR(r.logprobs[i], trainer[i], 1e-5) << what << ", token " << i;
}

TEST(GrpoLogProbs, GeneratorsRecordWhatTheTrainerComputesForTheSameTokens) {
  auto model = test::generation_llama3(40);
  const std::vector<int64_t> prompt = {1, 5, 9, 4};
  const GenerateOptions opts{.max_new_tokens = 12, .sampling = {.temperature = 0.8, .seed = 3}};
  const GenerateResult eager = generate(*model, prompt, opts);
  expect_log_probs_match(*model, prompt, eager, 0.8, "eager decoder");

  GraphDecoder graph(*model, {.runtime = test::test_runtime_options()});
  const GenerateResult compiled = generate(graph, prompt, opts);
  EXPECT_EQ(compiled.tokens, eager.tokens);
  expect_log_probs_match(*model, prompt, compiled, 0.8, "graph decoder");

  // A batch of rows, each with its own prompt and seed: the first draws what generate() drew with
  // seed 3.
  const std::vector<int64_t> other = {1, 6, 2, 8};
  const std::vector<std::span<const int64_t>> prompts = {prompt, prompt, other};
  const std::vector<uint64_t> seeds = {3, 4, 5};
  const std::vector<GenerateResult> group = generate_rows(*model, prompts, seeds, opts);
  ASSERT_EQ(group.size(), 3u);
  EXPECT_EQ(group[0].tokens, eager.tokens);
  for (size_t i = 0; i < group.size(); ++i)
    expect_log_probs_match(*model, i == 2 ? other : prompt, group[i], 0.8, "row " + std::to_string(i));
  EXPECT_NE(group[0].tokens, group[1].tokens);
  EXPECT_EQ(
      group[2].tokens,
      generate(*model, other, {.max_new_tokens = 12, .sampling = {.temperature = 0.8, .seed = 5}}).tokens);
}

TEST(GrpoLogProbs, GreedyRowsRecordTheirProbabilityAtTemperatureOne) {
  auto model = test::generation_llama3(40);
  const std::vector<int64_t> prompt = {2, 7};
  const GenerateResult r = generate(*model, prompt, {.max_new_tokens = 6, .sampling = {.temperature = 0}});
  expect_log_probs_match(*model, prompt, r, 1.0, "greedy");
}

// A job of one process over a model built from `cfg`, its engine made as the trainer makes it.
struct OneProcess {
  explicit OneProcess(const train::JobConfig& c) : cfg(c), spec(models::get_train_spec(cfg.model.name)) {
    Generator gen(static_cast<uint64_t>(cfg.training.seed));
    model = spec.build(cfg.model, cfg.training.seq_len, gen);
    named = model->named_parameters();
    optimizer = std::make_unique<optim::AdamW>(named, cfg.optimizer.adamw_options());
    engine = make_grpo_engine({.cfg = cfg,
                               .spec = spec,
                               .model = *model,
                               .optimizer = *optimizer,
                               .named_params = named,
                               .plans = plans,
                               .ddp = nullptr,
                               .mesh = mesh,
                               .world = world,
                               .log = log,
                               .tokenizer = *tokenizer});
  }
  train::StepStats step() {
    return engine->step(1, [] { return data::Batch{}; });
  }
  std::vector<std::vector<float>> weights() const {
    std::vector<std::vector<float>> w;
    for (const auto& [name, p] : named) w.push_back(p.to_vector<float>());
    return w;
  }
  double figure(const train::StepStats& s, const std::string& name) const {
    for (const auto& [n, v] : s.extra)
      if (n == name) return v;
    ADD_FAILURE() << "no figure " << name;
    return 0;
  }

  train::JobConfig cfg;
  const models::TrainSpec& spec;
  std::shared_ptr<const data::Tokenizer> tokenizer = data::load_tokenizer("");
  std::shared_ptr<models::CausalLM> model;
  std::vector<std::pair<std::string, Tensor>> named;
  std::unique_ptr<optim::AdamW> optimizer;
  models::Parallelized plans;
  dist::ProcessGroup world = dist::ProcessGroup::single();
  dist::DeviceMesh mesh{world, dist::ParallelDims()};
  std::ostringstream log;
  std::unique_ptr<train::StepEngine> engine;
};

// Addition prompts in a file of this test's own.
fs::path prompts_file(const std::string& name) {
  const fs::path dir = test::fresh_temp_dir("grpo_" + name);
  const fs::path path = dir / "prompts.jsonl";
  std::ofstream f(path);
  for (int i = 0; i < 12; ++i)
    f << "{\"prompt\": \"" << i << "+" << 2 * i << "=\", \"answer\": \"" << 3 * i << "\"}\n";
  return path;
}

train::JobConfig grpo_config(const std::string& name, const std::vector<std::string>& overrides) {
  std::vector<std::string> o = {"--training.objective=grpo",
                                "--grpo.prompts_path=" + prompts_file(name).string(),
                                "--model.tokenizer_path=",
                                "--model.vocab_size=259",
                                "--model.n_layers=1",
                                "--training.seq_len=24",
                                "--training.local_batch_size=4",
                                "--optimizer.weight_decay=0",
                                "--optimizer.lr=1e-3",
                                "--grpo.prompts_per_step=2",
                                "--grpo.group_size=4",
                                "--grpo.max_new_tokens=6"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return train::parse_job_config("[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n", name + ".toml", o);
}

TEST(GrpoStep, ZeroAdvantagesLeaveTheWeightsUnchanged) {
  // Every completion matches: every group's rewards are equal, so every advantage is 0.
  OneProcess job(grpo_config("zero", {"--grpo.reward_kind=regex", "--grpo.reward_pattern=.*"}));
  const auto before = job.weights();
  const train::StepStats s = job.step();
  EXPECT_EQ(job.figure(s, "reward/mean"), 1.0);
  EXPECT_EQ(job.figure(s, "reward/groups_all_equal"), 1.0);
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_EQ(s.grad_norm, 0.0);
  EXPECT_EQ(job.weights(), before);
}

TEST(GrpoStep, MixedRewardsMoveTheWeightsAndTheSameSeedRepeatsTheRun) {
  // A random byte model writes a digit first in about 1 completion in 26: mixed groups are likely
  // over a few steps of 8 completions each (the seed below has some).
  const std::vector<std::string> o = {"--grpo.reward_kind=regex", "--grpo.reward_pattern=[0-9]",
                                      "--grpo.temperature=1.5", "--training.seed=2"};
  OneProcess a(grpo_config("repeat_a", o)), b(grpo_config("repeat_b", o));
  double moved = 0;
  for (int step = 0; step < 3; ++step) {
    const train::StepStats sa = a.step(), sb = b.step();
    EXPECT_EQ(sa.loss, sb.loss) << "step " << step;
    EXPECT_EQ(sa.grad_norm, sb.grad_norm) << "step " << step;
    EXPECT_EQ(a.figure(sa, "reward/mean"), b.figure(sb, "reward/mean"));
    EXPECT_LE(a.figure(sa, "policy/logp_diff_max"), 1e-5) << "step " << step;
    moved = std::max(moved, sa.grad_norm);
  }
  EXPECT_GT(moved, 0.0) << "no step had a group of mixed rewards; pick another seed";
  EXPECT_EQ(a.weights(), b.weights());
}

// max_staleness = 1: the generator (a copy) reads the weights every other step, so step 2 draws
// with the weights step 1 started from and step 3 with fresh ones.
TEST(GrpoStep, AStaleGeneratorLagsByTheStepsAllowed) {
  OneProcess job(
      grpo_config("stale", {"--grpo.reward_kind=regex", "--grpo.reward_pattern=[0-9]",
                            "--grpo.temperature=1.5", "--training.seed=2", "--grpo.max_staleness=1"}));
  std::vector<train::StepStats> s;
  for (int step = 0; step < 3; ++step) s.push_back(job.step());
  EXPECT_LE(job.figure(s[0], "policy/logp_diff_max"), 1e-5);
  ASSERT_GT(s[0].grad_norm, 0.0) << "step 1 moved nothing: pick another seed";
  EXPECT_GT(job.figure(s[1], "policy/logp_diff_max"), 1e-4);
  EXPECT_LE(job.figure(s[2], "policy/logp_diff_max"), 1e-5);
}

// Graph mode's decoder draws the rollouts one row at a time through the PJRT plugin, the eager
// model draws them in batches: the same seeds give the same completions, so the same steps.
TEST(GrpoStep, GraphGeneratorTakesTheEagerGeneratorsSteps) {
  const std::vector<std::string> o = {"--grpo.reward_kind=regex", "--grpo.reward_pattern=[0-9]",
                                      "--grpo.temperature=1.5", "--training.seed=2"};
  OneProcess eager(grpo_config("eager_generator", o));
  std::vector<std::string> graph_o = o;
  graph_o.push_back("--grpo.generator=graph");
  if (const char* plugin = std::getenv("TITAN_GRAPH_PLUGIN"); plugin && *plugin)
    graph_o.push_back(std::string("--compile.plugin=") + plugin);
  if (const char* options = std::getenv("TITAN_GRAPH_PLUGIN_OPTIONS"); options && *options)
    graph_o.push_back(std::string("--compile.plugin_options=") + options);
  OneProcess graph(grpo_config("graph_generator", graph_o));
  for (int step = 0; step < 2; ++step) {
    const train::StepStats a = eager.step(), b = graph.step();
    EXPECT_EQ(eager.figure(a, "response/length"), graph.figure(b, "response/length")) << "step " << step;
    EXPECT_EQ(eager.figure(a, "reward/mean"), graph.figure(b, "reward/mean")) << "step " << step;
    EXPECT_NEAR(a.loss, b.loss, 1e-5) << "step " << step;
  }
}

// The graph decoder compiles with compile.xla_options: one XLA does not know fails its compile.
TEST(GrpoStep, GraphGeneratorCompilesWithTheXlaOptions) {
  OneProcess graph(grpo_config("graph_xla_options", {"--grpo.generator=graph",
                                                     "--compile.xla_options=xla_no_such_option=true"}));
  EXPECT_TITAN_ERROR(graph.step(), "No such compile option: 'xla_no_such_option'");
}

std::vector<double> train_grpo(const train::JobConfig& c) {
  std::ostringstream log;
  return train::Trainer(c, log, dist::ProcessGroup::single(), objective_engine(c)).train().losses;
}

// With the KL, a resumed run takes its reference from checkpoint.initial_load_path again: it
// continues the uninterrupted run exactly. A run from random weights cannot resume with it.
TEST(GrpoStep, ResumedRunWithTheKlReadsItsReferenceAgain) {
  const std::vector<std::string> o = {
      "--grpo.reward_kind=regex",    "--grpo.reward_pattern=[0-9]",  "--grpo.temperature=1.5",
      "--training.seed=2",           "--grpo.kl_coef=0.5",           "--checkpoint.enable",
      "--checkpoint.interval=1",     "--checkpoint.keep_latest_k=0", "--lr_scheduler.warmup_steps=0",
      "--metrics.enable_jsonl=false"};
  const fs::path dir = test::fresh_temp_dir("grpo_kl_resume");
  std::vector<std::string> start = o;
  start.insert(start.end(),
               {"--training.steps=1", "--job.dump_folder=" + (dir / "start").string(), "--grpo.kl_coef=0"});
  train_grpo(grpo_config("kl_start", start));
  std::vector<std::string> run = o;
  run.insert(run.end(),
             {"--training.steps=3", "--job.dump_folder=" + (dir / "run").string(),
              "--checkpoint.initial_load_path=" + (dir / "start" / "checkpoint" / "step-1").string()});
  const train::JobConfig c = grpo_config("kl_run", run);
  const std::vector<double> straight = train_grpo(c);
  ASSERT_EQ(straight.size(), 3u);
  for (const char* step : {"step-2", "step-3"}) fs::remove_all(dir / "run" / "checkpoint" / step);
  const std::vector<double> resumed = train_grpo(c);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0], straight[1]);
  EXPECT_EQ(resumed[1], straight[2]);

  std::vector<std::string> random = o;
  random.insert(random.end(), {"--training.steps=2", "--job.dump_folder=" + (dir / "random").string()});
  const train::JobConfig r = grpo_config("kl_random", random);
  train_grpo(r);
  fs::remove_all(dir / "random" / "checkpoint" / "step-2");
  EXPECT_TITAN_ERROR(train_grpo(r), "on a resumed run that started from random weights");
}

// checkpoint.initial_load_path is read by a run that saves no checkpoints of its own.
TEST(GrpoStep, StartsFromInitialLoadPathWithoutCheckpointing) {
  const fs::path dir = test::fresh_temp_dir("grpo_initial_load_runs");
  const std::vector<std::string> o = {"--lr_scheduler.warmup_steps=0", "--metrics.enable_jsonl=false",
                                      "--training.steps=1"};
  std::vector<std::string> save = o;
  save.insert(save.end(), {"--checkpoint.enable", "--checkpoint.interval=1", "--job.dump_folder=" + (dir / "save").string()});
  train_grpo(grpo_config("initial_save", save));
  std::vector<std::string> missing = o;
  missing.insert(missing.end(), {"--job.dump_folder=" + (dir / "missing").string(),
                                 "--checkpoint.initial_load_path=" + (dir / "nowhere").string()});
  EXPECT_ANY_THROW(train_grpo(grpo_config("initial_missing", missing)));
  std::vector<std::string> load = o;
  load.insert(load.end(), {"--job.dump_folder=" + (dir / "load").string(),
                           "--checkpoint.initial_load_path=" + (dir / "save" / "checkpoint" / "step-1").string()});
  std::ostringstream log;
  const train::JobConfig c = grpo_config("initial_load", load);
  train::Trainer(c, log, dist::ProcessGroup::single(), objective_engine(c)).train();
  EXPECT_NE(log.str().find("titan: loaded the weights of " + (dir / "save" / "checkpoint" / "step-1").string()),
            std::string::npos)
      << log.str();
}

TEST(GrpoConfig, KeysAreReadOnlyUnderTheObjectiveAndItsLayoutIsDataParallel) {
  EXPECT_TITAN_ERROR(
      train::parse_job_config("[model]\nname = \"llama3\"\n[grpo]\ngroup_size = 4\n", "a.toml"),
      "grpo.group_size = 4 is read only under training.objective = \"grpo\"");
  EXPECT_TITAN_ERROR(
      train::parse_job_config("[model]\nname = \"llama3\"\n[training]\nobjective = \"grpo\"\n", "b.toml"),
      "grpo.prompts_path is empty");
  const std::string grpo =
      "[model]\nname = \"llama3\"\n[training]\nobjective = \"grpo\"\n[grpo]\nprompts_path = \"p\"\n";
  EXPECT_TITAN_ERROR(
      train::parse_job_config(grpo, "c.toml", {"--parallelism.tensor_parallel_degree=2"}),
      "parallelism.tensor_parallel_degree = 2: GRPO splits its rollouts and updates over data-parallel");
  EXPECT_TITAN_ERROR(train::parse_job_config(grpo, "d.toml", {"--validation.enable"}),
                     "GRPO measures held-out greedy accuracy instead");
  EXPECT_TITAN_ERROR(train::parse_job_config(grpo, "e.toml", {"--training.dataset_path=x"}),
                     "training.dataset_path = \"x\" is not read under training.objective = \"grpo\"");
  EXPECT_TITAN_ERROR(train::parse_job_config(grpo, "f.toml", {"--compile.enable"}),
                     "GRPO's update runs eagerly");
  EXPECT_TITAN_ERROR(train::parse_job_config(grpo, "k.toml", {"--training.gradient_accumulation_steps=2"}),
                     "training.gradient_accumulation_steps are not read under training.objective = \"grpo\"");
  // The graph decoder reads [compile]'s plugin keys without graph mode's training step.
  EXPECT_NO_THROW(
      train::parse_job_config(grpo, "g.toml", {"--grpo.generator=graph", "--compile.plugin_options=a=1"}));
  EXPECT_TITAN_ERROR(train::parse_job_config(grpo, "h.toml", {"--compile.plugin_options=a=1"}),
                     "compile.plugin_options is read only in graph mode");
  EXPECT_NO_THROW(
      train::parse_job_config(grpo, "l.toml", {"--grpo.generator=graph", "--compile.xla_options=xla_a=1"}));
  EXPECT_TITAN_ERROR(train::parse_job_config(grpo, "m.toml", {"--compile.xla_options=xla_a=1"}),
                     "compile.xla_options is read only in graph mode");
  // A config written back carries every key: it reads again.
  const train::JobConfig c = train::parse_job_config(grpo, "i.toml");
  EXPECT_NO_THROW(train::parse_job_config(train::to_toml(c), "j.toml"));
}

TEST(GrpoStep, RefusesWhatItCannotRun) {
  EXPECT_TITAN_ERROR(
      OneProcess(grpo_config("odd", {"--grpo.mini_batches=3"})),
      "grpo.prompts_per_step = 2 does not split into grpo.mini_batches = 3 x 1 data-parallel ranks");
  EXPECT_TITAN_ERROR(OneProcess(grpo_config("long", {"--grpo.max_new_tokens=24"})),
                     "more than the 1 that training.seq_len leaves before grpo.max_new_tokens");
}

}  // namespace
}  // namespace titan::rl
