// Supervised fine-tuning (training.objective = "sft"): prompt/completion JSONL packed into rows
// with the loss on completions only (data/sft_dataset.h), the loader's ignored labels, the [sft]
// keys, and SFT runs of the trainer.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/small_run.h"
#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/core/rng.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/loader.h"
#include "titan/data/sft_dataset.h"
#include "titan/data/tokenizer.h"
#include "titan/models/llama3/model.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/train/config/job_config.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using data::ByteTokenizer;
constexpr int32_t kBos = ByteTokenizer::kBeginOfText, kEos = ByteTokenizer::kEndOfText;
constexpr int64_t kIgnored = -100;

class SftData : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_temp_dir("sft_" + std::string(test_name())); }
  static const char* test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

  fs::path write(const std::string& name, const std::string& text) const {
    fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  data::SftDataset load(const fs::path& path, int64_t seq_len, data::SftOptions o = {}) const {
    o.files.path = path.string();
    o.seq_len = seq_len;
    return data::load_sft_dataset(o, *data::load_tokenizer(""));
  }

  fs::path dir_;
};

std::vector<int32_t> all_ids(const data::TokenStream& s) {
  std::vector<int32_t> ids(static_cast<size_t>(s.size()));
  s.read(0, s.size(), ids.data());
  return ids;
}

// Three examples of 5, 5 and 3 tokens.
const std::string kThree =
    "{\"prompt\": \"ab\", \"completion\": \"c\"}\n"
    "{\"prompt\": \"d\", \"completion\": \"ef\", \"id\": 2}\n"
    "\n"
    "{\"prompt\": \"\", \"completion\": \"g\"}\n";

TEST_F(SftData, PacksWholeExamplesWithTheLossOnCompletionsAndEos) {
  const data::SftDataset d = load(write("three.jsonl", kThree), 8);
  // Rows of 8: the second example does not fit after the first (5 + 5 > 8) and starts row 1,
  // where the third (3) fits after it; then one padding token for the last window's label.
  EXPECT_EQ(all_ids(d.data.stream), (std::vector<int32_t>{kBos, 'a', 'b', 'c', kEos, kEos, kEos, kEos,  //
                                                          kBos, 'd', 'e', 'f', kEos, kBos, 'g', kEos,   //
                                                          kEos}));
  ASSERT_TRUE(d.data.loss_mask);
  EXPECT_EQ(*d.data.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 0, 0,  //
                                                     0, 0, 1, 1, 1, 0, 1, 1,  //
                                                     0}));
  EXPECT_EQ(d.sft.examples, 3);
  EXPECT_EQ(d.sft.rows, 2);
  EXPECT_EQ(d.sft.tokens, 13);
  EXPECT_EQ(d.sft.loss_tokens, 7);
  EXPECT_EQ(d.sft.truncated, 0);
  EXPECT_EQ(d.data.stats.documents, 3);

  data::DataLoader loader(d.data.stream,
                          {.seq_len = 8, .local_batch_size = 2, .shuffle = false, .eos_id = kEos},
                          d.data.loss_mask);
  ASSERT_EQ(loader.num_windows(), 2);
  const data::Batch b = loader.next();
  EXPECT_EQ(b.inputs.to_vector<int64_t>(),
            (std::vector<int64_t>{kBos, 'a', 'b', 'c', kEos, kEos, kEos, kEos,  //
                                  kBos, 'd', 'e', 'f', kEos, kBos, 'g', kEos}));
  // A label is -100 unless its token is a completion's or the eos after one.
  const int64_t x = kIgnored;
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{x, x, 'c', kEos, x, x, x, x,  //
                                                                 x, 'e', 'f', kEos, x, 'g', kEos, x}));
  // Documents end after each eos: examples and every padding token apart.
  EXPECT_EQ(b.document_ids.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 2, 3,  //
                                                                       0, 0, 0, 0, 0, 1, 1, 1}));
}

TEST_F(SftData, WithoutPackingEachExampleHasARow) {
  const data::SftDataset d = load(write("three.jsonl", kThree), 8, {.packing = false});
  EXPECT_EQ(d.sft.rows, 3);
  EXPECT_EQ(all_ids(d.data.stream), (std::vector<int32_t>{kBos, 'a', 'b',  'c',  kEos, kEos, kEos, kEos,  //
                                                          kBos, 'd', 'e',  'f',  kEos, kEos, kEos, kEos,  //
                                                          kBos, 'g', kEos, kEos, kEos, kEos, kEos, kEos,  //
                                                          kEos}));
}

TEST_F(SftData, GzipJsonlReadsAsPlain) {
  const fs::path gz = dir_ / "three.jsonl.gz";
  gzFile f = gzopen(gz.c_str(), "wb9");
  ASSERT_NE(f, nullptr);
  gzwrite(f, kThree.data(), static_cast<unsigned>(kThree.size()));
  gzclose(f);
  EXPECT_EQ(all_ids(load(gz, 8).data.stream), all_ids(load(write("three.jsonl", kThree), 8).data.stream));
}

TEST_F(SftData, OverLongExamplesAreTruncatedSkippedOrRefused) {
  // 12 tokens, then 5.
  const fs::path path = write("long.jsonl",
                              "{\"prompt\": \"12+34=\", \"completion\": \"46xy\"}\n"
                              "{\"prompt\": \"1+\", \"completion\": \"1\"}\n");
  EXPECT_TITAN_ERROR(load(path, 8, {.over_length = data::OverLength::error}), path.string(), "line 1",
                     "12 tokens", "training.seq_len = 8", "sft.over_length");

  const data::SftDataset skipped = load(path, 8, {.over_length = data::OverLength::skip});
  EXPECT_EQ(skipped.sft.examples, 1);
  EXPECT_EQ(skipped.data.stats.skipped, (std::map<std::string, int64_t>{{"longer than seq_len", 1}}));

  // Cut to 8 tokens: [bos] "12+34=" "4", the loss on "4" alone.
  const data::SftDataset cut = load(path, 8);
  EXPECT_EQ(cut.sft.truncated, 1);
  EXPECT_EQ(cut.sft.examples, 2);
  const std::vector<int32_t> ids = all_ids(cut.data.stream);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 8),
            (std::vector<int32_t>{kBos, '1', '2', '+', '3', '4', '=', '4'}));
  EXPECT_EQ(std::vector<uint8_t>(cut.data.loss_mask->begin(), cut.data.loss_mask->begin() + 8),
            (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 1}));

  // A prompt that fills the row leaves nothing to learn: skipped and counted.
  const data::SftDataset no_completion = load(path, 7);
  EXPECT_EQ(no_completion.sft.examples, 1);
  EXPECT_EQ(no_completion.data.stats.skipped,
            (std::map<std::string, int64_t>{{"whose prompt fills seq_len", 1}}));
}

TEST_F(SftData, BadRowsAreErrorsNamingFileAndLineOrCountedSkips) {
  const fs::path path = write("bad.jsonl",
                              "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                              "not json\n"
                              "{\"prompt\": \"a\"}\n"
                              "{\"prompt\": 3, \"completion\": \"b\"}\n"
                              "{\"prompt\": \"a\", \"completion\": \"\"}\n"
                              "[1, 2]\n");
  struct Case {
    std::string line;
    std::string what;
  };
  // Each bad line alone after the good first one.
  std::istringstream lines(test::slurp(path));
  std::vector<std::string> all;
  for (std::string l; std::getline(lines, l);) all.push_back(l);
  const std::vector<Case> cases = {
      {all[1], "is not a JSON object"},
      {all[2], "has no field \"completion\" (sft.completion_field)"},
      {all[3], "the field \"prompt\" (sft.prompt_field) is number, not a string"},
      {all[4], "the completion is empty"},
      {all[5], "is not a JSON object"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].line);
    const fs::path one = write("bad" + std::to_string(i) + ".jsonl", all[0] + "\n" + cases[i].line + "\n");
    EXPECT_TITAN_ERROR(load(one, 8), one.string() + "' line 2", cases[i].what,
                       "training.bad_data = \"skip\"");
  }
  const data::SftDataset d = load(path, 8, {.files = {.bad_data = data::BadData::skip}});
  EXPECT_EQ(d.sft.examples, 1);
  EXPECT_EQ(d.data.stats.skipped, (std::map<std::string, int64_t>{{"not JSON objects", 2},
                                                                  {"with a field not a string", 1},
                                                                  {"with an empty completion", 1},
                                                                  {"without a field", 1}}));
  EXPECT_TITAN_ERROR(load(write("none.jsonl", "not json\n"), 8, {.files = {.bad_data = data::BadData::skip}}),
                     "holds no example", "1 skipped");
}

TEST_F(SftData, ChatRowsAndTextFilesAreRefused) {
  const fs::path chat = write("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  // Not bad data but another format: refused even when bad rows are skipped.
  EXPECT_TITAN_ERROR(load(chat, 8, {.files = {.bad_data = data::BadData::skip}}), chat.string(), "line 1",
                     "chat templates", "\"prompt\"", "\"completion\"");
  const fs::path text = write("plain.txt", "prompt and completion\n");
  EXPECT_TITAN_ERROR(load(text, 8), text.string(), "is not JSONL", "training.objective = \"sft\"");
}

TEST_F(SftData, TheCommandRefusesChatRowsAndSftKeysOfAnotherObjective) {
  const fs::path chat = write("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  test::CliRun r = test::run_titan(
      {"train", "--config", "configs/sft/debug.toml", "--training.dataset_path=" + chat.string(),
       "--training.steps=20", "--job.dump_folder=" + (dir_ / "out").string()},
      dir_);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("chat templates"), std::string::npos) << r.out << r.err;
  r = test::run_titan({"train", "--config", "configs/llama3/debug.toml", "--sft.over_length=skip",
                       "--training.steps=30", "--job.dump_folder=" + (dir_ / "out").string()},
                      dir_);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("sft.over_length (override"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("read only when training.objective = \"sft\""), std::string::npos) << r.out << r.err;
}

TEST(SftLoader, RefusesAMaskThatGivesAWindowsFirstTokenLoss) {
  const data::TokenStream tokens(std::vector<int32_t>(9, 1));
  auto mask = std::make_shared<std::vector<uint8_t>>(9, 0);
  (*mask)[4] = 1;
  // Token 4 is window 1's first input and window 0's last label.
  EXPECT_TITAN_ERROR(data::DataLoader(tokens, {.seq_len = 4, .local_batch_size = 1}, mask), "token 4",
                     "starts a window");
  EXPECT_TITAN_ERROR(data::DataLoader(tokens, {.seq_len = 4, .local_batch_size = 1},
                                      std::make_shared<std::vector<uint8_t>>(8, 0)),
                     "8 flags for a stream of 9 tokens");
  (*mask)[4] = 0;
  (*mask)[3] = 1;
  EXPECT_EQ(data::DataLoader(tokens, {.seq_len = 4, .local_batch_size = 1}, mask)
                .next()
                .labels.to_vector<int64_t>(),
            (std::vector<int64_t>{kIgnored, kIgnored, 1, kIgnored}));
}

TEST(SftConfig, KeysOfAnotherObjectiveAreRefused) {
  using train::parse_job_config;
  const train::JobConfig defaults = parse_job_config("", "t.toml");
  EXPECT_EQ(defaults.training.objective, "causal_lm");
  EXPECT_EQ(defaults.sft.prompt_field, "prompt");
  EXPECT_EQ(defaults.sft.completion_field, "completion");
  EXPECT_EQ(defaults.sft.over_length, "truncate");
  EXPECT_TRUE(defaults.sft.packing);

  EXPECT_TITAN_ERROR(parse_job_config("[sft]\nover_length = \"skip\"\n", "t.toml"),
                     "sft.over_length (t.toml:2)", "read only when training.objective = \"sft\"",
                     "it is \"causal_lm\"");
  EXPECT_TITAN_ERROR(parse_job_config("", "t.toml", {"--sft.packing=false"}), "sft.packing",
                     "read only when training.objective = \"sft\"");
  const train::JobConfig sft =
      parse_job_config("[training]\nobjective = \"sft\"\n[sft]\nprompt_field = \"q\"\n", "t.toml");
  EXPECT_EQ(sft.sft.prompt_field, "q");
  EXPECT_TITAN_ERROR(parse_job_config("[training]\nobjective = \"sft\"\ndataset_field = \"x\"\n", "t.toml"),
                     "training.dataset_field (t.toml:3) is not read when training.objective = \"sft\"");
  EXPECT_TITAN_ERROR(parse_job_config("[training]\nobjective = \"sft\"\nseq_len = 64\n", "t.toml",
                                      {"--parallelism.context_parallel_degree=2"}),
                     "context_parallel_degree = 2 is not supported with training.objective = \"sft\"");
  EXPECT_TITAN_ERROR(parse_job_config("[training]\nobjective = \"dpo\"\n", "t.toml"), "training.objective",
                     "causal_lm", "sft");
  // A key at its default is not refused: printed configs and checkpoints' copies hold every key.
  EXPECT_NO_THROW(parse_job_config("[sft]\npacking = true\n", "t.toml"));
  EXPECT_NO_THROW(parse_job_config(train::to_toml(defaults), "printed.toml"));
  const train::JobConfig shipped =
      train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/sft/debug.toml");
  EXPECT_EQ(shipped.training.objective, "sft");
  EXPECT_EQ(shipped.sft.over_length, "error");
  EXPECT_EQ(train::to_json(parse_job_config(train::to_toml(shipped), "printed.toml")),
            train::to_json(shipped));
  EXPECT_EQ(train::to_json(train::job_config_from_json(train::to_json(shipped), "saved")),
            train::to_json(shipped));
}

// A loss over labels that carry none of the masked tokens: the per-position cross-entropies of
// the counted positions, summed one at a time and divided by their count.
Tensor loss_over_completions(const Tensor& logits, const Tensor& labels) {
  const std::vector<int64_t> l = labels.to_vector<int64_t>();
  const int64_t seq = labels.size(1);
  Tensor sum;
  int64_t count = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(l.size()); ++i) {
    if (l[static_cast<size_t>(i)] == kIgnored) continue;
    const Tensor one = logits.narrow(0, i / seq, 1).narrow(1, i % seq, 1);
    const Tensor target = Tensor::from_vector(std::vector<int64_t>{l[static_cast<size_t>(i)]}, {1, 1});
    const Tensor term = ops::cross_entropy(one, target, kIgnored, ops::Reduction::sum);
    sum = sum.defined() ? ops::add(sum, term) : term;
    ++count;
  }
  return ops::scale(sum, 1.0 / static_cast<double>(count));
}

std::vector<Tensor> gradients(models::llama3::Transformer& model, const data::Batch& b,
                              const std::function<Tensor(const Tensor&, const Tensor&)>& loss_of) {
  model.zero_grad();
  loss_of(model(b.inputs), b.labels).backward();
  std::vector<Tensor> out;
  for (const auto& [name, p] : model.named_parameters()) out.push_back(p.grad().clone());
  return out;
}

TEST(SftLoss, MaskedTokensContributeNothingToTheGradients) {
  // Examples over the tiny model's 11 ids: bos 9, eos 10, prompts and completions of 0..8.
  std::vector<data::SftExample> examples;
  uint64_t drawn = 0;
  auto add = [&](data::SftExample& x, int32_t id, uint8_t loss) {
    x.ids.push_back(id);
    x.loss.push_back(loss);
  };
  auto digit = [&] { return static_cast<int32_t>(philox_uniform(5, drawn++) * 9); };
  for (int e = 0; e < 6; ++e) {
    data::SftExample x;
    add(x, 9, 0);
    for (int i = 0; i < 3 + e % 2; ++i) add(x, digit(), 0);
    for (int i = 0; i < 1 + e % 3; ++i) add(x, digit(), 1);
    add(x, 10, 1);
    examples.push_back(x);
  }
  data::SftPacked packed = data::pack_sft_examples(examples, 12, true, 10);
  const auto mask = std::make_shared<const std::vector<uint8_t>>(packed.loss);
  data::DataLoader loader(data::TokenStream(packed.ids),
                          {.seq_len = 12, .local_batch_size = 2, .shuffle = false}, mask);
  const data::Batch b = loader.next();
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
  ASSERT_GT(std::count(labels.begin(), labels.end(), kIgnored), 0);

  models::llama3::Transformer model(test::tiny_llama3_args(12));
  Generator init(3);
  model.init_weights(init);
  auto ignore = [](const Tensor& logits, const Tensor& labels) { return ops::cross_entropy(logits, labels); };
  const std::vector<Tensor> masked = gradients(model, b, ignore);
  const std::vector<Tensor> reference = gradients(model, b, loss_over_completions);
  ASSERT_EQ(masked.size(), reference.size());
  for (size_t i = 0; i < masked.size(); ++i) EXPECT_TRUE(test::tensors_close(masked[i], reference[i], 1e-5));

  // The same batch with every label counted (causal_lm's): other gradients, so the check can fail.
  data::DataLoader unmasked(data::TokenStream(packed.ids),
                            {.seq_len = 12, .local_batch_size = 2, .shuffle = false});
  const std::vector<Tensor> all = gradients(model, unmasked.next(), ignore);
  EXPECT_GT(test::max_rel_error(all[0], masked[0]), 1e-3);
}

// The sample data: two-digit additions.
std::vector<std::string> sft_overrides(std::vector<std::string> extra) {
  std::vector<std::string> o = {
      "--training.objective=sft",
      "--training.dataset_path=" + std::string(TITAN_SOURCE_DIR) + "/data/sft/addition_train.jsonl",
      "--model.tokenizer_path=",
      "--attention.document_masking=true",
      "--training.seq_len=32",
      "--optimizer.lr=3e-3"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

TEST(SftTrain, LossFallsAndTheLogSaysWhatWasPacked) {
  const train::JobConfig cfg = train::small_config(sft_overrides({"--training.steps=12"}));
  std::ostringstream log;
  const train::TrainResult r = train::Trainer(cfg, log).train();
  ASSERT_EQ(r.losses.size(), 12u);
  const double first = (r.losses[0] + r.losses[1]) / 2, last = (r.losses[10] + r.losses[11]) / 2;
  EXPECT_LT(last, 0.6 * first) << ::testing::PrintToString(r.losses);
  EXPECT_NE(log.str().find("objective sft: 400 examples packed into "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("(0 truncated, 0 skipped), "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("% of the rows' labels carry loss"), std::string::npos) << log.str();
}

TEST(SftTrain, ResumeEqualsUninterrupted) {
  const fs::path ckpt = test::fresh_temp_dir("sft_resume") / "ckpt";
  const std::vector<std::string> saves = {"--checkpoint.enable=true",
                                          "--checkpoint.interval=3",
                                          "--checkpoint.last_save_model_only=false",
                                          "--checkpoint.keep_latest_k=0",
                                          "--checkpoint.folder=" + ckpt.string(),
                                          "--training.steps=6"};
  const train::TrainResult straight = train::run(train::small_config(sft_overrides(saves)));
  ASSERT_EQ(straight.losses.size(), 6u);
  std::vector<std::string> resume = saves;
  resume.push_back("--checkpoint.load_step=3");
  const train::TrainResult resumed = train::run(train::small_config(sft_overrides(resume)));
  EXPECT_EQ(resumed.resumed_from, 3);
  EXPECT_EQ(resumed.losses, std::vector<double>(straight.losses.begin() + 3, straight.losses.end()));
  EXPECT_EQ(resumed.grad_norms,
            std::vector<double>(straight.grad_norms.begin() + 3, straight.grad_norms.end()));
}

// The compiled step reads the same -100 labels: its losses are eager's, to float32 rounding (see
// GraphTrain.MatchesEagerOverTwentySteps), over micro-batches with different counts of completion
// tokens.
TEST(SftTrain, GraphModeMatchesEager) {
  const std::vector<std::string> o =
      sft_overrides({"--training.local_batch_size=2", "--training.gradient_accumulation_steps=2"});
  std::vector<std::string> graph = o;
  graph.push_back("--compile.enable=true");
  const train::TrainResult e = train::run(train::small_config(o)), g = train::run(train::small_config(graph));
  ASSERT_EQ(g.losses.size(), e.losses.size());
  for (size_t i = 0; i < e.losses.size(); ++i) EXPECT_NEAR(g.losses[i], e.losses[i], 1e-5 * e.losses[i]) << i;
}

TEST(SftTrain, ValidationReadsSftData) {
  const std::string val = std::string(TITAN_SOURCE_DIR) + "/data/sft/addition_val.jsonl";
  const train::TrainResult r = train::run(train::small_config(
      sft_overrides({"--training.steps=2", "--validation.enable=true", "--validation.dataset_path=" + val,
                     "--validation.local_batch_size=2", "--validation.freq=2", "--validation.steps=-1"})));
  ASSERT_EQ(r.validations.size(), 1u);
  // Only completion labels count: 100 examples of 2 or 3 digits and an eos each.
  EXPECT_GE(r.validations[0].tokens, 300);
  EXPECT_LE(r.validations[0].tokens, 400);
}

}  // namespace
}  // namespace titan
