#include "titan/rl/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace titan::rl {

namespace {

// The first of the largest logits.
int64_t argmax(const std::vector<double>& x) {
  return std::max_element(x.begin(), x.end()) - x.begin();
}

}  // namespace

void validate(const SamplingOptions& opts) {
  TITAN_CHECK(std::isfinite(opts.temperature) && opts.temperature >= 0,
              "sampling: temperature = ", opts.temperature,
              " must be a finite number >= 0 (0: greedy, 1: the model's distribution)");
  TITAN_CHECK(opts.top_k >= 0, "sampling: top_k = ", opts.top_k,
              " must be >= 0 (the number of most likely tokens kept; 0: all)");
  TITAN_CHECK(opts.top_p > 0 && opts.top_p <= 1, "sampling: top_p = ", opts.top_p,
              " must be in (0, 1] (the probability mass of the most likely tokens kept; 1: all)");
}

double log_prob(const Tensor& logits, int64_t token, double temperature) {
  TITAN_CHECK(logits.dim() == 1 && token >= 0 && token < logits.numel(), "log_prob: token ", token,
              " is not an id of logits ", logits.desc());
  const std::vector<double> x = logits.to_vector<double>();
  const double t = temperature > 0 ? temperature : 1.0;
  const double top = x[static_cast<size_t>(argmax(x))];
  double total = 0;
  for (double v : x) total += std::exp((v - top) / t);
  return (x[static_cast<size_t>(token)] - top) / t - std::log(total);
}

Sampler::Sampler(const SamplingOptions& opts) : opts_(opts), gen_(opts.seed) {
  validate(opts);
}

std::vector<std::pair<int64_t, double>> Sampler::distribution(const Tensor& logits) const {
  TITAN_CHECK(logits.dim() == 1 && logits.numel() >= 1, "Sampler: expected logits [vocab], got ",
              logits.desc());
  const std::vector<double> x = logits.to_vector<double>();
  const auto bad = std::find_if(x.begin(), x.end(), [](double v) { return std::isnan(v) || v == INFINITY; });
  TITAN_CHECK(bad == x.end(), "Sampler: logit ", bad - x.begin(), " of ", logits.desc(), " is ", *bad,
              "; the model's output is broken (diverged weights, or a bad checkpoint)");
  const int64_t V = logits.numel();
  if (opts_.temperature == 0 || opts_.top_k == 1) return {{argmax(x), 1.0}};
  TITAN_CHECK(x[static_cast<size_t>(argmax(x))] > -INFINITY, "Sampler: every logit of ", logits.desc(),
              " is -inf; there is no token to draw");

  std::vector<int64_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  // More likely first; equals by id, so that the order, and so the draw, is fixed.
  auto before = [&x](int64_t a, int64_t b) {
    const double xa = x[static_cast<size_t>(a)], xb = x[static_cast<size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  };
  if (opts_.top_k > 0 && opts_.top_k < V) {
    std::partial_sort(ids.begin(), ids.begin() + opts_.top_k, ids.end(), before);
    ids.resize(static_cast<size_t>(opts_.top_k));
  } else if (opts_.top_p < 1) {
    std::sort(ids.begin(), ids.end(), before);
  }

  // softmax(x / temperature) over the kept ids, in double; exp(-inf) drops masked tokens.
  const double top = x[static_cast<size_t>(argmax(x))];
  std::vector<std::pair<int64_t, double>> dist;
  dist.reserve(ids.size());
  double total = 0;
  for (int64_t id : ids) {
    const double p = std::exp((x[static_cast<size_t>(id)] - top) / opts_.temperature);
    if (p > 0) {
      dist.emplace_back(id, p);
      total += p;
    }
  }
  for (auto& [id, p] : dist) p /= total;
  if (opts_.top_p < 1) {
    // The smallest prefix, most likely first, whose mass reaches top_p.
    double mass = 0;
    size_t keep = 0;
    while (keep < dist.size() && mass < opts_.top_p) mass += dist[keep++].second;
    dist.resize(keep);
    for (auto& [id, p] : dist) p /= mass;
  }
  return dist;
}

int64_t Sampler::sample(const Tensor& logits) {
  const std::vector<std::pair<int64_t, double>> dist = distribution(logits);
  if (dist.size() == 1) return dist.front().first;
  const double u = philox_uniform_f64(gen_.seed(), gen_.reserve(1));
  double cumulative = 0;
  for (const auto& [id, p] : dist) {
    cumulative += p;
    if (u < cumulative) return id;
  }
  return dist.back().first;  // u within rounding of 1
}

}  // namespace titan::rl
