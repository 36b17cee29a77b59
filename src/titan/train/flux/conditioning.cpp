#include "titan/train/flux/conditioning.h"

#include <optional>
#include <sstream>

#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/core/error.h"
#include "titan/train/flux/autoencoder_folder.h"
#include "titan/train/flux/text_encoder_folders.h"
#include "titan/train/memory_plan.h"

namespace titan::train::flux {

namespace fs = std::filesystem;

ConditioningPaths ConditioningPaths::of_pipeline(const fs::path& dir) {
  TITAN_CHECK(fs::is_directory(dir), "FLUX folder ", dir.string(), " is not a folder; expected diffusers' layout "
              "(text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/, vae/)");
  return {.t5 = dir / "text_encoder_2",
          .t5_tokenizer = dir / "tokenizer_2",
          .clip = dir / "text_encoder",
          .clip_tokenizer = dir / "tokenizer",
          .autoencoder = dir / "vae"};
}

namespace {

// The ids of `captions` as the encoder sees them: [b, length] i64.
Tensor token_ids(const data::Tokenizer& tokenizer, std::span<const std::string> captions, int64_t length) {
  Tensor ids = Tensor::empty({static_cast<int64_t>(captions.size()), length}, {.dtype = kI64});
  int64_t* out = ids.data<int64_t>();
  for (const std::string& caption : captions) {
    const std::vector<int32_t> row = tokenizer.encode_for_model(caption, length);
    TITAN_CHECK(static_cast<int64_t>(row.size()) == length, "FLUX conditioning: ", tokenizer.description(),
                " gave ", row.size(), " ids for a caption, not the ", length, " asked for");
    out = std::copy(row.begin(), row.end(), out);
  }
  return ids;
}

// Around one encoder's call when it is sharded: its forward's hooks gather block by block and
// leave the root unit gathered; after the call every unit is freed.
class ShardedCall {
 public:
  explicit ShardedCall(parallel::FullyShard* fsdp) : fsdp_(fsdp) {}
  ~ShardedCall() {
    if (fsdp_) fsdp_->reshard_all();
  }
  ShardedCall(const ShardedCall&) = delete;
  ShardedCall& operator=(const ShardedCall&) = delete;

 private:
  parallel::FullyShard* fsdp_;
};

}  // namespace

std::vector<nn::Module*> block_units(const nn::Module& layers) {
  std::vector<nn::Module*> out;
  for (const auto& [name, block] : layers.named_children()) out.push_back(block.get());
  return out;
}

ConditioningStack::ConditioningStack(const ConditioningPaths& paths, int64_t t5_length)
    : paths_(paths), t5_length_(t5_length) {
  TITAN_CHECK(t5_length > 0, "FLUX conditioning: T5's length must be positive, got ", t5_length);
  t5_tokenizer_ = data::load_tokenizer(paths.t5_tokenizer.string());
  clip_tokenizer_ = data::load_tokenizer(paths.clip_tokenizer.string());
  t5_ = load_t5_encoder(paths.t5);
  clip_ = load_clip_text(paths.clip);
  autoencoder_ = fs::is_directory(paths.autoencoder) ? load_autoencoder_folder(paths.autoencoder)
                                                     : load_bfl_autoencoder(paths.autoencoder);
}

ConditioningStack::~ConditioningStack() = default;

std::map<std::string, Tensor> ConditioningStack::encode_text(std::span<const std::string> captions) {
  autograd::NoGradGuard frozen;
  // Sharded encoders gather their weights for each call and free them after: keeping copies
  // would undo what sharding saves.
  std::optional<AutocastCastCache> weights_in_bf16;
  if (!sharded()) weights_in_bf16.emplace(frozen_casts_);
  Tensor t5;
  {
    const ShardedCall call(t5_fsdp_.get());
    t5 = t5_->forward(token_ids(*t5_tokenizer_, captions, t5_length_)).detach();
  }
  const ShardedCall call(clip_fsdp_.get());
  const models::clip::ClipTextOutput clip =
      clip_->forward(token_ids(*clip_tokenizer_, captions, clip_->args().max_positions));
  return {{"t5", t5}, {"clip_pooled", clip.pooler_output.detach()}};
}

std::map<std::string, Tensor> ConditioningStack::encode_images(const Tensor& images) {
  autograd::NoGradGuard frozen;
  const ShardedCall call(image_encoder_fsdp_.get());
  const models::autoencoder::DiagonalGaussian d = autoencoder_->encode_distribution(images);
  return {{"latent_mean", d.mean.detach()}, {"latent_logvar", d.logvar.detach()}};
}

void ConditioningStack::shard(const dist::ProcessGroup& shard_group, const dist::ProcessGroup& replicate_group) {
  TITAN_CHECK(!sharded(), "FLUX conditioning: the encoders are sharded already");
  frozen_casts_.clear();
  // A unit per block, as TorchTitan's FLUX shards its T5: a rank holds its shards, the root unit
  // and at most two blocks whole at once (the one running, the next prefetched). The autoencoder's
  // encoder and decoder are a root each (the decoder does not run in training); its quant convs,
  // 1x1 and outside both, stay whole.
  t5_fsdp_ = std::make_unique<parallel::FullyShard>(*t5_, block_units(*t5_->layers), shard_group, replicate_group);
  clip_fsdp_ =
      std::make_unique<parallel::FullyShard>(*clip_, block_units(*clip_->layers), shard_group, replicate_group);
  image_encoder_fsdp_ = std::make_unique<parallel::FullyShard>(
      *autoencoder_->encoder, autoencoder_->encoder->blocks(), shard_group, replicate_group);
  image_decoder_fsdp_ = std::make_unique<parallel::FullyShard>(
      *autoencoder_->decoder, autoencoder_->decoder->blocks(), shard_group, replicate_group);
}

int64_t ConditioningStack::weight_bytes() const {
  if (sharded()) {
    const int64_t quant_convs = bytes_of(autoencoder_->named_parameters()) -
                                bytes_of(autoencoder_->encoder->named_parameters()) -
                                bytes_of(autoencoder_->decoder->named_parameters());
    return t5_fsdp_->shard_bytes() + clip_fsdp_->shard_bytes() + image_encoder_fsdp_->shard_bytes() +
           image_decoder_fsdp_->shard_bytes() + quant_convs;
  }
  return bytes_of(t5_->named_parameters()) + bytes_of(clip_->named_parameters()) +
         bytes_of(autoencoder_->named_parameters()) + frozen_casts_.bytes();
}

std::string ConditioningStack::description() const {
  std::ostringstream s;
  s << "t5 " << fs::absolute(paths_.t5).lexically_normal().string() << " (" << t5_length_ << " tokens, "
    << t5_tokenizer_->description() << "); clip " << fs::absolute(paths_.clip).lexically_normal().string() << " ("
    << clip_tokenizer_->description() << "); autoencoder "
    << fs::absolute(paths_.autoencoder).lexically_normal().string();
  return s.str();
}

}  // namespace titan::train::flux
