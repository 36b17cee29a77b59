#include "titan/train/flux/conditioning_memory.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/core/meta.h"
#include "titan/models/autoencoder/state_dict_adapter.h"
#include "titan/models/clip/state_dict_adapter.h"
#include "titan/models/t5/state_dict_adapter.h"
#include "titan/parallel/shard_grid.h"
#include "titan/train/memory_plan.h"

namespace titan::train::flux {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kF32Bytes = 4, kBF16Bytes = 2;

// Elements of a module's parameters whole, and in one rank's FSDP shard of them over `ranks`
// (FullyShard's grid, padding included).
struct Count {
  int64_t whole = 0, shard = 0;
};
Count count(const nn::Module& m, int64_t ranks) {
  Count c;
  for (const auto& [name, p] : m.named_parameters()) {
    c.whole += p.numel();
    c.shard += parallel::plan_shard_grid(p.sizes(), ranks).shard_numel();
  }
  return c;
}

// A text encoder sharded a unit per block: its counts, the most it gathers at once, and the
// elements its products multiply (the blocks' matrices: what ConditioningStack keeps in bf16).
struct TextEncoder {
  Count all;
  int64_t gathered = 0, matrices = 0;
};
TextEncoder text_encoder(const nn::Module& model, const nn::Module& layers, int64_t ranks) {
  TextEncoder e{.all = count(model, ranks)};
  std::vector<int64_t> blocks;
  for (const auto& [name, block] : layers.named_children()) {
    blocks.push_back(count(*block, ranks).whole);
    for (const auto& [pname, p] : block->named_parameters())
      if (p.dim() == 2) e.matrices += p.numel();
  }
  e.gathered = fsdp_gathered_at_most(e.all.whole, blocks);
  return e;
}

}  // namespace

FrozenBytes conditioning_memory(const ConditioningPaths& paths, int64_t shard_ranks, bool bf16) {
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

  const TextEncoder t5_units = text_encoder(t5, *t5.layers, shard_ranks);
  const TextEncoder clip_units = text_encoder(clip, *clip.layers, shard_ranks);
  const Count ae = count(autoencoder, shard_ranks);
  FrozenBytes m;
  if (shard_ranks == 1) {
    // Whole on every rank, and ConditioningStack keeps the text encoders' bf16 copies across calls.
    m.kept = kF32Bytes * (t5_units.all.whole + clip_units.all.whole + ae.whole) +
                   (bf16 ? kBF16Bytes * (t5_units.matrices + clip_units.matrices) : 0);
    return m;
  }
  m.kept = kF32Bytes * (t5_units.all.shard + clip_units.all.shard + ae.shard);
  m.gathered = kF32Bytes * std::max({t5_units.gathered, clip_units.gathered, ae.whole});
  return m;
}

}  // namespace titan::train::flux
