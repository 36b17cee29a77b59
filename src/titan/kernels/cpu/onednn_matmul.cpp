#include "titan/kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <memory>
#include <mutex>
#include <string>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/trace.h"
#include "titan/kernels/cpu/onednn_engine.h"

namespace titan::kernels::cpu {

namespace {

using dnnl::memory;

struct Key {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const Key& o) const {
    return std::tie(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta) ==
           std::tie(o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha, o.beta);
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = std::hash<int64_t>()(key.m);
    for (int64_t v : {key.n, key.k, key.lda, key.ldb, key.ldc, int64_t{key.ta} * 2 + key.tb})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h ^ std::hash<float>()(key.alpha) * 31 ^ std::hash<float>()(key.beta);
  }
};

// A primitive and the scratchpad it needs. The scratchpad is the caller's (user mode), so that
// one primitive may run on several threads at once.
struct Entry {
  dnnl::matmul primitive;
  size_t scratch_bytes = 0;
  std::string impl;  // oneDNN's name for the implementation it picked
};

// A [rows, cols] operand at leading dimension ld, stored transposed when `trans`; rows may be
// left to run time.
memory::desc operand(int64_t rows, int64_t cols, int64_t ld, bool trans, memory::data_type type) {
  return memory::desc({rows, cols}, type, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

std::shared_ptr<const Entry> make_entry(const Key& key) {
  using dt = memory::data_type;
  // m or k may be DNNL_RUNTIME_DIM_VAL: a primitive that serves every value of it.
  const memory::desc a = operand(key.m, key.k, key.lda, key.ta, dt::bf16);
  const memory::desc b = operand(key.k, key.n, key.ldb, key.tb, dt::bf16);
  const memory::desc c = operand(key.m, key.n, key.ldc, false, dt::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // alpha scales the product before the sum post-op adds beta * C, as a scale on A's values
  // (one for the whole tensor, passed with each run) does.
  if (key.alpha != 1.0f) attr.set_scales_mask(DNNL_ARG_SRC, 0);
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(onednn_engine(), a, b, c, attr);
  auto entry = std::make_shared<Entry>();
  entry->primitive = dnnl::matmul(pd);
  entry->scratch_bytes = pd.scratchpad_desc().get_size();
  entry->impl = pd.impl_info_str();
  return entry;
}

std::shared_ptr<const Entry> cached(const Key& key) {
  static std::mutex mutex;
  static std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  trace::Span span("onednn primitive", "gemm");
  std::shared_ptr<const Entry> entry = make_entry(key);
  const std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(entry)).first->second;
}

}  // namespace

void onednn_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a,
                      int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc,
                      Varying varying) {
  // oneDNN has no bf16 primitive to give without the instructions: say so rather than pass on its
  // "could not create a primitive descriptor iterator".
  static const bool supported = !onednn_bf16_isa().empty();
  TITAN_CHECK(supported,
              "bf16 matrix products need AMX-BF16 or AVX512-BF16, and this CPU has neither (or "
              "ONEDNN_MAX_CPU_ISA keeps oneDNN from them); multiply in float32 on it");
  trace::Span span("bf16 gemm", "gemm");
  span.arg("M", m).arg("N", n).arg("K", k).arg("flops", 2 * m * n * k);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product to run; make C what the definition says
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  lda = std::max<int64_t>(lda, ta ? m : k);
  ldb = std::max<int64_t>(ldb, tb ? k : n);
  ldc = std::max<int64_t>(ldc, n);
  const int64_t runtime = DNNL_RUNTIME_DIM_VAL;
  const Key key{
      ta,    tb,  varying == Varying::m ? runtime : m, n, varying == Varying::k ? runtime : k, lda, ldb, ldc,
      alpha, beta};
  std::shared_ptr<const Entry> entry = cached(key);
  using dt = memory::data_type;
  dnnl::engine& engine = onednn_engine();
  memory am(operand(m, k, lda, ta, dt::bf16), engine, const_cast<bf16*>(a));
  memory bm(operand(k, n, ldb, tb, dt::bf16), engine, const_cast<bf16*>(b));
  memory cm(operand(m, n, ldc, false, dt::f32), engine, c);
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < entry->scratch_bytes) scratch.resize(entry->scratch_bytes);
  memory sm(dnnl::memory::desc({static_cast<memory::dim>(entry->scratch_bytes)}, dt::u8, memory::dims{1}),
            engine, scratch.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
  if (alpha != 1.0f)
    args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, memory({{1}, dt::f32, memory::dims{1}}, engine, &alpha));
  dnnl::stream& stream = onednn_stream();
  entry->primitive.execute(stream, args);
  stream.wait();
}

std::string onednn_gemm_bf16_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha) {
  TITAN_CHECK(m > 0 && n > 0 && k > 0, "onednn_gemm_bf16_impl: expected a product of positive sizes, got m ", m,
              ", n ", n, ", k ", k);
  if (onednn_bf16_isa().empty()) return "";
  return cached({trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n, n, alpha, 0.0f})->impl;
}

std::string onednn_bf16_isa() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [&](dnnl::cpu_isa want) {
    return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
  };
  if (has(dnnl::cpu_isa::avx512_core_amx)) return "AMX-BF16";
  if (has(dnnl::cpu_isa::avx512_core_bf16)) return "AVX512-BF16";
  return "";
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace titan::kernels::cpu
