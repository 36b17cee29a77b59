// The smallest end-to-end training run: Embedding -> RMSNorm -> SwiGLU feed-forward -> logits,
// learning the synthetic next-token rule y = (3 x + 1) mod V with AdamW, a warmup-cosine
// schedule and grad-norm clipping. Prints one line per step; exits non-zero unless the loss
// falls by at least half, so it doubles as a smoke test of every layer from core to optim.
//
//   train_tiny [--steps=N] [--seed=S]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/norm.h"
#include "titan/ops/activation.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"
#include "titan/optim/clip.h"
#include "titan/optim/lr_scheduler.h"

namespace {

using namespace titan;

constexpr int64_t kVocab = 64, kDim = 32, kHidden = 64, kBatch = 8, kSeq = 32;

struct TinyModel : nn::Module {
  std::shared_ptr<nn::Embedding> tok_embeddings;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::Linear> w1, w2, w3;

  TinyModel() {
    tok_embeddings = register_module("tok_embeddings", std::make_shared<nn::Embedding>(kVocab, kDim));
    norm = register_module("norm", std::make_shared<nn::RMSNorm>(kDim));
    w1 = register_module("w1", std::make_shared<nn::Linear>(kDim, kHidden));
    w2 = register_module("w2", std::make_shared<nn::Linear>(kHidden, kVocab));
    w3 = register_module("w3", std::make_shared<nn::Linear>(kDim, kHidden));
  }
  // ids [B, T] -> logits [B, T, V]
  Tensor operator()(const Tensor& ids) {
    Tensor h = (*norm)((*tok_embeddings)(ids));
    return (*w2)(ops::swiglu((*w1)(h), (*w3)(h)));
  }
};

// A fresh batch from gen's stream: tokens uniform over the vocabulary, and their targets.
std::pair<Tensor, Tensor> make_batch(Generator& gen) {
  int64_t n = kBatch * kSeq;
  uint64_t first = gen.reserve(static_cast<uint64_t>(n));
  std::vector<int64_t> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::min<int64_t>(kVocab - 1,
                             static_cast<int64_t>(philox_uniform_f64(gen.seed(), first + i) * kVocab));
    y[i] = (3 * x[i] + 1) % kVocab;
  }
  return {Tensor::from_vector(x, {kBatch, kSeq}), Tensor::from_vector(y, {kBatch, kSeq})};
}

int64_t parse_flag(const char* arg, const char* name, int64_t fallback) {
  size_t len = std::strlen(name);
  if (std::strncmp(arg, name, len) != 0 || arg[len] != '=') return fallback;
  char* end = nullptr;
  long long v = std::strtoll(arg + len + 1, &end, 10);
  TITAN_CHECK(*end == '\0' && v > 0, "train_tiny: ", name, " needs a positive integer, got '", arg + len + 1,
              "'");
  return v;
}

int run(int argc, char** argv) {
  int64_t steps = 100, seed = 1;
  for (int i = 1; i < argc; ++i) {
    int64_t s = parse_flag(argv[i], "--steps", -1), d = parse_flag(argv[i], "--seed", -1);
    TITAN_CHECK(s > 0 || d > 0, "train_tiny: unknown argument '", argv[i],
                "'; usage: train_tiny [--steps=N] [--seed=S]");
    if (s > 0) steps = s;
    if (d > 0) seed = d;
  }

  TinyModel model;
  Generator init_gen(static_cast<uint64_t>(seed)), data_gen(static_cast<uint64_t>(seed) + 1);
  model.init_weights(init_gen);
  std::printf("tiny model: %lld parameters; task y = (3x + 1) mod %lld\n",
              static_cast<long long>(model.num_parameters()), static_cast<long long>(kVocab));

  optim::AdamW opt(model.named_parameters(), {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
  optim::LrScheduler sched(opt, {.training_steps = steps,
                                 .warmup_steps = std::min<int64_t>(10, steps / 5),
                                 .decay_type = optim::DecayType::cosine,
                                 .min_lr_factor = 0.1});
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    auto [ids, targets] = make_batch(data_gen);
    opt.zero_grad();
    Tensor loss = ops::cross_entropy(model(ids), targets);
    loss.backward();
    double grad_norm = optim::clip_grad_norm_(model.parameters(), 1.0);
    double lr = opt.lr();
    opt.step();
    sched.step();
    last_loss = loss.item();
    if (step == 1) first_loss = last_loss;
    std::printf("step %4lld  loss %.4f  grad_norm %.4f  lr %.3e\n", static_cast<long long>(step), last_loss,
                grad_norm, lr);
  }
  bool learned = last_loss <= 0.5 * first_loss;
  std::printf("loss %.4f -> %.4f: %s\n", first_loss, last_loss,
              learned ? "fell by at least half" : "did NOT fall by half; training is broken");
  return learned ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
