#pragma once
// Wall time for the logs' and metrics' figures: seconds on the steady clock since a moment.
#include <chrono>

namespace titan {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace titan
