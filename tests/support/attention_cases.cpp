#include "support/attention_cases.h"

#include <random>
#include <vector>

namespace titan::test {

Tensor packed_ids(int64_t B, int64_t S, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0, doc = 0, left = 0; s < S; ++s, --left) {
      if (left == 0) {
        left = std::uniform_int_distribution<int64_t>(1, S / 3)(rng);
        ++doc;
      }
      ids.push_back(doc);
    }
  return Tensor::from_vector(ids, {B, S});
}

}  // namespace titan::test
