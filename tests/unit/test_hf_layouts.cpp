// The hf family's parallel layouts as the dry run builds them (rank 0 of a layout, on meta, its
// plans applied): a 7B Mistral-sized config.json planned without allocating it, and the layouts
// the family cannot run refused with what in config.json stands in the way and the key to change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "titan/core/allocator.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json tiny(const std::string& model_type, const json& keys) {
  json c = {{"model_type", model_type}, {"hidden_size", 64},
            {"intermediate_size", 96},  {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"vocab_size", 260},        {"max_position_embeddings", 128},
            {"rms_norm_eps", 1e-5}};
  if (!keys.is_null()) c.update(keys);
  return c;
}

// The dry run of rank 0 of `ranks` training the model `config` describes.
DryRunReport dry(const std::string& name, const json& config, int ranks, std::vector<std::string> overrides,
                 std::string* log = nullptr) {
  const fs::path dir = test::temp_dir("hf_layouts") / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  overrides.insert(overrides.begin(), {"--model.name=hf", "--model.hf_config=" + dir.string(),
                                       "--model.tokenizer_path=", "--training.seq_len=32"});
  std::ostringstream out;
  DryRunReport r =
      dry_run(load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", overrides), ranks,
              0, out);
  if (log) *log = out.str();
  return r;
}

// Mistral 7B v0.1's config.json: 7.24 billion parameters (29 GB in float32) planned over 8 FSDP
// ranks in a few MiB, each rank's parameters an eighth of the whole.
TEST(HfLayouts, DryRunPlansA7BMistralWithoutAllocatingIt) {
  const json mistral_7b = {{"model_type", "mistral"},    {"hidden_size", 4096},
                           {"intermediate_size", 14336}, {"num_hidden_layers", 32},
                           {"num_attention_heads", 32},  {"num_key_value_heads", 8},
                           {"vocab_size", 32000},        {"max_position_embeddings", 32768},
                           {"rms_norm_eps", 1e-5},       {"rope_theta", 10000.0},
                           {"sliding_window", 4096},     {"tie_word_embeddings", false}};
  CpuAllocator::instance().reset_peak();
  const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
  std::string log;
  const DryRunReport r =
      dry("mistral_7b", mistral_7b, 8, {"--training.seq_len=4096", "--training.memory_check=warn"}, &log);
  EXPECT_LT(CpuAllocator::instance().stats().peak_allocated_bytes - before, 64 << 20) << log;
  const double whole = 7241732096.0 * 4;
  EXPECT_GE(static_cast<double>(r.plan.param_bytes), whole / 8) << log;
  EXPECT_LT(static_cast<double>(r.plan.param_bytes), 1.01 * whole / 8) << log;
  EXPECT_EQ(r.plan.optimizer_bytes, 2 * r.plan.param_bytes) << log;
  EXPECT_NE(log.find("dry run of rank 0 of 8"), std::string::npos) << log;
  EXPECT_NE(log.find("7.24173 B parameters"), std::string::npos) << log;
  EXPECT_NE(log.find("memory plan (rank 0 of 8, eager)"), std::string::npos) << log;
}

// Ring attention carries each layer's window, cap and scale, and every RoPE table is cut to the
// rank's positions (tests/dist/test_hf_family.cpp trains them against one rank): context
// parallelism plans Gemma 2 and 3.
TEST(HfLayouts, ContextParallelismPlansWindowsCapsAndRopesPerLayerType) {
  const std::vector<std::string> cp = {"--parallelism.context_parallel_degree=2",
                                       "--parallelism.data_parallel_shard_degree=1"};
  const json gemma2 =
      tiny("gemma2", {{"head_dim", 16}, {"sliding_window", 8}, {"query_pre_attn_scalar", 24}});
  const json gemma3 =
      tiny("gemma3_text", {{"head_dim", 16},
                           {"sliding_window", 8},
                           {"layer_types", {"sliding_attention", "full_attention"}},
                           {"rope_parameters",
                            {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 100000.0}}},
                             {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}}}});
  for (const auto& [name, config] : {std::pair{"cp_gemma2", gemma2}, std::pair{"cp_gemma3", gemma3}}) {
    std::string log;
    dry(name, config, 2, cp, &log);
    EXPECT_NE(log.find("memory plan (rank 0 of 2, eager)"), std::string::npos) << log;
  }
}

// Tensor parallelism enters its split region at the norm before each sublayer, which post-norm
// blocks (OLMo 2) do not have.
TEST(HfLayouts, TensorParallelismRefusesPostNormBlocks) {
  EXPECT_TITAN_ERROR(
      dry("tp_olmo2", tiny("olmo2", {}), 2,
          {"--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1"}),
      "tensor parallelism: olmo2 blocks have no norm before attention",
      "parallelism.tensor_parallel_degree = 1");
}

// Biases after row-wise projections are added once, after the reduction (tests/dist/test_hf_family.cpp
// trains them against one rank): tensor parallelism plans them, replicated on every rank.
TEST(HfLayouts, TensorParallelismPlansRowWiseBiases) {
  std::string log;
  const json neox = tiny("gpt_neox", {{"num_key_value_heads", 4}, {"layer_norm_eps", 1e-5}});
  const DryRunReport r =
      dry("tp_neox", neox, 2,
          {"--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1"}, &log);
  EXPECT_NE(log.find("memory plan (rank 0 of 2, eager)"), std::string::npos) << log;
  EXPECT_GT(r.plan.param_bytes, 0) << log;
}

}  // namespace
}  // namespace titan::train
