#include "titan/train/flux/conditioning_memory.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/core/meta.h"
#include "titan/models/autoencoder/state_dict_adapter.h"
#include "titan/models/clip/state_dict_adapter.h"
#include "titan/models/t5/state_dict_adapter.h"

namespace titan::train::flux {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kF32Bytes = 4;

// Elements of a module's parameters, and of its shard on one of `ranks` ranks (FSDP splits rows:
// each rank holds ceil(rows / ranks) of them).
struct Count {
  int64_t whole = 0, shard = 0;
};
Count count(const nn::Module& m, int64_t ranks) {
  Count c;
  for (const auto& [name, p] : m.named_parameters()) {
    c.whole += p.numel();
    const int64_t rows = p.dim() > 0 ? p.size(0) : 1;
    c.shard += (rows + ranks - 1) / ranks * (p.numel() / std::max<int64_t>(rows, 1));
  }
  return c;
}

// A text encoder: its whole size and shard, and its root unit with its two largest blocks.
struct Encoder {
  Count all;
  int64_t gathered = 0;
};
Encoder text_encoder(const nn::Module& model, const nn::Module& layers, int64_t ranks) {
  Encoder e{.all = count(model, ranks), .gathered = 0};
  std::vector<int64_t> blocks;
  for (const auto& [name, block] : layers.named_children()) blocks.push_back(count(*block, ranks).whole);
  std::sort(blocks.rbegin(), blocks.rend());
  int64_t in_blocks = 0;
  for (int64_t b : blocks) in_blocks += b;
  e.gathered = e.all.whole - in_blocks;  // the root unit
  for (size_t i = 0; i < std::min<size_t>(2, blocks.size()); ++i) e.gathered += blocks[i];
  return e;
}

}  // namespace

ConditioningMemory conditioning_memory(const ConditioningPaths& paths, int64_t shard_ranks, bool bf16) {
  const MetaScope meta;
  const models::t5::T5Encoder t5(models::t5::parse_hf_config(checkpoint::HfReader(paths.t5).config()));
  const models::clip::ClipTextModel clip(
      models::clip::parse_hf_config(checkpoint::HfReader(paths.clip).config()));
  const models::autoencoder::ModelArgs ae_args =
      fs::is_directory(paths.autoencoder)
          ? models::autoencoder::parse_diffusers_config(
                checkpoint::HfReader(paths.autoencoder, checkpoint::kDiffusersWeightsFile).config(),
                (paths.autoencoder / checkpoint::kHfConfigFile).string())
          : models::autoencoder::flavor("flux");
  const models::autoencoder::Autoencoder autoencoder(ae_args);

  const Encoder t5_units = text_encoder(t5, *t5.layers, shard_ranks);
  const Encoder clip_units = text_encoder(clip, *clip.layers, shard_ranks);
  const Count ae = count(autoencoder, shard_ranks);
  ConditioningMemory m;
  if (shard_ranks == 1) {
    // Whole on every rank; ConditioningStack keeps the text encoders' bf16 copies across calls.
    m.kept_bytes = kF32Bytes * (t5_units.all.whole + clip_units.all.whole + ae.whole) +
                   (bf16 ? 2 * (t5_units.all.whole + clip_units.all.whole) : 0);
    return m;
  }
  m.kept_bytes = kF32Bytes * (t5_units.all.shard + clip_units.all.shard + ae.shard);
  m.gathered_bytes = kF32Bytes * std::max({t5_units.gathered, clip_units.gathered, ae.whole});
  return m;
}

}  // namespace titan::train::flux
