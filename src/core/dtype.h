// Element types and their conversions: f32, bf16, f16 (IEEE half), fp8 e4m3, int8, packed int4.
// Conversions here are scalar and portable (host code); SIMD paths live in the backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace peregrine {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kI8, kI4, kI32, kI64, kU8 };

std::string_view dtype_name(DType t);
// Parses safetensors names ("F32", "BF16", ...) and torch names ("float32", "bfloat16", ...).
std::optional<DType> parse_dtype(std::string_view name);

// Bits per element (int4 packs two per byte).
constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 32;
    case DType::kBF16: case DType::kF16: return 16;
    case DType::kF8E4M3: case DType::kI8: case DType::kU8: return 8;
    case DType::kI4: return 4;
    case DType::kI64: return 64;
  }
  return 0;
}
constexpr size_t dtype_bytes(DType t, size_t count) { return (count * dtype_bits(t) + 7) / 8; }

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Round to nearest even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// float8 e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities; S.1111.111 is NaN).
float fp8_e4m3_to_f32(uint8_t v);
// f32 -> e4m3fn, round to nearest even, saturating at +-448 (NaN -> 0x7f).
uint8_t f32_to_fp8_e4m3(float f);

// Converts count elements of src (dtype t) into f32.
void convert_to_f32(DType t, const void* src, float* dst, size_t count);
// Converts count f32 values into dtype t (f32, bf16 or f16).
void convert_from_f32(DType t, const float* src, void* dst, size_t count);

}  // namespace peregrine
