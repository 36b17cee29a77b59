#pragma once
// Sizes computed from numbers a file gives (a count in a header, a shape, a vocabulary size) can
// overflow and wrap to a small number that then passes every check. These compute them exactly
// or say that they cannot.
#include <concepts>
#include <optional>
#include <string>

#include "titan/core/error.h"

namespace titan {

// a * b and a + b, or nothing when the result does not fit T.
template <std::integral T>
std::optional<T> product(T a, T b) {
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
template <std::integral T>
std::optional<T> sum(T a, T b) {
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b and a + b; throws naming `what` (the quantity, e.g. "safetensors x: tensor 'w' bytes")
// when the result does not fit T.
template <std::integral T>
T checked_mul(T a, T b, const std::string& what) {
  std::optional<T> r = product(a, b);
  TITAN_CHECK(r.has_value(), what, ": ", a, " * ", b, " overflows a ", sizeof(T) * 8,
              "-bit integer; the numbers it comes from are wrong (a damaged or hand-edited file?)");
  return *r;
}
template <std::integral T>
T checked_add(T a, T b, const std::string& what) {
  std::optional<T> r = sum(a, b);
  TITAN_CHECK(r.has_value(), what, ": ", a, " + ", b, " overflows a ", sizeof(T) * 8,
              "-bit integer; the numbers it comes from are wrong (a damaged or hand-edited file?)");
  return *r;
}

}  // namespace titan
