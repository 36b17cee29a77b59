// The memory plan's estimates of FLUX's frozen encoders' activations (train/flux/
// conditioning_memory.h) against the allocator's high-water mark over a forward without
// gradients: T5, CLIP and the autoencoder's encoder, at several batch sizes and lengths or image
// sizes, in f32 and (where oneDNN multiplies bf16 here) under bf16 autocast with the weights' bf16
// copies kept, as ConditioningStack keeps them.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "titan/autograd/grad_mode.h"
#include "titan/core/allocator.h"
#include "titan/core/autocast.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/autoencoder/model.h"
#include "titan/models/clip/model.h"
#include "titan/models/t5/model.h"
#include "titan/train/flux/conditioning_memory.h"

namespace titan::train::flux {
namespace {

std::vector<bool> precisions() {
  if (kernels::cpu::onednn_bf16_isa().empty()) return {false};
  return {false, true};
}

// Under bf16: autocast, with the weights' bf16 copies kept across calls as ConditioningStack keeps
// them.
struct Precision {
  explicit Precision(bool bf16) {
    if (!bf16) return;
    autocast.emplace(kBF16);
    kept.emplace(casts);
  }
  AutocastCasts casts;
  std::optional<AutocastGuard> autocast;
  std::optional<AutocastCastCache> kept;
};

// The most `forward` holds at once beyond what was live before it, after a first call has made
// whatever it keeps (bf16 weight copies).
int64_t measured_peak(const std::function<void()>& forward) {
  forward();
  CpuAllocator& allocator = CpuAllocator::instance();
  const int64_t before = allocator.stats().allocated_bytes;
  allocator.reset_peak();
  forward();
  return allocator.stats().peak_allocated_bytes - before;
}

// The estimate within 20% of the measurement either way.
void expect_close(int64_t estimate, int64_t measured, const std::string& what) {
  const double ratio = static_cast<double>(estimate) / static_cast<double>(measured);
  std::cout << what << ": estimate " << estimate << " bytes, measured " << measured << " (" << ratio << "x)\n";
  EXPECT_GT(ratio, 0.8) << what;
  EXPECT_LT(ratio, 1.2) << what;
}

TEST(ConditioningMemory, T5ActivationsAreWithinAFifthOfAMeasuredForward) {
  models::t5::ModelArgs args;
  args.vocab_size = 1000;
  args.d_model = 1024;
  args.d_ff = 2816;
  args.n_heads = 16;
  args.d_kv = 64;
  args.n_layers = 2;
  models::t5::T5Encoder t5(args);
  const autograd::NoGradGuard frozen;
  for (const bool bf16 : precisions()) {
    const Precision precision(bf16);
    for (const int64_t length : {64, 256})
      for (const int64_t rows : {1, 3}) {
        const Tensor ids = Tensor::zeros({rows, length}, {.dtype = kI64});
        expect_close(t5_activation_bytes(args, rows, length, bf16), measured_peak([&] { (void)t5.forward(ids); }),
                     "T5 " + std::to_string(rows) + " x " + std::to_string(length) + (bf16 ? " bf16" : " f32"));
      }
  }
}

TEST(ConditioningMemory, ClipActivationsAreWithinAFifthOfAMeasuredForward) {
  models::clip::ModelArgs args;
  args.vocab_size = 1000;
  args.eos_token_id = 999;
  args.dim = 512;
  args.ffn_dim = 2048;
  args.n_heads = 8;
  args.n_layers = 2;
  models::clip::ClipTextModel clip(args);
  const autograd::NoGradGuard frozen;
  for (const bool bf16 : precisions()) {
    const Precision precision(bf16);
    for (const int64_t rows : {2, 8}) {
      const Tensor ids = Tensor::zeros({rows, args.max_positions}, {.dtype = kI64});
      expect_close(clip_activation_bytes(args, rows, bf16), measured_peak([&] { (void)clip.forward(ids); }),
                   "CLIP " + std::to_string(rows) + " x 77" + (bf16 ? " bf16" : " f32"));
    }
  }
}

TEST(ConditioningMemory, ImageEncoderActivationsAreWithinAFifthOfAMeasuredForward) {
  const models::autoencoder::ModelArgs args = models::autoencoder::flavor("flux");
  models::autoencoder::Autoencoder autoencoder(args);
  const autograd::NoGradGuard frozen;
  for (const bool bf16 : precisions()) {
    const Precision precision(bf16);
    for (const int64_t size : {64, 128})
      for (const int64_t rows : {1, 2}) {
        Generator gen(3);
        const Tensor images = Tensor::rand({rows, 3, size, size}, gen, {}, -1.0, 1.0);
        // The images are the caller's: made before the call, as LiveEncodings makes them.
        const int64_t images_bytes = static_cast<int64_t>(images.nbytes());
        expect_close(image_encoder_activation_bytes(args, rows, size),
                     images_bytes + measured_peak([&] { (void)autoencoder.encode_distribution(images); }),
                     "autoencoder " + std::to_string(rows) + " x " + std::to_string(size) + " px" +
                         (bf16 ? " bf16" : " f32"));
      }
  }
}

}  // namespace
}  // namespace titan::train::flux
