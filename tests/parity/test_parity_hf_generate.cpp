// titan's greedy generation against transformers' (tests/parity/hf_generation.py): on the same
// weights (save_pretrained's folder, imported) and prompt, rl::generate at temperature 0 (prefill,
// then one token at a time over titan's KV cache) must produce the very tokens generate(do_sample=
// False) does over HF's cache. The weights lead each chosen token's logit by 0.05 or more, far
// beyond rounding; a mismatch is reported with that lead on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "hf_family.h"
#include "support/parity.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/rl/generate.h"

namespace titan::test {
namespace {

// The lead of the most likely next token over the runner-up after `sequence`, by titan's full
// forward (no cache).
double titan_top2_gap(models::CausalLM& model, const std::vector<int64_t>& sequence) {
  autograd::NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(sequence.size());
  Tensor logits = model(Tensor::from_vector(sequence, {1, n})).narrow(1, n - 1, 1);
  std::vector<float> row = logits.contiguous().to_vector<float>();
  std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
  return row[0] - row[1];
}

class ParityHfGenerate : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Families, ParityHfGenerate, ::testing::ValuesIn(hf_families()),
                         [](const auto& info) { return info.param; });

TEST_P(ParityHfGenerate, GreedyTokensMatchTransformers) {
  const std::string family = GetParam();
  const ParityCase ref{checkpoint::read_safetensors((hf_root(family) / "generate.safetensors").string())};
  auto model = import_hf_model(family, hf_root(family) / "generate");
  const std::vector<int64_t> prompt = ref["in.prompt"].to_vector<int64_t>();
  const std::vector<int64_t> want = ref["out.tokens"].to_vector<int64_t>();
  const std::vector<float> hf_gap = ref["out.top2_gap"].to_vector<float>();

  rl::GenerateOptions opts{.max_new_tokens = static_cast<int64_t>(want.size()), .sampling = {.temperature = 0}};
  const std::vector<int64_t> got = rl::generate(*model, prompt, opts).tokens;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    std::vector<int64_t> before = prompt;
    before.insert(before.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(i));
    ADD_FAILURE() << "new token " << i << ": titan " << got[i] << ", transformers " << want[i]
                  << "; top-2 logit gap there: transformers " << hf_gap[i] << ", titan (full forward) "
                  << titan_top2_gap(*model, before);
    break;
  }
}

}  // namespace
}  // namespace titan::test
