#include "core/ggml_quant.h"

#include <cstring>

#include "core/dtype.h"
#include "core/status.h"

namespace peregrine {
namespace {

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (12 packed bytes).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q4_0(const uint8_t* b, float* y) {  // d, qs[16]
  const float d = half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}
void q4_1(const uint8_t* b, float* y) {  // d, m, qs[16]
  const float d = half(b), m = half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}
void q5_0(const uint8_t* b, float* y) {  // d, qh[4], qs[16]
  const float d = half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(((qs[j] & 0xF) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | h1) - 16) * d;
  }
}
void q5_1(const uint8_t* b, float* y) {  // d, m, qh[4], qs[16]
  const float d = half(b), m = half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>((qs[j] & 0xF) | h0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | h1) * d + m;
  }
}
void q8_0(const uint8_t* b, float* y) {  // d, qs[32]
  const float d = half(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}
void q4_k(const uint8_t* b, float* y) {  // d, dmin, scales[12], qs[128]
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}
void q5_k(const uint8_t* b, float* y) {  // d, dmin, scales[12], qh[32], qs[128]
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}
void q6_k(const uint8_t* b, float* y) {  // ql[128], qh[64], scales[16] (int8), d
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

std::string ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ8_1: return "Q8_1";
    case GgmlType::kQ2_K: return "Q2_K";
    case GgmlType::kQ3_K: return "Q3_K";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kQ8_K: return "Q8_K";
    case GgmlType::kIQ2_XXS: return "IQ2_XXS";
    case GgmlType::kIQ2_XS: return "IQ2_XS";
    case GgmlType::kIQ3_XXS: return "IQ3_XXS";
    case GgmlType::kIQ1_S: return "IQ1_S";
    case GgmlType::kIQ4_NL: return "IQ4_NL";
    case GgmlType::kIQ3_S: return "IQ3_S";
    case GgmlType::kIQ2_S: return "IQ2_S";
    case GgmlType::kIQ4_XS: return "IQ4_XS";
    case GgmlType::kI8: return "I8";
    case GgmlType::kI16: return "I16";
    case GgmlType::kI32: return "I32";
    case GgmlType::kI64: return "I64";
    case GgmlType::kF64: return "F64";
    case GgmlType::kIQ1_M: return "IQ1_M";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kTQ1_0: return "TQ1_0";
    case GgmlType::kTQ2_0: return "TQ2_0";
    case GgmlType::kMXFP4: return "MXFP4";
    case GgmlType::kNone: return "none";
  }
  return "type " + std::to_string(static_cast<uint32_t>(t));
}

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  const GgmlType t = static_cast<GgmlType>(id);
  if (t == GgmlType::kNone || ggml_type_name(t).rfind("type ", 0) == 0) return std::nullopt;
  return t;
}

std::optional<GgmlBlockInfo> ggml_block_info(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: case GgmlType::kI32: return GgmlBlockInfo{1, 4};
    case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kI16: return GgmlBlockInfo{1, 2};
    case GgmlType::kI8: return GgmlBlockInfo{1, 1};
    case GgmlType::kI64: case GgmlType::kF64: return GgmlBlockInfo{1, 8};
    case GgmlType::kQ4_0: return GgmlBlockInfo{32, 18};
    case GgmlType::kQ4_1: return GgmlBlockInfo{32, 20};
    case GgmlType::kQ5_0: return GgmlBlockInfo{32, 22};
    case GgmlType::kQ5_1: return GgmlBlockInfo{32, 24};
    case GgmlType::kQ8_0: return GgmlBlockInfo{32, 34};
    case GgmlType::kQ8_1: return GgmlBlockInfo{32, 36};
    case GgmlType::kQ2_K: return GgmlBlockInfo{256, 84};
    case GgmlType::kQ3_K: return GgmlBlockInfo{256, 110};
    case GgmlType::kQ4_K: return GgmlBlockInfo{256, 144};
    case GgmlType::kQ5_K: return GgmlBlockInfo{256, 176};
    case GgmlType::kQ6_K: return GgmlBlockInfo{256, 210};
    case GgmlType::kQ8_K: return GgmlBlockInfo{256, 292};
    case GgmlType::kIQ4_NL: return GgmlBlockInfo{32, 18};
    case GgmlType::kIQ4_XS: return GgmlBlockInfo{256, 136};
    default: return std::nullopt;
  }
}

bool ggml_is_supported_block_type(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ8_0:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const auto info = ggml_block_info(t);
  if (!info) throw Error(ErrorCode::kUnsupported, "ggml type " + ggml_type_name(t) + " has no known block layout");
  if (n < 0 || n % info->block_size != 0)
    throw Error(ErrorCode::kInvalidArgument, "a row of " + std::to_string(n) + " values is not a whole number of " +
                                                 ggml_type_name(t) + " blocks (" + std::to_string(info->block_size) +
                                                 " values each)");
  return static_cast<size_t>(n / info->block_size * info->type_size);
}

void ggml_dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::kF16: convert_to_f32(DType::kF16, src, dst, static_cast<size_t>(n)); return;
    case GgmlType::kBF16: convert_to_f32(DType::kBF16, src, dst, static_cast<size_t>(n)); return;
    default: break;
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case GgmlType::kQ4_0: block = q4_0; break;
    case GgmlType::kQ4_1: block = q4_1; break;
    case GgmlType::kQ5_0: block = q5_0; break;
    case GgmlType::kQ5_1: block = q5_1; break;
    case GgmlType::kQ8_0: block = q8_0; break;
    case GgmlType::kQ4_K: block = q4_k; break;
    case GgmlType::kQ5_K: block = q5_k; break;
    case GgmlType::kQ6_K: block = q6_k; break;
    default:
      throw Error(ErrorCode::kUnsupported, "ggml type " + ggml_type_name(t) + " cannot be dequantized (supported: F32, "
                                           "F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
  }
  const GgmlBlockInfo info = *ggml_block_info(t);
  ggml_row_bytes(t, n);  // validates n
  for (int64_t i = 0; i < n / info.block_size; ++i) block(b + i * info.type_size, dst + i * info.block_size);
}

}  // namespace peregrine
