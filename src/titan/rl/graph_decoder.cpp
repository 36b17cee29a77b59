#include "titan/rl/graph_decoder.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <set>
#include <sstream>

#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/moe/router.h"
#include "titan/train/graph_mode/custom_kernels.h"
#include "titan/train/graph_mode/graph_moe.h"

namespace titan::rl {

namespace {

// Cache sizes shared by sequences of similar lengths: the next power of two from 16, capped.
int64_t cache_size(int64_t max_len, int64_t context) {
  int64_t n = 16;
  while (n < max_len) n *= 2;
  return std::min(n, context);
}

}  // namespace

GraphDecoder::GraphDecoder(models::CausalLM& model, const GraphDecoderOptions& options, std::ostream* log)
    : Decoder(model), options_(options), log_(log), runner_(options.runtime) {
  const train::CustomKernels kernels = train::enable_custom_kernels(runner_, options.custom_kernels);
  custom_kernels_ = kernels.on;
  const std::optional<std::string> moe = train::GraphMoeLayout(model, custom_kernels_).note();
  params_ = model.named_parameters();
  // A weight that an embedding also reads (tied) is looked up in f32 there, and a router's gate
  // multiplies in f32 whatever autocast says (nn/moe/router.cpp): both stay f32.
  std::set<const TensorImpl*> linear, kept_f32;
  for (const auto& [name, m] : model.named_modules()) {
    if (const auto* l = dynamic_cast<const nn::Linear*>(m)) linear.insert(l->weight.impl());
    if (const auto* e = dynamic_cast<const nn::Embedding*>(m)) kept_f32.insert(e->weight.impl());
    if (const auto* r = dynamic_cast<const nn::moe::TopKRouter*>(m)) kept_f32.insert(r->gate->weight.impl());
  }
  for (const auto& [name, p] : params_)
    product_only_.push_back(p.dtype() == kF32 && linear.count(p.impl()) && !kept_f32.count(p.impl()));
  for (const auto& [name, b] : model.named_buffers(/*persistent_only=*/true)) buffer_tensors_.push_back(b);
  reload_weights();
  if (log_) {
    *log_ << "titan: generating in graph mode on " << runner_.describe() << "\n"
          << "titan: graph mode: titan's kernels as custom calls: " << kernels.note << "\n";
    if (moe) *log_ << "titan: " << *moe << "\n";
  }
}

void GraphDecoder::reload_weights() {
  weights_.clear();
  weights_bf16_.clear();
  buffers_.clear();
  for (const auto& [name, p] : params_) weights_.push_back(runner_.upload(p.contiguous()));
  for (const Tensor& b : buffer_tensors_) buffers_.push_back(runner_.upload(b.contiguous()));
}

GraphDecoder::Compiled& GraphDecoder::program(int64_t tokens, int64_t cache_len, bool decode) {
  using Source = Feed::Source;
  const std::string key = std::string(decode ? "decode" : "prefill") + " tokens " + std::to_string(tokens) +
                          " cache " + std::to_string(cache_len) + " " + std::string(dtype_name(autocast_dtype()));
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;
  const auto t0 = std::chrono::steady_clock::now();
  Compiled c;
  graph::Program program;
  program.set_custom_kernels(custom_kernels_);
  program.set_platform(runner_.platform());
  program.set_cudnn_attention(options_.cudnn_attention);
  std::vector<graph::Value> results;
  std::map<int64_t, Feed> feed_of;  // by the parameter's value id
  {
    // The model's MoE layers dispatch as graph mode runs them, for this capture only.
    const train::GraphMoeLayout moe_layout(model(), custom_kernels_);
    graph::CaptureScope scope(program);
    graph::BoundTensors bound;
    const bool bf16 = autocast_dtype() == kBF16;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].second;
      const bool narrow = bf16 && product_only_[i];
      const graph::Value v = program.parameter(p.sizes(), narrow ? kBF16 : p.dtype(), "param." + params_[i].first,
                                               graph::InputKind::state);
      feed_of[v.id] = {narrow ? Source::weight_bf16 : Source::weight, i};
      // Widened for the model's code, which sees its f32 weights; XLA folds the widening into the
      // products' own rounding to bf16, so the program reads the bf16 copy.
      bound.bind(p, narrow ? graph::hlo::convert(v, p.dtype()) : v);
    }
    for (size_t i = 0; i < buffer_tensors_.size(); ++i) {
      const Tensor& b = buffer_tensors_[i];
      const graph::Value v = program.parameter(b.sizes(), b.dtype(), "buffer." + std::to_string(i),
                                               graph::InputKind::state);
      feed_of[v.id] = {Source::buffer, i};
      bound.bind(b, v);
    }
    const graph::Value ids = program.parameter({1, tokens}, kI64, "tokens", graph::InputKind::batch);
    feed_of[ids.id] = {Source::tokens};
    std::vector<int64_t> cache_ids;
    models::KVCache cache(1, cache_len, [&](int64_t layer, const char* which, const Shape& shape, DType dtype) {
      const graph::Value v = program.parameter(
          shape, dtype, "cache." + std::to_string(layer) + "." + which, graph::InputKind::state);
      feed_of[v.id] = {Source::cache, c.cache.size()};
      c.cache.emplace_back(shape, dtype);
      cache_ids.push_back(v.id);
      return graph::tensor_of(v);
    });
    if (decode) {
      const graph::Value pos = program.parameter({}, kI64, "position", graph::InputKind::batch);
      feed_of[pos.id] = {Source::position};
      cache.place_at(graph::tensor_of(pos));
    }
    const Tensor logits = model().forward_cached(graph::tensor_of(ids), cache);
    results.push_back(graph::value_of(logits.narrow(1, tokens - 1, 1).reshape({logits.size(2)}).to(kF32),
                                      "the last token's logits"));
    TITAN_CHECK(2 * cache.layers() == static_cast<int64_t>(c.cache.size()),
                "graph mode's generation: the model's cached forward allocated ", c.cache.size(),
                " cache buffers for ", cache.layers(), " layers");
    for (int64_t l = 0; l < cache.layers(); ++l) {
      const auto [k, v] = cache.buffers(l);
      results.push_back(graph::value_of(k, "the cache's keys"));
      results.push_back(graph::value_of(v, "the cache's values"));
    }
  }
  std::vector<std::pair<int, int>> aliases;
  const std::vector<graph::Parameter>& params = program.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const graph::Parameter& p = params[i];
    if (p.kind == graph::InputKind::host) {
      c.feeds.push_back({Source::host, c.host.size()});
      c.host.push_back(runner_.upload(p.host));
      continue;
    }
    const Feed f = feed_of.at(p.value.id);
    c.feeds.push_back(f);
    if (f.source == Source::cache) {
      aliases.emplace_back(static_cast<int>(i), static_cast<int>(1 + f.index));
      c.donated.push_back(static_cast<int>(i));
    }
  }
  const std::string text = program.module_text(results, aliases);
  const double captured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const graph::Runner::Compiled compiled = runner_.compile(text);
  c.executable = compiled.executable;
  if (log_) {
    // Formatted apart, so that the caller's stream keeps its own precision.
    std::ostringstream line;
    line << std::fixed << std::setprecision(3) << "titan: graph mode: captured "
         << (decode ? "the decoding step" : "the prefill") << " (" << key << ", " << program.num_ops() << " ops) in "
         << captured << " s; ";
    if (compiled.fresh)
      line << "compiled in " << compiled.seconds << " s";
    else
      line << "compiled before";
    *log_ << line.str() << "\n";
  }
  return programs_.emplace(key, std::move(c)).first->second;
}

Tensor GraphDecoder::run(Compiled& p, const std::vector<int64_t>& tokens, int64_t position) {
  using Source = Feed::Source;
  std::vector<graph::pjrt::Buffer> uploaded;
  uploaded.reserve(2);
  std::vector<graph::pjrt::Buffer*> args;
  for (const Feed& f : p.feeds) switch (f.source) {
      case Source::weight: args.push_back(&weights_[f.index]); break;
      case Source::weight_bf16:
        if (weights_bf16_.empty()) {
          // Filled whole or not at all: a failed upload leaves none behind. Empty where no program
          // reads a bf16 copy.
          std::vector<graph::pjrt::Buffer> copies(params_.size());
          for (size_t i = 0; i < params_.size(); ++i)
            if (product_only_[i]) copies[i] = runner_.upload(params_[i].second.to(kBF16));
          weights_bf16_ = std::move(copies);
        }
        args.push_back(&weights_bf16_[f.index]);
        break;
      case Source::buffer: args.push_back(&buffers_[f.index]); break;
      case Source::host: args.push_back(&p.host[f.index]); break;
      case Source::cache: args.push_back(&cache_[f.index]); break;
      case Source::tokens:
        uploaded.push_back(runner_.upload(Tensor::from_vector(tokens, {1, static_cast<int64_t>(tokens.size())})));
        args.push_back(&uploaded.back());
        break;
      case Source::position:
        uploaded.push_back(runner_.upload(Tensor::scalar<int64_t>(position)));
        args.push_back(&uploaded.back());
        break;
    }
  std::vector<graph::pjrt::Buffer> out = p.executable->execute(args, p.donated);
  for (size_t i = 0; i < cache_.size(); ++i) cache_[i] = std::move(out[1 + i]);
  return runner_.download(out[0]);
}

Tensor GraphDecoder::prefill(std::span<const int64_t> prompt, int64_t max_len) {
  const auto P = static_cast<int64_t>(prompt.size());
  const int64_t context = model().max_seq_len();
  TITAN_CHECK(P >= 1 && P <= max_len && max_len <= context, "GraphDecoder::prefill: a prompt of ", P,
              " tokens in a sequence of at most ", max_len, " positions, for a model of context ", context,
              "; expected 1 <= prompt <= max_len <= context");
  for (int64_t id : prompt)
    TITAN_CHECK(id >= 0 && id < model().vocab_size(), "GraphDecoder::prefill: prompt token ", id,
                " is outside the model's vocabulary of ", model().vocab_size(),
                " ids (a program's lookup would clamp it, not refuse it)");
  autograd::NoGradGuard no_grad;
  cache_len_ = cache_size(max_len, context);
  Compiled& p = program(P, cache_len_, false);
  // Zeros, not garbage: the decoding step's masked positions still enter a product (times 0).
  cache_.clear();
  for (const auto& [shape, dtype] : p.cache) cache_.push_back(runner_.upload(Tensor::zeros(shape, {.dtype = dtype})));
  position_ = P;
  return run(p, std::vector<int64_t>(prompt.begin(), prompt.end()), 0);
}

Tensor GraphDecoder::decode(int64_t token) {
  TITAN_CHECK(!cache_.empty(), "GraphDecoder::decode: no sequence was started; call prefill first");
  TITAN_CHECK(position_ < cache_len_, "GraphDecoder::decode: position ", position_, " is past the cache's ",
              cache_len_, " positions; prefill's max_len bounds the sequence");
  TITAN_CHECK(token >= 0 && token < model().vocab_size(), "GraphDecoder::decode: token ", token,
              " is outside the model's vocabulary of ", model().vocab_size(), " ids");
  autograd::NoGradGuard no_grad;
  Compiled& p = program(1, cache_len_, true);
  Tensor logits = run(p, {token}, position_);
  ++position_;
  return logits;
}

}  // namespace titan::rl
