// Names, parsing and scalar conversions for DType.
#include "core/dtype.h"

#include <cmath>
#include <limits>

#include "core/status.h"

namespace peregrine {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kI8: return "int8";
    case DType::kI4: return "int4";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "F32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "BF16" || n == "bfloat16") return DType::kBF16;
  if (n == "F16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "F8_E4M3" || n == "float8_e4m3fn") return DType::kF8E4M3;
  if (n == "I8" || n == "int8") return DType::kI8;
  if (n == "I32" || n == "int32") return DType::kI32;
  if (n == "I64" || n == "int64") return DType::kI64;
  if (n == "U8" || n == "uint8") return DType::kU8;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t absbits = bits & 0x7fffffffu;
  if (absbits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absbits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (absbits < 0x38800000u) {  // subnormal or zero in half
    float a;
    std::memcpy(&a, &absbits, 4);
    // 2^-24 is the half subnormal step; rint rounds to nearest even.
    uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((absbits >> 23) - 127 + 15) << 10;
  uint32_t mant = absbits & 0x7fffffu;
  uint32_t half = exp | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

void convert_to_f32(DType t, const void* src, float* dst, size_t count) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, count * 4); return;
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      throw Error(ErrorCode::kUnsupported, "cannot convert " + std::string(dtype_name(t)) + " to float32");
  }
}

void convert_from_f32(DType t, const float* src, void* dst, size_t count) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, count * 4); return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      throw Error(ErrorCode::kUnsupported, "cannot convert float32 to " + std::string(dtype_name(t)));
  }
}

float fp8_e4m3_to_f32(uint8_t v) {
  const int e = (v >> 3) & 0xf, m = v & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m) / 8.0f, -6) : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (v & 0x80) ? -mag : mag;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  uint8_t code;
  if (a < 0.015625f) {  // below the smallest normal 2^-6: subnormal steps of 2^-9 (8 rounds up to the normal 0x08)
    code = static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  } else {
    int e = 0;
    const float r = std::frexp(a, &e);  // a = r * 2^e, r in [0.5, 1)
    int m = static_cast<int>(std::nearbyint((r * 2.0f - 1.0f) * 8.0f));
    int exp = e - 1 + 7;
    if (m == 8) {
      m = 0;
      ++exp;
    }
    if (exp > 15 || (exp == 15 && m == 7)) return sign | 0x7e;
    code = static_cast<uint8_t>((exp << 3) | m);
  }
  return sign | code;
}

}  // namespace peregrine
