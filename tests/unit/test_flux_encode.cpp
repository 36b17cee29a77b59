// `titan flux encode` on a diffusers FLUX folder of tiny seeded components: the cache holds what
// diffusers' FluxPipeline would compute (T5's hidden states and CLIP's pooled vector of each
// caption, the autoencoder's latent mean and log-variance of each image), the empty caption's
// encodings beside them, and a second run keeps every shard.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "support/hf_tokenizer.h"
#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/train/flux/encoding_cache.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// tests/parity/flux_encode_reference.py's output, made when missing or older than the script.
fs::path flux_encode_reference() {
  const fs::path out = fs::path(TITAN_PARITY_DIR) / "flux_encode";
  const fs::path script = fs::path(TITAN_SOURCE_DIR) / "tests" / "parity" / "flux_encode_reference.py";
  if (!fs::exists(out / "expected.safetensors") ||
      fs::last_write_time(out / "expected.safetensors") < fs::last_write_time(script)) {
    const fs::path tokenizers = test::flux_tokenizer_fixture("clip").parent_path();
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + script.string() + "' --tokenizers '" +
                            tokenizers.string() + "' --out '" + out.string() + "' > /dev/null";
    if (std::system(cmd.c_str()) != 0) return {};
  }
  return out;
}

TEST(FluxEncode, CachesWhatDiffusersFluxPipelineComputes) {
  const fs::path ref = flux_encode_reference();
  if (ref.empty())
    TITAN_MISSING_REFERENCE("tests/parity/flux_encode_reference.py did not run (make deps-test)");
  const fs::path dir = test::fresh_temp_dir("flux_encode"), out = dir / "cache";
  const std::vector<std::string> args = {"flux",
                                         "encode",
                                         "--pipeline",
                                         (ref / "pipeline").string(),
                                         "--data",
                                         (ref / "data").string(),
                                         "--out",
                                         out.string(),
                                         "--image-size",
                                         "64",
                                         "--crop",
                                         "center",
                                         "--t5-length",
                                         "32",
                                         "--batch",
                                         "4",
                                         "--shard-samples",
                                         "4"};
  const test::CliRun run = test::run_titan(args, dir);
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("6 samples encoded, 0 shards kept from an earlier run, 2 shards"), std::string::npos)
      << run.out;

  const checkpoint::SafetensorsFile expected =
      checkpoint::read_safetensors((ref / "expected.safetensors").string());
  const EncodingCache cache(out.string());
  ASSERT_EQ(cache.size(), 6);
  // The vae/ folder's config.json (autoencoder_reference.py), for training to map latents with.
  EXPECT_EQ(cache.scaling_factor(), 0.3611);
  EXPECT_EQ(cache.shift_factor(), 0.1159);
  double worst = 0;
  for (int64_t i = 0; i < 6; ++i) {
    const std::map<std::string, Tensor> got = cache.sample(i);
    EXPECT_EQ(got.at("index").to_vector<int64_t>(), std::vector<int64_t>{i});
    // The references are float64. Text: 1e-5, the encoders' own parity bound. Latents: float32
    // rounding through the autoencoder's convolutions, norms and attention, measured at 5e-6 in the release
    // build and 2.7e-5 in the sanitized one (whose kernels vectorise less); PyTorch's float32 is at
    // 1.4e-3 here.
    for (const auto& [name, bound] : {std::pair{"t5", 1e-5}, std::pair{"clip_pooled", 1e-5},
                                      std::pair{"latent_mean", 5e-5}, std::pair{"latent_logvar", 5e-5}}) {
      const Tensor want = expected.tensors.at(name).narrow(0, i, 1).squeeze(0);
      ASSERT_EQ(got.at(name).sizes(), want.sizes()) << name;
      const double err = test::max_rel_error(got.at(name), want);
      worst = std::max(worst, err);
      EXPECT_LE(err, bound) << name << ", sample " << i;
    }
  }
  for (const auto& [name, want] :
       {std::pair{"t5", "empty_t5"}, std::pair{"clip_pooled", "empty_clip_pooled"}})
    EXPECT_LE(test::max_rel_error(cache.empty_prompt().at(name), expected.tensors.at(want)), 1e-5) << name;
  std::cout << "titan flux encode against diffusers' FluxPipeline: largest relative error " << worst << "\n";

  const test::CliRun again = test::run_titan(args, dir);
  ASSERT_EQ(again.rc, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("0 samples encoded, 2 shards kept from an earlier run"), std::string::npos)
      << again.out;

  // Another image size is another cache: refused, not mixed in.
  std::vector<std::string> other = args;
  other[other.size() - 9] = "32";
  const test::CliRun refused = test::run_titan(other, dir);
  EXPECT_NE(refused.rc, 0);
  EXPECT_NE(refused.err.find("shard-00000.safetensors was written for"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace titan::train::flux
