#pragma once
#include <ostream>

namespace titan {

// Where a tensor's bytes live. The CPU has kernels; a tensor on a PJRT device (graph mode,
// graph/lazy.h) holds no bytes at all but a value of the program being captured, and the ops
// that have a lowering record themselves into that program instead of computing.
struct Device {
  enum class Kind : uint8_t { cpu, cuda, pjrt };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  static Device pjrt(int index = 0) { return {Kind::pjrt, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool is_pjrt() const { return kind == Kind::pjrt; }
  bool operator==(const Device&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  if (d.is_cpu()) return os << "cpu";
  return os << (d.is_cuda() ? "cuda:" : "pjrt:") << d.index;
}

}  // namespace titan
