#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace titan {

enum class DType : uint8_t { f32, f64, bf16, i32, i64 };
inline constexpr DType kF32 = DType::f32;
inline constexpr DType kF64 = DType::f64;
inline constexpr DType kBF16 = DType::bf16;
inline constexpr DType kI32 = DType::i32;
inline constexpr DType kI64 = DType::i64;

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
inline bool is_floating(DType t) { return t == kF32 || t == kF64 || t == kBF16; }

// bfloat16: the top 16 bits of an IEEE f32. Conversion rounds to nearest even and keeps NaN a NaN.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = kF32; };
template <> struct dtype_of<double> { static constexpr DType value = kF64; };
template <> struct dtype_of<bf16> { static constexpr DType value = kBF16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = kI32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = kI64; };

}  // namespace titan
