#pragma once
#include <ostream>

namespace titan {

// Where a tensor's bytes live. Only the CPU has kernels today; every op dispatches on
// `kind` so a CUDA backend slots in beside the CPU one.
struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

}  // namespace titan
