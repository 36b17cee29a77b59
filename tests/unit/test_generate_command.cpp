// `titan generate` as a user runs it: on a checkpoint that a short training run writes first, on
// a Hugging Face folder and its conversion by `titan convert`, and with the inputs it refuses.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "titan/data/tokenizer.h"
#include "titan/data/tokenizer_files.h"
#include "titan/models/registry.h"
#include "titan/rl/generate.h"
#include "titan/train/hf_interop.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kKjvTokenizer = fs::path(TITAN_SOURCE_DIR) / "data" / "kjv_tokenizer";

using test::CliRun;
using test::slurp;

// Each test has a folder of its own: ctest runs them in parallel processes.
class GenerateCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir(std::string("generate_command_") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Trains the debug model for 2 steps of 2 x 16 tokens; returns the checkpoint folder, which
  // holds the final export as step-2.
  fs::path train_checkpoint() const {
    {
      std::ofstream f(dir_ / "corpus.txt");
      for (int i = 0; i < 100; ++i)
        f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
    }
    train::JobConfig cfg = train::load_job_config(
        std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml",
        {"--training.dataset_path=" + (dir_ / "corpus.txt").string(), "--training.seq_len=16",
         "--training.local_batch_size=2", "--training.steps=2", "--lr_scheduler.warmup_steps=1",
         "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11", "--job.dump_folder=" + dir_.string(),
         "--checkpoint.enable=true", "--checkpoint.folder=ckpt",
         // Bytes, so that the prompt lengths below are known exactly.
         "--model.tokenizer_path="});
    std::ostringstream log;
    train::Trainer(cfg, log).train();
    return dir_ / "ckpt";
  }

  // The llama3 debug model with random weights, at the KJV tokenizer's 2048 ids and a context
  // of 32, written as the Hugging Face folder `hf` (with the tokenizer's files when
  // `with_tokenizer`); returned to generate from in-process.
  static std::shared_ptr<models::CausalLM> write_hf_folder(const fs::path& hf, bool with_tokenizer) {
    models::ModelConfig m;
    m.vocab_size = 2048;
    Generator gen(7);
    std::shared_ptr<models::CausalLM> model = models::get_train_spec(m.name).build(m, 32, gen);
    const models::StateDictAdapter& adapter = models::hf_adapter(m.name);
    json config = adapter.hf_config(m, models::common::hf::ConfigLayout::transformers5);
    config["max_position_embeddings"] = 32;
    train::save_hf_model(hf, adapter, config, model->state_dict(), kF32);
    if (with_tokenizer) data::copy_tokenizer(kKjvTokenizer, hf);
    return model;
  }

  // Runs `titan <command>` with `args` (each quoted for the shell).
  CliRun titan(const std::string& command, std::vector<std::string> args) const {
    args.insert(args.begin(), command);
    return test::run_titan(args, dir_);
  }

  CliRun generate(const std::vector<std::string>& args) const { return titan("generate", args); }

  fs::path dir_;
};

TEST_F(GenerateCommand, PrintsTheContinuationAndTokensPerSecond) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  const fs::path folder = train_checkpoint();
  CliRun r = generate(
      {"--checkpoint", folder.string(), "--prompt", "In the", "--max-new-tokens", "12", "--seed", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("In the")) << r.out;
  EXPECT_GT(r.out.size(), std::string("In the\n").size()) << "no continuation: " << r.out;
  EXPECT_NE(r.err.find("loaded " + (folder / "step-2").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("byte tokenizer (259 ids)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;

  // The step folder itself, with the same seed: the same text.
  CliRun again = generate({"--checkpoint", (folder / "step-2").string(), "--prompt", "In the",
                           "--max-new-tokens", "12", "--seed", "1"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.out, r.out);

  // Graph mode: the prefill and the decoding step compiled through the CPU plugin, the same text.
  CliRun graph = generate({"--checkpoint", folder.string(), "--prompt", "In the", "--max-new-tokens", "12", "--seed",
                           "1", "--mode", "graph"});
  ASSERT_EQ(graph.rc, 0) << graph.err;
  EXPECT_EQ(graph.out, r.out) << graph.err;
  EXPECT_NE(graph.err.find("generating in graph mode on cpu"), std::string::npos) << graph.err;
  EXPECT_NE(graph.err.find("captured the decoding step"), std::string::npos) << graph.err;
  // XLA's options reach its compilation: one XLA does not know fails it, naming the option.
  CliRun bad_option = generate({"--checkpoint", folder.string(), "--prompt", "In the", "--mode", "graph",
                                "--xla-options", "xla_no_such_option=true"});
  EXPECT_EQ(bad_option.rc, 1);
  EXPECT_NE(bad_option.err.find("No such compile option: 'xla_no_such_option'"), std::string::npos)
      << bad_option.err;

  // 20 bytes and bos: more than the 16 positions the model was trained with.
  CliRun long_prompt = generate({"--checkpoint", folder.string(), "--prompt", "twenty bytes of text"});
  EXPECT_EQ(long_prompt.rc, 1);
  EXPECT_NE(long_prompt.err.find("context of 16"), std::string::npos) << long_prompt.err;
}

// Each of these is refused before a model is built (the sampling options before the checkpoint
// is looked for).
TEST_F(GenerateCommand, BadInputsAreClearErrors) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  // Exits 1, saying `message` on stderr.
  const auto refused = [this](const std::vector<std::string>& args, const std::string& message) {
    const CliRun r = generate(args);
    EXPECT_EQ(r.rc, 1) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  };
  const std::string missing = (dir_ / "missing").string();
  refused({"--checkpoint", missing, "--prompt", "x"}, "does not exist");

  fs::create_directories(dir_ / "empty");
  refused({"--checkpoint", (dir_ / "empty").string(), "--prompt", "x"}, "holds no complete checkpoint");

  refused({"--checkpoint", missing, "--prompt", "x", "--top-p", "2"}, "top_p = 2");

  refused({"--checkpoint", missing, "--prompt", "x", "--top-k", "many"},
          "--top-k wants a whole number, got 'many'");

  refused({"--prompt", "x"}, "needs --checkpoint and --prompt");

  refused({"--checkpoint", missing, "--prompt-ids", "1,x,3"},
          "--prompt-ids (comma-separated token ids) wants a whole number, got 'x'");

  refused({"--checkpoint", missing, "--prompt-ids", "1,-2"}, "token id -2 is negative");

  refused({"--checkpoint", missing, "--prompt-ids", "1,"}, "got ''");

  refused({"--checkpoint", missing, "--prompt", "x", "--prompt-ids", "1"},
          "--prompt and --prompt-ids exclude each other");

  refused({"--checkpoint", missing, "--prompt-ids", "1", "--output", "yaml"},
          "--output must be text or json, got 'yaml'");

  refused({"--checkpoint", missing, "--prompt-ids", "1", "--mode", "fast"},
          "--mode must be eager or graph, got 'fast'");

  refused({"--checkpoint", missing, "--prompt-ids", "1", "--plugin", "cuda"}, "read only in graph mode");

  refused({"--checkpoint", missing, "--prompt-ids", "1", "--xla-options", "xla_cpu_prefer_vector_width=512"},
          "read only in graph mode");

  refused({"--checkpoint", missing, "--prompt-ids", "1", "--precision", "fp8"},
          "--precision must be float32 or bfloat16, got 'fp8'");
}

// Prompt and new tokens share the model's context (32 here): more new tokens than that is refused
// by the flag's name, up to the largest number the flag takes.
TEST_F(GenerateCommand, MaxNewTokensBeyondTheContextIsRefused) {
  const fs::path hf = dir_ / "hf";
  write_hf_folder(hf, false);
  for (const std::string n : {"33", "9223372036854775807"}) {
    const CliRun r = generate({"--checkpoint", hf.string(), "--prompt-ids", "3,4", "--max-new-tokens", n});
    EXPECT_EQ(r.rc, 1) << n;
    EXPECT_NE(r.err.find("--max-new-tokens " + n + " is more than the model's context of 32 positions"),
              std::string::npos)
        << r.err;
  }
  const CliRun r = generate({"--checkpoint", hf.string(), "--prompt-ids", "3,4", "--max-new-tokens", "32",
                             "--temperature", "0", "--output", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("stop_reason"), "context_full");
}

// What convert writes from an HF folder, and the folder itself, generate from: greedy from the
// same ids gives the ids rl::generate gives in-process on the weights written.
TEST_F(GenerateCommand, ConvertedHfFolderGivesTheIdsOfInProcessGeneration) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  const fs::path hf = dir_ / "hf", converted = dir_ / "converted";
  std::shared_ptr<models::CausalLM> model = write_hf_folder(hf, true);
  CliRun c =
      titan("convert", {"--to", "titan", "--hf", hf.string(), "--out", (converted / "step-0").string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.out.find("with its tokenizer"), std::string::npos) << c.out;

  const std::vector<int64_t> prompt = {1, 5, 9, 30, 2047};
  const std::shared_ptr<const data::Tokenizer> tokenizer = data::load_tokenizer(kKjvTokenizer.string());
  const rl::GenerateResult want = rl::generate(*model, prompt,
                                               {.max_new_tokens = 6,
                                                .eos_ids = {*tokenizer->eos_id()},
                                                .vocab_size = 2048,
                                                .sampling = {.temperature = 0}});
  std::vector<int32_t> text(want.tokens.begin(), want.tokens.end());
  if (want.stop == rl::StopReason::eos) text.pop_back();

  for (const fs::path& checkpoint : {converted, hf}) {
    CliRun r = generate({"--checkpoint", checkpoint.string(), "--prompt-ids", "1,5, 9,30,2047",
                         "--temperature", "0", "--max-new-tokens", "6", "--output", "json"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("context 32"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokenizer " + checkpoint.string()), std::string::npos) << r.err;
    const json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not one JSON object: " << r.out;
    EXPECT_EQ(j.at("prompt_ids").get<std::vector<int64_t>>(), prompt);
    EXPECT_EQ(j.at("generated_ids").get<std::vector<int64_t>>(), want.tokens) << checkpoint;
    EXPECT_EQ(j.at("stop_reason"), rl::stop_reason_name(want.stop));
    EXPECT_EQ(j.at("text"), tokenizer->decode(text));
    EXPECT_EQ(j.at("prefill").at("tokens"), 5);
    EXPECT_EQ(j.at("decode").at("tokens"), want.tokens.size());
    for (const char* phase : {"prefill", "decode"}) {
      EXPECT_GT(j.at(phase).at("seconds").get<double>(), 0) << phase;
      EXPECT_GT(j.at(phase).at("tokens_per_second").get<double>(), 0) << phase;
    }
  }

  // A text prompt, with the tokenizer convert carried over.
  CliRun r = generate({"--checkpoint", converted.string(), "--prompt", "In the beginning", "--temperature",
                       "0", "--max-new-tokens", "4"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("In the beginning")) << r.out;
}

TEST_F(GenerateCommand, WithoutATokenizerOnlyIdsAreTaken) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  const fs::path hf = dir_ / "hf";
  write_hf_folder(hf, false);
  CliRun r = generate({"--checkpoint", hf.string(), "--prompt", "In the"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no tokenizer goes with " + hf.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pass --tokenizer PATH"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--prompt-ids"), std::string::npos) << r.err;

  r = generate({"--checkpoint", hf.string(), "--prompt-ids", "3,2048"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("token id 2048 is not below the vocabulary size 2048"), std::string::npos) << r.err;

  // Text output is then the new ids; json has no text.
  r = generate(
      {"--checkpoint", hf.string(), "--prompt-ids", "3,4", "--max-new-tokens", "3", "--temperature", "0"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), ','), 2) << r.out;
  r = generate({"--checkpoint", hf.string(), "--prompt-ids", "3,4", "--max-new-tokens", "3", "--temperature",
                "0", "--output", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_FALSE(j.contains("text")) << r.out;
  EXPECT_EQ(j.at("generated_ids").size(), 3u) << r.out;
  EXPECT_EQ(j.at("stop_reason"), "max_new_tokens") << r.out;

  // config.json's eos_token_id stops it without a tokenizer, one id or a list of them.
  const std::vector<int64_t> greedy = j.at("generated_ids").get<std::vector<int64_t>>();
  const fs::path config_file = hf / "config.json";
  json config = json::parse(slurp(config_file));
  // Generation ends at the first of the eos ids it draws, which it keeps.
  const std::vector<int64_t> until_eos(greedy.begin(),
                                       std::find(greedy.begin(), greedy.end(), greedy[1]) + 1);
  int64_t never = 0;
  while (std::find(greedy.begin(), greedy.end(), never) != greedy.end()) ++never;
  for (const json& eos : {json(greedy[1]), json::array({never, greedy[1]})}) {
    config["eos_token_id"] = eos;
    std::ofstream(config_file) << config.dump();
    r = generate({"--checkpoint", hf.string(), "--prompt-ids", "3,4", "--max-new-tokens", "3",
                  "--temperature", "0", "--output", "json"});
    ASSERT_EQ(r.rc, 0) << r.err;
    j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j.at("generated_ids").get<std::vector<int64_t>>(), until_eos) << "eos_token_id " << eos.dump();
    EXPECT_EQ(j.at("stop_reason"), "eos") << r.out;
  }
  config["eos_token_id"] = json::array({1, 4096});
  std::ofstream(config_file) << config.dump();
  r = generate({"--checkpoint", hf.string(), "--prompt-ids", "3,4"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("\"eos_token_id[1]\" must be an integer in [0, 2047]"), std::string::npos) << r.err;
  config.erase("eos_token_id");
  std::ofstream(config_file) << config.dump();

  // --tokenizer provides one: the prompt is bos and the text's ids.
  r = generate({"--checkpoint", hf.string(), "--tokenizer", kKjvTokenizer.string(), "--prompt", "In the",
                "--max-new-tokens", "3", "--output", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << r.out;
  const std::shared_ptr<const data::Tokenizer> tokenizer = data::load_tokenizer(kKjvTokenizer.string());
  std::vector<int64_t> prompt = {*tokenizer->bos_id()};
  for (int32_t id : tokenizer->encode("In the")) prompt.push_back(id);
  EXPECT_EQ(j.at("prompt_ids").get<std::vector<int64_t>>(), prompt);
  EXPECT_TRUE(j.at("text").is_string()) << r.out;
}

}  // namespace
}  // namespace titan
