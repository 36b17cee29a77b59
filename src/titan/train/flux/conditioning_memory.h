#pragma once
// What FLUX's frozen encoders (conditioning.h) take on a rank when training runs them every step,
// for the memory plan (train/memory_plan.h), reckoned from the folders' configs alone: the
// models are built on meta, no weight is read.
#include <cstdint>

#include "titan/models/autoencoder/model_args.h"
#include "titan/models/clip/model_args.h"
#include "titan/models/t5/model_args.h"
#include "titan/train/flux/conditioning.h"
#include "titan/train/memory_plan.h"

namespace titan::train::flux {

// What one call of the encoders sees: the rows of a micro-batch (or of a validation batch), the
// image size and T5's length.
struct EncoderBatch {
  int64_t rows = 1;
  int64_t image_size = 256;
  int64_t t5_length = 256;
};

// The encoders of `paths` sharded over `shard_ranks` (1: every rank holds them whole). Kept: the
// weights (f32) whole, or this rank's FSDP shards of them; whole and under bf16, the bf16 copies
// ConditioningStack keeps of the text encoders' matrices too. Gathered, when sharded: the root
// unit of T5, CLIP or the autoencoder's encoder with two of its blocks (the running one and the
// next, prefetched), and under bf16 the copy a product makes of its weight. Activations: what it
// holds at once on `batch` (the *_activation_bytes below). The encoders run one after another: the
// figures are those of the one whose gathered weights and activations together are the most.
FrozenBytes conditioning_memory(const ConditioningPaths& paths, int64_t shard_ranks, bool bf16,
                                const EncoderBatch& batch);

// The most an encoder's forward without gradients holds at once besides its weights, from the
// shapes of what titan's ops keep alive (tests/unit/test_conditioning_memory.cpp holds each to the
// allocator's high-water mark):
// - T5 and CLIP (encoder blocks): the attention bias (T5's positions, heads x L x L; CLIP's causal
//   L x L), and per row the feed-forward's intermediates (3 of [L, d_ff] gated and under bf16 the
//   product's bf16 copy of the last; 2 otherwise) and 4 of the hidden states [L, d_model]; the
//   fused attention kernel holds no scores.
// - The autoencoder's encoder: per row the image [3, S, S] and 6 tensors of its largest level
//   (channels x side^2; the first, at full size, for FLUX's), what its second ResNet block holds
//   at most: the level's input (the caller's until the level returns), the block's input, a
//   convolution's operand and output, and the convolution's own two layouts.
int64_t t5_activation_bytes(const models::t5::ModelArgs& args, int64_t rows, int64_t length, bool bf16);
int64_t clip_activation_bytes(const models::clip::ModelArgs& args, int64_t rows, bool bf16);
int64_t image_encoder_activation_bytes(const models::autoencoder::ModelArgs& args, int64_t rows, int64_t image_size);

}  // namespace titan::train::flux
