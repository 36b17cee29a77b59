#pragma once
// Which form graph-mode attention takes in the program being captured, and why: titan's splash
// kernels as custom calls (a CPU plugin that runs them), cuDNN's flash attention (a CUDA program,
// bf16, a mask cuDNN's band expresses), or XLA's lowering of the masked softmax, dense (the
// whole [S, S] scores of a head at once) or as loops over tiles (splash_lowering.h). The reason
// goes to the program's notes, which graph mode's start-up log prints.
#include <cstdint>
#include <optional>
#include <string>

#include "titan/attention/block_mask.h"
#include "titan/attention/cudnn_attention.h"
#include "titan/attention/scores.h"
#include "titan/attention/splash_custom_call.h"
#include "titan/graph/ir/program.h"

namespace titan::attention {

// Sequences up to this length run as one masked softmax over [S, S] scores per head on a CPU
// plugin; longer ones as a loop over tiles with an online softmax (flash attention), never more
// than block_q x block_kv scores per head at once, skipping the key blocks the BlockMask hides
// from a query block. Measured on the CPU plugin (XLA CPU, 2 shared cores, best of 3-7) at the
// debug model's head shape: B 8, Hq = Hkv 16, D 16, causal, forward + backward, f32, 128 x 128
// tiles; ms, dense / tiled: S 64: 20 / 63, 128: 123 / 70, 192: 277 / 196, 256: 496 / 264, 512:
// 1832 / 1056, 1024: 6081 / 2216, 2048: 17172 / 5091. Tiles win from one whole tile up (they skip
// the causal upper half and keep the scores in cache); below that they pad the sequence to a tile.
inline constexpr int64_t kDenseMaxSeq = 64;
// On a GPU, XLA runs loops of small tiles one kernel launch per op and tile, which is what made
// graph mode slow there (docs/performance.md); the dense form is a few large fused kernels. It is
// kept while one [B, Hq, S, S] f32 array of scores stays within this many bytes: the backward holds
// a few such arrays at once, some 8 GiB at the bound, which an 80 GB GPU holds beside the 1B (XL)
// step's 31 GiB (its f32 step's scores are 2 GiB exactly).
inline constexpr int64_t kGpuDenseScoresBytes = int64_t{2} << 30;

enum class AttentionForm : uint8_t { titan_kernels, cudnn, dense, tiled };

struct AttentionChoice {
  AttentionForm form = AttentionForm::tiled;
  std::optional<SplashCallSpec> splash = std::nullopt;  // for titan_kernels
  std::optional<CudnnCallSpec> cudnn = std::nullopt;    // for cudnn
  std::string note = {};                                 // for the start-up log: what and why
};

// The form for attention over q [B, S, Hq, D] of `dtype` (k and v with Hkv heads), `mask` and
// `scores` in `program`, from its platform, Program::custom_kernels and Program::cudnn_attention.
AttentionChoice choose_attention(const graph::Program& program, const BlockMask& mask, const Scores& scores,
                                 DType dtype, bool bf16_products, int64_t B, int64_t Hq, int64_t Hkv, int64_t D);

}  // namespace titan::attention
