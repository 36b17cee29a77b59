#pragma once
// Problems found while checking a checkpoint, reported together so that one run shows all of
// them.
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace titan::checkpoint {

class Problems {
 public:
  void add(std::string p) { list_.push_back(std::move(p)); }
  bool empty() const { return list_.empty(); }
  // One "\n  - problem" line each, the first dozen and a count of the rest.
  std::string str() const {
    constexpr size_t kShown = 12;
    std::ostringstream os;
    for (size_t i = 0; i < list_.size() && i < kShown; ++i) os << "\n  - " << list_[i];
    if (list_.size() > kShown) os << "\n  - ... and " << list_.size() - kShown << " more";
    return os.str();
  }

 private:
  std::vector<std::string> list_;
};

}  // namespace titan::checkpoint
