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

// An encoder sharded a unit per block: its counts, the most it gathers at once, the elements its
// blocks' matrices hold (what ConditioningStack keeps in bf16 of a text encoder) and the largest
// of them (the copy a product makes of its gathered weight under bf16 when the stack keeps none).
struct Units {
  Count all;
  int64_t gathered = 0, matrices = 0, largest_matrix = 0;
};
Units units(const nn::Module& model, const std::vector<nn::Module*>& blocks, int64_t ranks) {
  Units u{.all = count(model, ranks)};
  std::vector<int64_t> sizes;
  for (const nn::Module* block : blocks) {
    sizes.push_back(count(*block, ranks).whole);
    for (const auto& [name, p] : block->named_parameters())
      if (p.dim() == 2) {
        u.matrices += p.numel();
        u.largest_matrix = std::max(u.largest_matrix, p.numel());
      }
  }
  u.gathered = fsdp_gathered_at_most(u.all.whole, sizes);
  return u;
}

// Encoder blocks' activations (conditioning_memory.h): the bias, then per row the feed-forward's
// intermediates and the hidden states.
int64_t encoder_block_activations(int64_t bias_elements, int64_t rows, int64_t length, int64_t d_model, int64_t d_ff,
                                  bool gated, bool bf16) {
  const int64_t feed_forward = gated ? kF32Bytes * 3 * d_ff + (bf16 ? kBF16Bytes * d_ff : 0) : kF32Bytes * 2 * d_ff;
  return kF32Bytes * bias_elements + rows * length * (feed_forward + kF32Bytes * 4 * d_model);
}

}  // namespace

int64_t t5_activation_bytes(const models::t5::ModelArgs& args, int64_t rows, int64_t length, bool bf16) {
  return encoder_block_activations(args.n_heads * length * length, rows, length, args.d_model, args.d_ff, true, bf16);
}

int64_t clip_activation_bytes(const models::clip::ModelArgs& args, int64_t rows, bool bf16) {
  const int64_t length = args.max_positions;
  return encoder_block_activations(length * length, rows, length, args.dim, args.ffn_dim, false, bf16);
}

int64_t image_encoder_activation_bytes(const models::autoencoder::ModelArgs& args, int64_t rows, int64_t image_size) {
  int64_t level = 0, side = image_size;
  for (const int64_t channels : args.block_out_channels) {
    level = std::max(level, channels * side * side);
    side /= 2;
  }
  return kF32Bytes * rows * (args.in_channels * image_size * image_size + 6 * level);
}

FrozenBytes conditioning_memory(const ConditioningPaths& paths, int64_t shard_ranks, bool bf16,
                                const EncoderBatch& batch) {
  const MetaScope meta;
  const models::t5::ModelArgs t5_args = models::t5::parse_hf_config(checkpoint::HfReader(paths.t5).config());
  const models::clip::ModelArgs clip_args = models::clip::parse_hf_config(checkpoint::HfReader(paths.clip).config());
  const models::t5::T5Encoder t5(t5_args);
  const models::clip::ClipTextModel clip(clip_args);
  const models::autoencoder::ModelArgs ae_args =
      fs::is_directory(paths.autoencoder)
          ? models::autoencoder::parse_diffusers_config(
                checkpoint::HfReader(paths.autoencoder, checkpoint::kDiffusersWeightsFile).config(),
                (paths.autoencoder / checkpoint::kHfConfigFile).string())
          : models::autoencoder::flavor("flux");
  const models::autoencoder::Autoencoder autoencoder(ae_args);

  const Units t5_units = units(t5, block_units(*t5.layers), shard_ranks);
  const Units clip_units = units(clip, block_units(*clip.layers), shard_ranks);
  const Units image_encoder = units(*autoencoder.encoder, autoencoder.encoder->blocks(), shard_ranks);
  const Count ae = count(autoencoder, shard_ranks), decoder = count(*autoencoder.decoder, shard_ranks);
  const int64_t t5_activations = t5_activation_bytes(t5_args, batch.rows, batch.t5_length, bf16),
                clip_activations = clip_activation_bytes(clip_args, batch.rows, bf16),
                image_activations = image_encoder_activation_bytes(ae_args, batch.rows, batch.image_size);
  FrozenBytes m;
  if (shard_ranks == 1) {
    // Whole on every rank, and ConditioningStack keeps the text encoders' bf16 copies across calls.
    m.kept = kF32Bytes * (t5_units.all.whole + clip_units.all.whole + ae.whole) +
                   (bf16 ? kBF16Bytes * (t5_units.matrices + clip_units.matrices) : 0);
    m.activations = std::max({t5_activations, clip_activations, image_activations});
    return m;
  }
  // The quant convs, outside the encoder's and decoder's units, stay whole; the decoder does not run.
  const int64_t quant_convs = ae.whole - image_encoder.all.whole - decoder.whole;
  m.kept = kF32Bytes * (t5_units.all.shard + clip_units.all.shard + image_encoder.all.shard + decoder.shard + quant_convs);
  auto casts = [&](const Units& u) { return bf16 ? kBF16Bytes * u.largest_matrix : 0; };
  for (const auto& [gathered, activations] :
       {std::pair{kF32Bytes * t5_units.gathered + casts(t5_units), t5_activations},
        std::pair{kF32Bytes * clip_units.gathered + casts(clip_units), clip_activations},
        std::pair{kF32Bytes * image_encoder.gathered, image_activations}})
    if (gathered + activations > m.gathered + m.activations) {
      m.gathered = gathered;
      m.activations = activations;
    }
  return m;
}

}  // namespace titan::train::flux
