// W4A16 / W8A16 weights rewritten as GGUF blocks (see quant_lowp.h).
#include "backend/cpu/quant_lowp.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace peregrine::cpu {
namespace {

float scale_at(const ops::WeightQuant& q, int64_t n, int64_t g) {
  const int64_t i = n * q.scales.dim(1) + g;
  switch (q.scales.dtype) {
    case DType::kF32: return q.scales.as<const float>()[i];
    case DType::kBF16: return bf16_to_f32(q.scales.as<const uint16_t>()[i]);
    case DType::kF16: return f16_to_f32(q.scales.as<const uint16_t>()[i]);
    default: return NAN;
  }
}

// True when v is 0 or a normal f16 after rounding (a block's d or m keeps v to f16's 11 bits).
bool normal_half(float v) {
  if (v == 0.0f) return true;
  const float h = f16_to_f32(f32_to_f16(v));
  return std::isfinite(h) && std::fabs(h) >= 6.103515625e-05f;
}

int code_at(const uint8_t* row, DType codes, int64_t k) {
  if (codes == DType::kU8) return row[k];
  return (row[k >> 1] >> ((k & 1) * 4)) & 0xF;
}

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

GgmlType lowp_block_type(const TensorView& w, const ops::WeightQuant& q) {
  if (!q.quantized() || q.ggml_blocks() || q.act != ops::ActQuant::kNone || q.block_rows != 1 || !q.g_idx.empty() ||
      w.ndim != 2 || (w.dtype != DType::kI4 && w.dtype != DType::kU8) ||
      (!q.perm.empty() && (q.perm.dtype != DType::kI32 || q.perm.numel() != w.dim(1))))
    return GgmlType::kNone;
  const int64_t n = w.dim(0), k = w.dim(1), gs = q.group_size;
  if (n == 0 || k == 0 || k % 32 || gs <= 0 || gs % 32 || k % gs || q.scales.ndim != 2 || q.scales.dim(0) != n ||
      q.scales.dim(1) != k / gs)
    return GgmlType::kNone;
  if (!q.zeros.empty() && (q.zeros.dtype != DType::kF32 || q.zeros.numel() != n * (k / gs))) return GgmlType::kNone;
  const int64_t groups = k / gs;
  const float* zeros = q.zeros.empty() ? nullptr : q.zeros.as<const float>();
  const float midpoint = w.dtype == DType::kI4 ? 8.0f : 128.0f;
  bool all_mid = true;
  for (int64_t i = 0; zeros && i < n * groups; ++i) all_mid = all_mid && zeros[i] == midpoint;
  if (w.dtype == DType::kU8 && !all_mid) return GgmlType::kNone;  // an int8 block has no min
  const GgmlType t = all_mid ? (w.dtype == DType::kI4 ? GgmlType::kQ4_0 : GgmlType::kQ8_0) : GgmlType::kQ4_1;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scale_at(q, r, g);
      if (!normal_half(s)) return GgmlType::kNone;
      if (t == GgmlType::kQ4_1 && !normal_half(-s * zeros[r * groups + g])) return GgmlType::kNone;
    }
  return t;
}

void lowp_rows_to_ggml(GgmlType t, const TensorView& w, const ops::WeightQuant& q, int64_t r0, int64_t r1,
                       uint8_t* out) {
  const int64_t k = w.dim(1), gs = q.group_size, groups = k / gs;
  const size_t row_bytes = ggml_row_bytes(t, k);
  const size_t code_row = dtype_bytes(w.dtype, static_cast<size_t>(k));
  const float* zeros = q.zeros.empty() ? nullptr : q.zeros.as<const float>();
  const int type_size = ggml_block_info(t)->type_size;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* codes = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * code_row;
    uint8_t* dst = out + static_cast<size_t>(r - r0) * row_bytes;
    for (int64_t b = 0; b < k / 32; ++b) {
      uint8_t* blk = dst + b * type_size;
      const int64_t k0 = b * 32, g = k0 / gs;
      const float s = scale_at(q, r, g);
      put_half(blk, s);
      if (t == GgmlType::kQ8_0) {
        for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(code_at(codes, w.dtype, k0 + j) - 128));
        continue;
      }
      uint8_t* qs = blk + 2;
      if (t == GgmlType::kQ4_1) {
        put_half(blk + 2, -s * zeros[r * groups + g]);
        qs = blk + 4;
      }
      for (int j = 0; j < 16; ++j)
        qs[j] = static_cast<uint8_t>(code_at(codes, w.dtype, k0 + j) | code_at(codes, w.dtype, k0 + 16 + j) << 4);
    }
  }
}

}  // namespace peregrine::cpu
