#include "titan/data/token_stream.h"

#include <algorithm>
#include <cstring>

#include "titan/core/error.h"

namespace titan::data {

void TokenStream::append(std::vector<int32_t> ids) {
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  append(owned->data(), static_cast<int64_t>(owned->size()), owned);
}

void TokenStream::append(const int32_t* ids, int64_t n, std::shared_ptr<const void> owner) {
  if (n == 0) return;
  pieces_.push_back({size_, n, ids, std::move(owner)});
  size_ += n;
}

void TokenStream::read(int64_t start, int64_t n, int32_t* out) const {
  TITAN_CHECK(start >= 0 && n >= 0 && start + n <= size_, "TokenStream::read: ids [", start, ", ", start + n,
              ") are outside the stream of ", size_, " ids");
  // The last piece that begins at or before `start`.
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), start,
                             [](int64_t s, const Piece& p) { return s < p.begin; });
  for (--it; n > 0; ++it) {
    const int64_t offset = start - it->begin, take = std::min(n, it->size - offset);
    std::memcpy(out, it->ids + offset, static_cast<size_t>(take) * sizeof(int32_t));
    out += take;
    start += take;
    n -= take;
  }
}

}  // namespace titan::data
