// Generation over the KV cache: greedy decoding against the argmax of a full recompute, stopping
// (eos, max_new_tokens, the end of the context), reproducible sampling; and rebuilding a saved
// model from a checkpoint of titan train or titan convert, or from a Hugging Face folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/models/llama3/model.h"
#include "titan/models/registry.h"
#include "titan/rl/generate.h"
#include "titan/rl/saved_model.h"
#include "titan/train/config/job_config.h"
#include "titan/train/hf_interop.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using models::llama3::ModelArgs;
using models::llama3::Transformer;

// Grouped-query attention, 2 layers, 24 positions, 37 ids.
std::shared_ptr<Transformer> small_model() {
  return test::generation_llama3(24);
}

GenerateOptions greedy(int64_t max_new_tokens) {
  return {.max_new_tokens = max_new_tokens, .sampling = {.temperature = 0}};
}

TEST(Generate, GreedyIsTheArgmaxOfAFullRecomputeAtEachStep) {
  auto model = small_model();
  const std::vector<int64_t> prompt = {1, 5, 9, 30};
  GenerateResult r = generate(*model, prompt, greedy(10));
  ASSERT_EQ(r.tokens.size(), 10u);
  EXPECT_EQ(r.stop, StopReason::max_new_tokens);
  EXPECT_EQ(r.prompt_tokens, 4);
  EXPECT_GT(r.prefill_tokens_per_second(), 0);
  EXPECT_GT(r.decode_tokens_per_second(), 0);

  autograd::NoGradGuard no_grad;
  std::vector<int64_t> seq = prompt;
  for (int64_t token : r.tokens) {
    Tensor logits = (*model)(Tensor::from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
    std::vector<float> last = logits.narrow(1, logits.size(1) - 1, 1).to_vector<float>();
    const int64_t argmax = std::max_element(last.begin(), last.end()) - last.begin();
    EXPECT_EQ(token, argmax) << "after " << seq.size() << " tokens";
    seq.push_back(token);
  }
  EXPECT_EQ(generate(*model, prompt, greedy(10)).tokens, r.tokens) << "greedy must be deterministic";
}

TEST(Generate, StopsAtEos) {
  auto model = small_model();
  const std::vector<int64_t> prompt = {2, 7};
  std::vector<int64_t> free_run = generate(*model, prompt, greedy(8)).tokens;
  const int64_t eos = free_run[3];
  const size_t first =
      static_cast<size_t>(std::find(free_run.begin(), free_run.end(), eos) - free_run.begin());
  GenerateOptions opts = greedy(8);
  opts.eos_ids = {eos};
  GenerateResult r = generate(*model, prompt, opts);
  EXPECT_EQ(r.stop, StopReason::eos);
  EXPECT_EQ(r.tokens,
            std::vector<int64_t>(free_run.begin(), free_run.begin() + static_cast<int64_t>(first) + 1));
}

TEST(Generate, StopsAtTheEndOfTheContext) {
  auto model = small_model();
  // 22 of 24 positions: the token sampled from the prompt and two more fed back fill it.
  GenerateResult r = generate(*model, std::vector<int64_t>(22, 3), greedy(10));
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.stop, StopReason::context_full);
  r = generate(*model, std::vector<int64_t>(24, 3), greedy(10));
  EXPECT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.stop, StopReason::context_full);
  // As many new tokens as int64 holds: the cache is still sized by the context, without overflow.
  r = generate(*model, std::vector<int64_t>(22, 3), greedy(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.stop, StopReason::context_full);
}

TEST(Generate, SamplingIsReproducibleAndKeepsToTheVocabulary) {
  auto model = small_model();
  const std::vector<int64_t> prompt = {4};
  GenerateOptions opts{.max_new_tokens = 16, .vocab_size = 5, .sampling = {.temperature = 5, .seed = 3}};
  GenerateResult a = generate(*model, prompt, opts), b = generate(*model, prompt, opts);
  EXPECT_EQ(a.tokens, b.tokens);
  for (int64_t t : a.tokens) EXPECT_LT(t, 5);
  opts.vocab_size = 0;
  opts.sampling.seed = 4;
  EXPECT_NE(generate(*model, prompt, opts).tokens, a.tokens);
}

TEST(Generate, BadInputsAreClearErrors) {
  auto model = small_model();
  EXPECT_TITAN_ERROR(generate(*model, std::vector<int64_t>{}, greedy(4)), "prompt is empty");
  EXPECT_TITAN_ERROR(generate(*model, std::vector<int64_t>(25, 1), greedy(4)), "25 tokens", "context of 24");
  EXPECT_TITAN_ERROR(generate(*model, std::vector<int64_t>{1}, greedy(0)), "max_new_tokens = 0");
  GenerateOptions opts = greedy(4);
  opts.vocab_size = 38;
  EXPECT_TITAN_ERROR(generate(*model, std::vector<int64_t>{1}, opts), "vocabulary of 37");
  opts = greedy(4);
  opts.sampling.top_p = 0;
  EXPECT_TITAN_ERROR(generate(*model, std::vector<int64_t>{1}, opts), "top_p = 0");
}

// ---- rebuilding a saved model ----------------------------------------------------------------------

class GenerateFromCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir(std::string("generate_") +
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    // The debug model at the byte tokenizer's vocabulary, to keep the files small.
    cfg = train::parse_job_config(
        "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\nvocab_size = 259\n"
        "[training]\nseq_len = 32\n",
        "test.toml");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }

  // A model built from cfg, its weights from `seed`. (Initialising the debug model takes a good
  // part of a second on a busy machine, so the tests build few.)
  std::shared_ptr<models::CausalLM> build(uint64_t seed) const {
    Generator gen(seed);
    return models::get_train_spec("llama3").build(cfg.model, cfg.training.seq_len, gen);
  }

  // Saves `model`'s tensors as dir/step-<step> in `dtype`, as the trainer saves a model-only
  // export, with `state` (by default the trainer's, with cfg).
  void save(int64_t step, const nn::Module& model, DType dtype = kF32,
            const nlohmann::json& state = nullptr) {
    checkpoint::Pieces pieces;
    for (const auto& [name, t] : model.state_dict())
      pieces.emplace("model." + name, checkpoint::whole(Tensor::empty(t.sizes(), {.dtype = dtype}).copy_(t)));
    const nlohmann::json s =
        state.is_null() ? nlohmann::json{{"model_only", true}, {"config", train::to_json(cfg)}} : state;
    checkpoint::save(dir / ("step-" + std::to_string(step)), pieces, s);
  }

  fs::path dir;
  train::JobConfig cfg;
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

TEST_F(GenerateFromCheckpoint, ReadsTheLatestStepWithItsConfigAndWeights) {
  auto early = build(1), late = build(2);
  save(1, *early, kBF16);
  save(12, *late);
  save(3, *early);  // made last: the latest is the highest step, not the newest folder
  SavedModel t = read_saved_model(dir);
  EXPECT_EQ(t.dir, dir / "step-12");
  EXPECT_EQ(t.config.flavor, "debugmodel");
  EXPECT_EQ(t.context, 32);
  EXPECT_EQ(t.tokenizer_path, std::optional<std::string>(""));  // the run's: the byte tokenizer
  auto model = load_saved_model(t);
  EXPECT_EQ(model->max_seq_len(), 32);
  EXPECT_EQ(model->vocab_size(), 259);
  auto want = late->state_dict();
  for (const auto& [name, p] : model->state_dict()) EXPECT_EQ(max_abs_diff(p, want.at(name)), 0.0) << name;

  // A step folder is read as it is; a bf16 export is cast to the model's f32.
  SavedModel first = read_saved_model(dir / "step-1");
  EXPECT_EQ(first.dir, dir / "step-1");
  want = early->state_dict();
  for (const auto& [name, p] : load_saved_model(first)->state_dict())
    EXPECT_TRUE(test::tensors_close(p, want.at(name), 1e-2, name));
}

// An HF folder and its conversion: the model config.json describes, its context from
// max_position_embeddings, the same weights; the folder's tokenizer.json goes with it.
TEST_F(GenerateFromCheckpoint, ReadsAHuggingFaceFolderAndItsConversion) {
  auto model = build(3);
  const models::StateDictAdapter& adapter = models::hf_adapter("llama3");
  nlohmann::json config = adapter.hf_config(cfg.model, models::common::hf::ConfigLayout::transformers5);
  config["max_position_embeddings"] = 40;
  const fs::path hf = dir / "hf", converted = dir / "converted";
  train::save_hf_model(hf, adapter, config, model->state_dict(), kF32);
  train::import_hf_checkpoint(hf, converted / "step-0");
  const auto want = model->state_dict();
  for (const fs::path& path : {hf, converted}) {
    SavedModel s = read_saved_model(path);
    EXPECT_EQ(s.config.name, "llama3") << path;
    EXPECT_EQ(s.config.flavor, "debugmodel") << path;
    EXPECT_EQ(s.config.vocab_size, 259) << path;
    EXPECT_EQ(s.context, 40) << path;
    EXPECT_FALSE(s.tokenizer_path.has_value()) << path;
    auto loaded = load_saved_model(s);
    EXPECT_EQ(loaded->max_seq_len(), 40);
    for (const auto& [name, p] : loaded->state_dict())
      EXPECT_EQ(max_abs_diff(p, want.at(name)), 0.0) << path << " " << name;
  }
  std::ofstream(hf / "tokenizer.json") << "{}";
  EXPECT_EQ(read_saved_model(hf).tokenizer_path, hf.string());
}

TEST_F(GenerateFromCheckpoint, ErrorsSayWhatWasFound) {
  EXPECT_TITAN_ERROR(read_saved_model(dir / "nothing"), "does not exist");
  EXPECT_TITAN_ERROR(read_saved_model(dir), "holds no complete checkpoint", "is no Hugging Face folder");
  // All are refused before any model is built, so one small tensor stands for the weights.
  nn::Module weights;
  weights.register_parameter("w", Tensor::zeros({2}));
  save(5, weights, kF32, {{"step", 5}});
  EXPECT_TITAN_ERROR(read_saved_model(dir), "holds neither a job config", "titan convert --to titan");
  nlohmann::json config = train::to_json(cfg);
  config["training"]["sequence_length"] = 32;
  save(6, weights, kF32, {{"config", config}});
  EXPECT_TITAN_ERROR(read_saved_model(dir / "step-6"), "unknown key 'training.sequence_length'");
  save(7, weights, kF32, {{"hf_config", {{"model_type", "gpt2"}}}});
  EXPECT_TITAN_ERROR(read_saved_model(dir / "step-7"), "(state.hf_config)", "model_type \"gpt2\"");
}

}  // namespace
}  // namespace titan::rl
