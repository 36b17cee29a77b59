#include "titan/attention/attention_choice.h"

#include <algorithm>

namespace titan::attention {

namespace {

std::string describe_case(const BlockMask& mask, DType dtype, bool bf16_products, int64_t B, int64_t Hq,
                          int64_t Hkv, int64_t D) {
  return "attention over " + std::to_string(B) + " x " + std::to_string(mask.seq()) + " tokens, " +
         std::to_string(Hq) + " query / " + std::to_string(Hkv) + " kv heads of " + std::to_string(D) + ", " +
         mask.mask().describe() + ", " + std::string(dtype_name(dtype)) + (bf16_products ? " with bf16 products" : "");
}

}  // namespace

AttentionChoice choose_attention(const graph::Program& program, const BlockMask& mask, const Scores& scores,
                                 DType dtype, bool bf16_products, int64_t B, int64_t Hq, int64_t Hkv, int64_t D) {
  const std::string what = describe_case(mask, dtype, bf16_products, B, Hq, Hkv, D) + ": ";
  if (program.custom_kernels())
    if (auto spec = splash_call_spec(mask, dtype, scores, bf16_products))
      return {.form = AttentionForm::titan_kernels, .splash = std::move(spec),
              .note = what + "titan's splash kernels as custom calls"};
  const int64_t S = mask.seq();
  std::string not_cudnn;
  if (program.platform() == graph::Program::Platform::cuda) {
    CudnnFit fit = cudnn_fit(mask, dtype, bf16_products, scores, D, program.max_documents());
    if (fit.spec && fit.spec->documents > 1 && !cudnn_offsets_fit(B, S, std::max(Hq, Hkv), D))
      fit = {.why_not = "packed documents' offsets in " + std::to_string(B) + " x " + std::to_string(S) +
                        " tokens of " + std::to_string(std::max(Hq, Hkv) * D) + " elements pass cuDNN's i32"};
    if (!program.cudnn_attention())
      not_cudnn = "compile.cudnn_attention = false";
    else if (program.partitions() > 1)
      not_cudnn = "the step is split over " + std::to_string(program.partitions()) +
                  " devices, and XLA's SPMD partitioner cannot split cuDNN's custom call";
    else if (!fit.spec)
      not_cudnn = fit.why_not;
    else
      return {.form = AttentionForm::cudnn, .cudnn = fit.spec,
              .note = what + "cuDNN flash attention (" + kCudnnForward + ", " + kCudnnBackward + ")" +
                      (fit.spec->documents > 1
                           ? ", up to " + std::to_string(fit.spec->documents) + " packed documents a row"
                           : "")};
    not_cudnn = " (not cuDNN's flash attention: " + not_cudnn + ")";
  }
  const bool gpu = program.platform() != graph::Program::Platform::cpu;
  const bool dense = gpu ? B * Hq * S * S * int64_t{4} <= kGpuDenseScoresBytes : S <= kDenseMaxSeq;
  if (dense) return {.form = AttentionForm::dense, .note = what + "XLA's dense masked softmax" + not_cudnn};
  return {.form = AttentionForm::tiled,
          .note = what + "XLA's loops over " + std::to_string(mask.block_q()) + " x " + std::to_string(mask.block_kv()) +
                  " tiles" + not_cudnn};
}

}  // namespace titan::attention
