// titan's Llama 3 against Hugging Face transformers (tests/parity/hf_reference.py), both ways:
// a LlamaForCausalLM written by save_pretrained (one file, and shards) imports into titan with
// its logits; titan's export reproduces that very folder's tensors; and a model titan exports
// loads in transformers with titan's logits. Logits agree to 1e-4 (relative, f32), which needs
// the q/k row permutation that HF's rotate-half RoPE expects and every config field carried over.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/llama3/model.h"
#include "titan/models/llama3/state_dict_adapter.h"
#include "titan/train/hf_interop.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;
namespace llama3 = models::llama3;

const fs::path kRoot = fs::path(TITAN_PARITY_DIR) / "hf_llama3";

// The model a folder's config.json describes, with its weights.
std::unique_ptr<llama3::Transformer> import_model(const fs::path& dir) {
  checkpoint::HfReader reader(dir);
  auto model = std::make_unique<llama3::Transformer>(llama3::parse_hf_config(reader.config()).args);
  model->load_state_dict(train::load_hf_state(reader, kF32));
  return model;
}

Tensor logits_of(llama3::Transformer& model, const Tensor& tokens) {
  autograd::NoGradGuard no_grad;
  return model(tokens);
}

TEST(ParityHfLlama3, SavePretrainedImportsWithTransformersLogits) {
  ParityCase ref{checkpoint::read_safetensors((kRoot / "reference.safetensors").string())};
  auto model = import_model(kRoot / "single");
  EXPECT_TRUE(tensors_close(logits_of(*model, ref["in.tokens"]), ref["out.logits"], 1e-4, "logits"));

  // The sharded copy of the same model: the same tensors through the index.
  auto sharded = import_model(kRoot / "sharded");
  const nn::StateDict want = model->state_dict();
  for (const auto& [name, t] : sharded->state_dict()) EXPECT_TRUE(test::same_bits(t, want.at(name))) << name;
}

TEST(ParityHfLlama3, ExportReproducesSavePretrainedBitForBit) {
  auto model = import_model(kRoot / "single");
  const fs::path out = kRoot / "reexported";
  train::save_hf_model(out, models::hf_adapter("llama3"), llama3::to_hf_config(model->args()),
                       model->state_dict(), kF32);
  test::expect_same_hf_folder(out, kRoot / "single");
}

TEST(ParityHfLlama3, ExportLoadsInTransformersWithTitansLogits) {
  ParityCase ref{checkpoint::read_safetensors((kRoot / "reference.safetensors").string())};
  // transformers' architecture with weights of titan's drawing, large enough that attention
  // patterns, and so RoPE's layout, move the logits (at init scale they barely would).
  checkpoint::HfReader original(kRoot / "single");
  llama3::Transformer model(llama3::parse_hf_config(original.config()).args);
  {
    autograd::NoGradGuard no_grad;
    uint64_t seed = 100;
    for (auto& [name, p] : model.named_parameters()) {
      const bool norm = name.find("norm") != std::string::npos;
      p.copy_(rand_f32(p.sizes(), seed++, norm ? 0.6 : -0.25, norm ? 1.4 : 0.25));
    }
  }
  const fs::path out = kRoot / "from_titan", logits = kRoot / "from_titan_logits.safetensors";
  train::save_hf_model(out, models::hf_adapter("llama3"), llama3::to_hf_config(model.args()),
                       model.state_dict(), kF32);
  const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                          "/tests/parity/hf_reference.py' logits --family llama3 --model '" + out.string() +
                          "' --out '" + logits.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ParityCase hf{checkpoint::read_safetensors(logits.string())};
  EXPECT_TRUE(tensors_close(logits_of(model, hf["in.tokens"]), hf["out.logits"], 1e-4, "logits"));
}

}  // namespace
}  // namespace titan::test
