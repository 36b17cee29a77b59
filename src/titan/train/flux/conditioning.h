#pragma once
// FLUX's conditioning stack, frozen: T5's last hidden state and CLIP's pooled vector of each
// caption (diffusers' FluxPipeline.encode_prompt: no attention masks, padded to fixed lengths), and
// the autoencoder's latent distribution of each image. What the encoding cache stores
// (encoding_cache.h) and what training without a cache computes every step.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "titan/core/autocast.h"
#include "titan/core/tensor.h"
#include "titan/data/tokenizer.h"
#include "titan/dist/process_group.h"
#include "titan/models/autoencoder/model.h"
#include "titan/models/clip/model.h"
#include "titan/models/t5/model.h"
#include "titan/parallel/fully_shard.h"

namespace titan::train::flux {

// Where each part lies. A diffusers FLUX folder (FLUX.1-dev's layout) holds them all:
// text_encoder/ (CLIP), tokenizer/, text_encoder_2/ (T5), tokenizer_2/ and vae/.
struct ConditioningPaths {
  std::filesystem::path t5, t5_tokenizer, clip, clip_tokenizer, autoencoder;
  static ConditioningPaths of_pipeline(const std::filesystem::path& dir);
};

// The children of a text encoder's layer list in order: its FSDP units, one per block.
std::vector<nn::Module*> block_units(const nn::Module& layers);

class ConditioningStack {
 public:
  // `t5_length`: the tokens T5 sees (256 for flux-schnell, 512 for flux-dev); CLIP sees its
  // max_position_embeddings (77). `autoencoder` is a diffusers folder or BFL's ae.safetensors.
  ConditioningStack(const ConditioningPaths& paths, int64_t t5_length);
  ~ConditioningStack();

  // "t5" [b, t5_length, d_model] (f32) and "clip_pooled" [b, CLIP's hidden size].
  std::map<std::string, Tensor> encode_text(std::span<const std::string> captions);
  // "latent_mean" and "latent_logvar" [b, latent channels, H / 8, W / 8] of images [b, 3, H, W] in
  // [-1, 1]: the distribution training samples from, before FLUX's shift and scale.
  std::map<std::string, Tensor> encode_images(const Tensor& images);

  // FSDP over `shard_group` (replicated over `replicate_group`): each rank keeps 1/N of each
  // encoder's weights. T5, CLIP and the autoencoder's encoder and decoder (each a root of its own;
  // the 1x1 quant convs outside both stay whole) are a unit per block: their forwards gather each
  // block as it runs (the next one prefetched) and free it after, so a rank never holds an encoder
  // whole. Collective, and so is every encode_* after it: every rank of the groups must encode alike.
  void shard(const dist::ProcessGroup& shard_group, const dist::ProcessGroup& replicate_group);
  bool sharded() const { return t5_fsdp_ != nullptr; }
  // Bytes of the encoders' weights this rank holds between calls: its shards once sharded, else
  // the weights and the bf16 copies kept of them.
  int64_t weight_bytes() const;

  models::t5::T5Encoder& t5() { return *t5_; }
  models::clip::ClipTextModel& clip() { return *clip_; }
  const models::autoencoder::Autoencoder& autoencoder() const { return *autoencoder_; }
  models::autoencoder::Autoencoder& autoencoder() { return *autoencoder_; }
  // The parts and options, for the cache's description.
  std::string description() const;

 private:
  ConditioningPaths paths_;
  int64_t t5_length_;
  std::shared_ptr<const data::Tokenizer> t5_tokenizer_, clip_tokenizer_;
  std::unique_ptr<models::t5::T5Encoder> t5_;
  std::unique_ptr<models::clip::ClipTextModel> clip_;
  std::shared_ptr<models::autoencoder::Autoencoder> autoencoder_;
  std::unique_ptr<parallel::FullyShard> t5_fsdp_, clip_fsdp_, image_encoder_fsdp_, image_decoder_fsdp_;
  // The text encoders' weights as their products multiply them under bf16 autocast, made on the
  // first call and kept (the encoders are frozen): half their f32 size more memory.
  AutocastCasts frozen_casts_;
};

}  // namespace titan::train::flux
