// titan's Qwen 3, dense and MoE, against Hugging Face (tests/parity/hf_reference.py), both ways:
// a Qwen3ForCausalLM (tied embeddings) and a Qwen3MoeForCausalLM (4 experts, 2 per token,
// renormalised) written by save_pretrained import into titan with their logits; titan's export
// reproduces those folders' tensors and config keys; and a model titan exports loads there with
// titan's logits. Logits agree to 1e-4 (relative, f32), which needs the experts in the right
// order and orientation, the QK-norms in place and every config field carried over.
//
// Where the installed transformers has no Qwen 3 (it needs >= 4.51, and so torch >= 2), the
// script stands in qwen3_torch.py's twin under transformers' names; the reference file says which.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/qwen3/model.h"
#include "titan/models/qwen3/state_dict_adapter.h"
#include "titan/train/hf_interop.h"

namespace titan::test {
namespace {

namespace fs = std::filesystem;
namespace qwen3 = models::qwen3;
using qwen3::Family;

fs::path root(Family family) {
  return fs::path(TITAN_PARITY_DIR) / (std::string("hf_") + qwen3::family_name(family));
}

// The reference logits, after saying which implementation computed them.
ParityCase reference(Family family) {
  ParityCase ref{checkpoint::read_safetensors((root(family) / "reference.safetensors").string())};
  std::cout << "reference: " << ref.file.metadata.at("reference") << "\n";
  return ref;
}

qwen3::ModelArgs args_of(const checkpoint::HfReader& reader, Family family) {
  return qwen3::parse_hf_config(family, reader.config());
}

// The model a folder's config.json describes, with its weights, read as titan convert and
// checkpoint.initial_load_path read them.
std::unique_ptr<qwen3::Transformer> import_model(const fs::path& dir, Family family) {
  checkpoint::HfReader reader(dir);
  EXPECT_EQ(train::hf_family(reader).name, qwen3::family_name(family));
  auto model = std::make_unique<qwen3::Transformer>(args_of(reader, family));
  model->load_state_dict(train::load_hf_state(reader, kF32));
  return model;
}

Tensor logits_of(qwen3::Transformer& model, const Tensor& tokens) {
  autograd::NoGradGuard no_grad;
  return model(tokens);
}

class ParityHfQwen3 : public ::testing::TestWithParam<Family> {};

INSTANTIATE_TEST_SUITE_P(Families, ParityHfQwen3, ::testing::Values(Family::dense, Family::moe),
                         [](const auto& info) { return std::string(qwen3::family_name(info.param)); });

TEST_P(ParityHfQwen3, SavePretrainedImportsWithItsLogits) {
  const ParityCase ref = reference(GetParam());
  auto model = import_model(root(GetParam()) / "single", GetParam());
  EXPECT_TRUE(tensors_close(logits_of(*model, ref["in.tokens"]), ref["out.logits"], 1e-4, "logits"));
}

TEST_P(ParityHfQwen3, ExportReproducesSavePretrainedBitForBit) {
  const fs::path original = root(GetParam()) / "single", out = root(GetParam()) / "reexported";
  auto model = import_model(original, GetParam());
  train::save_hf_model(out, models::hf_adapter(qwen3::family_name(GetParam())),
                       qwen3::to_hf_config(model->args()), model->state_dict(), kF32);
  test::expect_same_hf_folder(out, original);
}

TEST_P(ParityHfQwen3, ExportLoadsThereWithTitansLogits) {
  // The reference's architecture with weights of titan's drawing, large enough that attention
  // patterns and expert choices move the logits.
  const Family family = GetParam();
  qwen3::Transformer model(args_of(checkpoint::HfReader(root(family) / "single"), family));
  {
    autograd::NoGradGuard no_grad;
    uint64_t seed = 200;
    for (auto& [name, p] : model.named_parameters()) {
      const bool norm = name.find("norm") != std::string::npos;
      p.copy_(rand_f32(p.sizes(), seed++, norm ? 0.6 : -0.25, norm ? 1.4 : 0.25));
    }
  }
  const fs::path out = root(family) / "from_titan", logits = root(family) / "from_titan_logits.safetensors";
  train::save_hf_model(out, models::hf_adapter(qwen3::family_name(family)), qwen3::to_hf_config(model.args()),
                       model.state_dict(), kF32);
  const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                          "/tests/parity/hf_reference.py' logits --family " + qwen3::family_name(family) +
                          " --model '" + out.string() + "' --out '" + logits.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ParityCase hf{checkpoint::read_safetensors(logits.string())};
  EXPECT_TRUE(tensors_close(logits_of(model, hf["in.tokens"]), hf["out.logits"], 1e-4, "logits"));
}

}  // namespace
}  // namespace titan::test
