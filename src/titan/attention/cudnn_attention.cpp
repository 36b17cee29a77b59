#include "titan/attention/cudnn_attention.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "titan/core/error.h"
#include "titan/graph/ir/hlo.h"

namespace titan::attention {

namespace {

using graph::Value;
namespace hlo = graph::hlo;

// BTNH's result layout: a result of shape [B, N, T, H] stored as [B, T, N, H] (minor to major).
const Shape kBtnhLayout{3, 1, 2, 0};
const Shape kToBtnh{0, 2, 1, 3};

std::string number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// ["1","2"]: appended piece by piece, which GCC 12's -Wrestrict does not misread as it does
// "\"" + std::string.
std::string strings(const Shape& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i) out += ',';
    out += '"';
    out += std::to_string(xs[i]);
    out += '"';
  }
  out += ']';
  return out;
}

// One product's dimension numbers: {lhs contracting, rhs contracting, lhs batch, rhs batch}.
struct Dims {
  const char* name;
  int64_t lhs_contracting, rhs_contracting;
  Shape lhs_batch, rhs_batch;
};
std::string dims_json(const Dims& d) {
  std::string out = "\"";
  out += d.name;
  out += "\":{\"lhs_contracting_dimensions\":";
  out += strings({d.lhs_contracting});
  out += ",\"rhs_contracting_dimensions\":";
  out += strings({d.rhs_contracting});
  out += ",\"lhs_batch_dimensions\":";
  out += strings(d.lhs_batch);
  out += ",\"rhs_batch_dimensions\":";
  out += strings(d.rhs_batch);
  out += '}';
  return out;
}

// The products of the BTNH layout: Q K^T -> P [B, N, T, S], P V -> O; backward dP^T Q -> dK,
// dP K -> dQ, P^T dO -> dV, dO V^T -> dP.
const std::vector<Dims> kForwardDims{{"bmm1_dot_dimension_numbers", 3, 3, {0, 2}, {0, 2}},
                                     {"bmm2_dot_dimension_numbers", 3, 1, {0, 1}, {0, 2}}};
const std::vector<Dims> kBackwardDims{{"bmm1_grad_gemm1_dot_dimension_numbers", 2, 1, {0, 1}, {0, 2}},
                                      {"bmm1_grad_gemm2_dot_dimension_numbers", 3, 1, {0, 1}, {0, 2}},
                                      {"bmm2_grad_gemm1_dot_dimension_numbers", 2, 1, {0, 1}, {0, 2}},
                                      {"bmm2_grad_gemm2_dot_dimension_numbers", 3, 3, {0, 2}, {0, 2}}};

void check_operands(const char* what, const Value& q, const Value& k, const Value& v) {
  TITAN_CHECK(q.shape.size() == 4 && k.shape.size() == 4 && k.shape == v.shape && k.shape[0] == q.shape[0] &&
                  k.shape[3] == q.shape[3] && k.shape[2] > 0 && q.shape[2] % k.shape[2] == 0 && q.dtype == kBF16 &&
                  k.dtype == kBF16 && v.dtype == kBF16,
              what, ": wants q [B, T, Hq, D], k and v [B, S, Hkv, D] in bf16 with Hkv dividing Hq, got ",
              graph::mlir_type(q), ", ", graph::mlir_type(k), ", ", graph::mlir_type(v));
}

const graph::ResultType kWorkspace{.shape = {0}, .dtype = kF32, .pred = false, .bytes = true};

}  // namespace

CudnnFit cudnn_fit(const BlockMask& mask, DType dtype, bool bf16_products, const Scores& scores, int64_t head_dim,
                   int64_t max_documents) {
  if (dtype != kBF16 && !bf16_products)
    return {.why_not = "cuDNN's flash attention takes bf16 or f16, and this attention's products are " +
                       std::string(dtype_name(dtype))};
  if (scores.softcap) return {.why_not = "cuDNN's fused attention has no soft-capping of the scores"};
  if (head_dim > kCudnnMaxHeadDim || head_dim % 8 != 0)
    return {.why_not = "cuDNN's flash attention takes head dims that are multiples of 8 up to " +
                       std::to_string(kCudnnMaxHeadDim) + ", not " + std::to_string(head_dim)};
  const std::optional<MaskTerms> terms = mask.mask().terms();
  if (!terms)
    return {.why_not = "the mask " + mask.mask().describe() + " is not causal plus a window, which cuDNN's band takes"};
  const bool documents = terms->document_ids.defined();
  if (documents && max_documents < 1)
    return {.why_not = "packed documents with no bound on how many a row holds (graph mode's training step counts "
                       "them in each batch; ids not numbered as the loader numbers them have none)"};
  if (terms->chunk > 0) return {.why_not = "cuDNN's band cannot express chunked attention"};
  // The pairs the rule shows are q - left <= k <= q + right, either bound absent where it reaches
  // past the sequence.
  const int64_t seq = mask.seq();
  const bool windowed = terms->window_left >= 0;
  const bool left_bounded = windowed && terms->window_left < seq - 1;
  // Documents attend causally within themselves (Mask::document).
  const bool causal = documents || terms->causal || (windowed && terms->window_right == 0);
  const bool right_open = !causal && (!windowed || terms->window_right >= seq - 1);
  if (!causal && !right_open)
    return {.why_not = "a window reaching " + std::to_string(terms->window_right) +
                       " keys past the query: cuDNN's band ends at the diagonal or not at all"};
  if (!causal && left_bounded)
    return {.why_not = "a window bounded on the left but open to the right, which cuDNN's band cannot express"};
  // One document a row is the causal mask alone.
  return {.spec = CudnnCallSpec{.causal = causal,
                                .window = left_bounded ? terms->window_left + 1 : 0,
                                .scale = scores.scale,
                                .documents = documents ? max_documents : 1}};
}

std::string cudnn_backend_config(const CudnnCallSpec& spec, int64_t B, int64_t Hq, int64_t T, int64_t S,
                                 bool backward) {
  std::string dims;
  for (const Dims& d : backward ? kBackwardDims : kForwardDims) {
    dims += ',';
    dims += dims_json(d);
  }
  return "{\"operation_queue_id\":\"0\",\"wait_on_operation_queues\":[],\"cudnn_fmha_backend_config\":{"
         "\"algorithm\":{\"algo_id\":\"0\",\"math_type\":\"TENSOR_OP_MATH\",\"tuning_knobs\":{\"17\":\"1\",\"24\":"
         "\"0\"},\"is_cudnn_frontend\":true,\"workspace_size\":\"0\"},"
         "\"fmha_scale\":" +
         number(spec.scale) +
         ",\"intermediate_tensor_shape\":{\"element_type\":\"BF16\",\"dimensions\":" + strings({B, Hq, T, S}) +
         ",\"tuple_shapes\":[],\"layout\":{\"dim_level_types\":[],\"dim_unique\":[],\"dim_ordered\":[],"
         "\"minor_to_major\":[\"3\",\"2\",\"1\",\"0\"],\"tiles\":[],\"element_size_in_bits\":\"0\",\"memory_space\":"
         "\"0\",\"index_primitive_type\":\"PRIMITIVE_TYPE_INVALID\",\"pointer_primitive_type\":\"PRIMITIVE_TYPE_"
         "INVALID\",\"dynamic_shape_metadata_prefix_bytes\":\"0\"},\"is_dynamic_dimension\":[false,false,false,"
         "false]},\"is_flash_attention\":true,\"mask_type\":\"" +
         std::string(spec.causal ? "CAUSAL" : "NO_MASK") + "\"" + dims +
         ",\"dropout_rate\":0,\"seed\":42,\"sliding_window_length\":" + std::to_string(spec.window) +
         ",\"max_seg_per_batch\":" + std::to_string(spec.documents) + ",\"is_paged_attention\":false}}";
}

bool cudnn_offsets_fit(int64_t B, int64_t T, int64_t heads, int64_t head_dim) {
  return B * T * heads * head_dim <= std::numeric_limits<int32_t>::max();
}

CudnnSegments cudnn_segments(const Value& document_ids, int64_t documents, int64_t q_heads, int64_t kv_heads,
                             int64_t head_dim) {
  TITAN_CHECK(document_ids.shape.size() == 2 && documents > 1, "cudnn_segments: wants document ids [B, T] and a bound ",
              "above 1 on the documents a row holds, got ", graph::mlir_type(document_ids), " and ", documents);
  const int64_t B = document_ids.shape[0], T = document_ids.shape[1], M = documents;
  TITAN_CHECK(cudnn_offsets_fit(B, T, std::max(q_heads, kv_heads), head_dim),
              "cudnn_segments: ", B, " x ", T, " tokens of ", std::max(q_heads, kv_heads), " heads of ", head_dim,
              " pass i32's offsets; attention this large stays with XLA's lowering (cudnn_fit)");
  auto i32 = [](double x, const Shape& shape) { return hlo::constant(x, shape, kI32); };
  auto count = [&](const Value& pred) {  // 1 where pred holds
    return hlo::select(pred, i32(1, pred.shape), i32(0, pred.shape));
  };
  const Value ids = hlo::convert(document_ids, kI32);
  const Value doc = hlo::sub(ids, hlo::broadcast_in_dim(hlo::reshape(hlo::slice(ids, {0, 0}, {B, 1}), {B}), {B, T}, {0}));
  const Shape btm{B, T, M};
  const Value doc3 = hlo::broadcast_in_dim(doc, btm, {0, 1}), m3 = hlo::iota(btm, 2, kI32);
  const Value length = hlo::reduce_sum(count(hlo::compare(doc3, m3, "EQ")), {1});  // [B, M]
  const Value start = hlo::reduce_sum(count(hlo::compare(doc3, m3, "LT")), {1});   // tokens before it
  // The documents of each row come first in their row, so row b's are slots earlier[b] + m of the
  // batch's list, earlier[b] the documents of the rows before it.
  const Value present = hlo::compare(length, i32(0, {B, M}), "GT");
  const Value per_row = hlo::reduce_sum(count(present), {1});
  const Shape bb{B, B};
  const Value earlier = hlo::reduce_sum(
      hlo::select(hlo::compare(hlo::iota(bb, 0, kI32), hlo::iota(bb, 1, kI32), "GT"),
                  hlo::broadcast_in_dim(per_row, bb, {1}), i32(0, bb)),
      {1});
  const Value slot = hlo::select(present, hlo::add(hlo::broadcast_in_dim(earlier, {B, M}, {0}), hlo::iota({B, M}, 1, kI32)),
                                 i32(-1, {B, M}));
  // Each document's value at its slot of `slots`, `fill` where no document falls. The [slots, B, M]
  // comparison stays small: B x M documents at most.
  auto packed = [&](const Value& v, int64_t slots, int64_t fill) {
    const Shape sbm{slots, B, M};
    const Value hit = hlo::compare(hlo::broadcast_in_dim(slot, sbm, {1, 2}), hlo::iota(sbm, 0, kI32), "EQ");
    const Value value = hlo::reduce_sum(hlo::select(hit, hlo::broadcast_in_dim(v, sbm, {1, 2}), i32(0, sbm)), {1, 2});
    const Value taken = hlo::compare(hlo::reduce_sum(count(hit), {1, 2}), i32(0, {slots}), "GT");
    return hlo::select(taken, value, i32(static_cast<double>(fill), {slots}));
  };
  const Value seqlen = hlo::reshape(packed(length, B * M, 0), {B, M});
  const Value token = packed(hlo::add(start, hlo::mul(hlo::iota({B, M}, 0, kI32), static_cast<double>(T))),
                             B * (M + 1), B * T);
  auto offsets = [&](int64_t heads) {
    return hlo::reshape(hlo::mul(token, static_cast<double>(heads * head_dim)), {B, M + 1});
  };
  return {.q_seqlen = seqlen, .kv_seqlen = seqlen, .q_offsets = offsets(q_heads), .kv_offsets = offsets(kv_heads)};
}

std::optional<int64_t> packed_documents_per_row(const Tensor& document_ids) {
  TITAN_CHECK(document_ids.defined() && document_ids.dim() == 2 && document_ids.size(1) > 0 &&
                  (document_ids.dtype() == kI32 || document_ids.dtype() == kI64),
              "packed_documents_per_row: expected document ids [batch, seq] of i32 or i64, got ",
              document_ids.defined() ? document_ids.desc() : std::string("an undefined tensor"));
  const Tensor ids = document_ids.contiguous().to(kI64);
  const int64_t* p = ids.data<int64_t>();
  const int64_t rows = ids.size(0), seq = ids.size(1);
  int64_t most = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* row = p + b * seq;
    for (int64_t t = 1; t < seq; ++t)
      if (row[t] != row[t - 1] && row[t] != row[t - 1] + 1) return std::nullopt;
    most = std::max(most, row[seq - 1] - row[0] + 1);
  }
  return most;
}

namespace {

// The operands after the arrays: the segments' lengths and offsets, for packed documents.
std::vector<Value> with_segments(std::vector<Value> operands, const CudnnCallSpec& spec, const CudnnSegments& s) {
  if (spec.documents == 1) return operands;
  TITAN_CHECK(s.q_seqlen.id >= 0 && s.q_offsets.id >= 0, "cuDNN attention over packed documents (",
              spec.documents, " a row at most) needs their lengths and offsets (cudnn_segments)");
  operands.insert(operands.end(), {s.q_seqlen, s.kv_seqlen, s.q_offsets, s.kv_offsets});
  return operands;
}

}  // namespace

CudnnForward cudnn_forward_call(const CudnnCallSpec& spec, const Value& q, const Value& k, const Value& v,
                                const CudnnSegments& segments) {
  check_operands(kCudnnForward, q, k, v);
  const int64_t B = q.shape[0], T = q.shape[1], Hq = q.shape[2], D = q.shape[3], S = k.shape[1];
  const std::vector<Value> r = hlo::library_call(
      kCudnnForward, with_segments({q, k, v}, spec, segments),
      {{{B, Hq, T, D}, kBF16}, {{B * spec.documents, Hq, T}, kF32}, kWorkspace},
      cudnn_backend_config(spec, B, Hq, T, S, /*backward=*/false), {kBtnhLayout, {}, {}});
  return {.out = hlo::transpose(r[0], kToBtnh), .stats = r[1], .segments = segments};
}

std::vector<Value> cudnn_backward_call(const CudnnCallSpec& spec, const Value& q, const Value& k, const Value& v,
                                       const CudnnForward& fwd, const Value& dout) {
  check_operands(kCudnnBackward, q, k, v);
  TITAN_CHECK(dout.shape == q.shape && dout.dtype == kBF16 && fwd.out.shape == q.shape && fwd.out.dtype == kBF16,
              kCudnnBackward, ": wants out and dout as q (", graph::mlir_type(q), "), got ", graph::mlir_type(fwd.out),
              " and ", graph::mlir_type(dout));
  const int64_t B = q.shape[0], T = q.shape[1], Hq = q.shape[2], D = q.shape[3], S = k.shape[1], Hkv = k.shape[2];
  const std::vector<Value> r = hlo::library_call(
      kCudnnBackward, with_segments({q, k, v, fwd.stats, dout, fwd.out}, spec, fwd.segments),
      {{{B, Hq, T, D}, kBF16}, {{B, Hkv, S, D}, kBF16}, {{B, Hkv, S, D}, kBF16}, kWorkspace},
      cudnn_backend_config(spec, B, Hq, T, S, /*backward=*/true), {kBtnhLayout, kBtnhLayout, kBtnhLayout, {}});
  return {hlo::transpose(r[0], kToBtnh), hlo::transpose(r[1], kToBtnh), hlo::transpose(r[2], kToBtnh)};
}

}  // namespace titan::attention
