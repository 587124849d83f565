#include "backend/cpu/w8_matmul.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/act_quant.h"

namespace peregrine::ops {
namespace {

std::vector<float> f32_of(const cpu::KernelTable& k, const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  k.to_f32(t.dtype, t.data, v.data(), t.numel());
  return v;
}

// x's rows quantized to int8 per token (ops/act_quant.h), with each row's scale and the sum of its codes.
struct Int8X {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum;
};
Int8X quantize_x_int8(const float* x, int64_t m, int64_t k, ThreadPool& pool) {
  Int8X r{std::vector<int8_t>(static_cast<size_t>(m * k)), std::vector<float>(static_cast<size_t>(m)),
          std::vector<int32_t>(static_cast<size_t>(m))};
  auto quantize = [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int8_t* qr = r.q.data() + row * k;
      r.scale[static_cast<size_t>(row)] = quantize_act_int8(x + row * k, k, qr);
      int32_t s = 0;
      for (int64_t c = 0; c < k; ++c) s += qr[c];
      r.sum[static_cast<size_t>(row)] = s;
    }
  };
  if (m > 1 && m * k >= 16384) pool.parallel_for(m, quantize);
  else quantize(0, m);
  return r;
}

bool int8_fast_path(const MatmulParams& p) {
  const WeightQuant& q = p.quant;
  return q.act == ActQuant::kInt8 && p.w.dtype == DType::kI8 && q.zeros.empty() && q.perm.empty() &&
         q.g_idx.empty() && q.scales.dim(1) == 1 && (q.act_group == 0 || q.act_group == p.x.dim(1));
}

// W4A8 kernels need symmetric int4 codes, contiguous groups and per-token int8 activations.
bool w4a8_shape(const MatmulParams& p) {
  const WeightQuant& q = p.quant;
  const int64_t k = p.x.dim(1);
  return q.act == ActQuant::kInt8 && p.w.dtype == DType::kI4 && q.zeros.empty() && q.perm.empty() && q.g_idx.empty() &&
         q.block_rows == 1 && (q.act_group == 0 || q.act_group == k) && q.group_size > 0 && k % q.group_size == 0 &&
         q.scales.dim(1) == k / q.group_size;
}

// x quantized per row, laid out per block of 2 * step columns as [even, odd], and the per-lane corrections.
void w4a8_matmul(const MatmulParams& p, const cpu::W4A8Kernel& kern, const std::vector<float>& scales,
                 const std::vector<float>& bias, ThreadPool& pool) {
  const WeightQuant& q = p.quant;
  const int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0), gs = q.group_size, groups = k / gs;
  const int64_t step = kern.step, lanes = kern.lanes;
  const float* x = p.x.as<const float>();
  std::vector<int8_t> xq(static_cast<size_t>(m * k));
  std::vector<float> xs(static_cast<size_t>(m));
  std::vector<int32_t> corr(static_cast<size_t>(m * groups * lanes), 0);
  auto prepare = [&](int64_t r0, int64_t r1) {
    std::vector<int8_t> row(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      xs[static_cast<size_t>(r)] = quantize_act_int8(x + r * k, k, row.data());
      int8_t* xp = xq.data() + r * k;
      int32_t* c = corr.data() + r * groups * lanes;
      for (int64_t b0 = 0; b0 < k; b0 += 2 * step)
        for (int64_t b = 0; b < step; ++b) {
          const int8_t even = row[static_cast<size_t>(b0 + 2 * b)], odd = row[static_cast<size_t>(b0 + 2 * b + 1)];
          xp[b0 + b] = even;
          xp[b0 + step + b] = odd;
          c[(b0 / gs) * lanes + b * lanes / step] += 8 * (static_cast<int32_t>(even) + odd);
        }
    }
  };
  if (m > 1 && m * k >= 16384) pool.parallel_for(m, prepare);
  else prepare(0, m);
  cpu::W4A8MatmulArgs a;
  a.x = xq.data();
  a.x_corr = corr.data();
  a.x_scale = xs.data();
  a.codes = static_cast<const uint8_t*>(p.w.data);
  a.scales = scales.data();
  a.bias = bias.empty() ? nullptr : bias.data();
  a.out = p.out.as<float>();
  a.m = m;
  a.k = k;
  a.n = n;
  a.groups = groups;
  a.group_size = gs;
  constexpr int64_t kGrainN = 16;
  if (m == 1 || n >= pool.num_threads() * 4 * kGrainN) {
    pool.parallel_for(n, [&](int64_t n0, int64_t n1) { kern.fn(a, 0, m, n0, n1); }, kGrainN);
  } else {
    pool.parallel_for(m, [&](int64_t m0, int64_t m1) { kern.fn(a, m0, m1, 0, n); });
  }
}

}  // namespace

bool is_w8_matmul(const MatmulParams& p) {
  return p.quant.quantized() &&
         (p.w.dtype == DType::kI8 || p.w.dtype == DType::kF8E4M3 || p.quant.act != ActQuant::kNone);
}

void w8_matmul(const MatmulParams& p, const cpu::KernelTable& k, cpu::Int8MatmulFn i8, const cpu::W4A8Kernel& w4,
               ThreadPool& pool) {
  const WeightQuant& q = p.quant;
  const int64_t m = p.x.dim(0), kk = p.x.dim(1), n = p.w.dim(0);
  if (m == 0 || n == 0) return;
  const float* x = p.x.as<const float>();
  float* out = p.out.as<float>();
  const std::vector<float> scales = f32_of(k, q.scales);
  const std::vector<float> bias = p.bias.empty() ? std::vector<float>{} : f32_of(k, p.bias);
  const int threads = pool.num_threads();
  constexpr int64_t kGrainN = 16;
  if (w4a8_shape(p)) {
    for (const cpu::W4A8Kernel* kern : {&w4, &cpu::scalar_kernels().w4a8})
      if (kern->fn && q.group_size % (2 * kern->step) == 0) return w4a8_matmul(p, *kern, scales, bias, pool);
  }
  if (int8_fast_path(p)) {
    const Int8X xq = quantize_x_int8(x, m, kk, pool);
    cpu::Int8MatmulArgs a;
    a.x = xq.q.data();
    a.x_scale = xq.scale.data();
    a.x_sum = xq.sum.data();
    a.w = static_cast<const int8_t*>(p.w.data);
    a.w_scale = scales.data();
    a.block_rows = q.block_rows;
    a.bias = bias.empty() ? nullptr : bias.data();
    a.out = out;
    a.m = m;
    a.k = kk;
    a.n = n;
    if (m == 1 || n >= threads * 4 * kGrainN) {
      pool.parallel_for(n, [&](int64_t n0, int64_t n1) { i8(a, 0, m, n0, n1); }, kGrainN);
    } else {
      pool.parallel_for(m, [&](int64_t m0, int64_t m1) { i8(a, m0, m1, 0, n); });
    }
    return;
  }
  // Generic: x as the op sees it (quantized and dequantized per row and activation group), weight rows
  // dequantized to f32 (values placed at their input columns when permuted), then the dense f32 kernel.
  std::vector<float> xd(x, x + m * kk);
  if (q.act != ActQuant::kNone) {
    const int64_t gs = q.act_group > 0 ? q.act_group : kk;
    std::vector<int8_t> qi(static_cast<size_t>(gs));
    std::vector<uint8_t> qf(static_cast<size_t>(gs));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c0 = 0; c0 < kk; c0 += gs) {
        const int64_t len = std::min(gs, kk - c0);
        float* v = xd.data() + r * kk + c0;
        if (q.act == ActQuant::kInt8) {
          const float s = quantize_act_int8(v, len, qi.data());
          for (int64_t c = 0; c < len; ++c) v[c] = static_cast<float>(qi[static_cast<size_t>(c)]) * s;
        } else {
          const float s = quantize_act_fp8(v, len, qf.data());
          for (int64_t c = 0; c < len; ++c) v[c] = fp8_e4m3_to_f32(qf[static_cast<size_t>(c)]) * s;
        }
      }
  }
  const int64_t groups = q.scales.dim(1), gsz = q.group_size;
  const int32_t* g_idx = q.g_idx.empty() ? nullptr : q.g_idx.as<const int32_t>();
  const int32_t* perm = q.perm.empty() ? nullptr : q.perm.as<const int32_t>();
  const float* zeros = q.zeros.empty() ? nullptr : q.zeros.as<const float>();
  for (int64_t c = 0; c < kk; ++c) {
    if (g_idx && (g_idx[c] < 0 || g_idx[c] >= groups))
      throw Error(ErrorCode::kInvalidArgument, "matmul: quant.g_idx[" + std::to_string(c) + "] is outside [0, groups)");
    if (perm && (perm[c] < 0 || perm[c] >= kk))
      throw Error(ErrorCode::kInvalidArgument, "matmul: quant.perm[" + std::to_string(c) + "] is outside [0, K)");
  }
  float fp8_table[256];
  for (int b = 0; b < 256; ++b) fp8_table[b] = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
  const auto* codes = static_cast<const uint8_t*>(p.w.data);
  const DType c = p.w.dtype;
  // Blocks of kRows weight rows dequantized into f32 scratch, then the dense f32 kernel on them (x shared).
  constexpr int64_t kRows = 16;
  pool.parallel_for(n, [&](int64_t n0, int64_t n1) {
    std::vector<float> rows(static_cast<size_t>(kRows * kk));
    for (int64_t j0 = n0; j0 < n1; j0 += kRows) {
      const int64_t nr = std::min(kRows, n1 - j0);
      for (int64_t j = j0; j < j0 + nr; ++j) {
        float* row = rows.data() + (j - j0) * kk;
        for (int64_t col = 0; col < kk; ++col) {
          const int64_t i = j * kk + col;
          float code, zero;
          switch (c) {
            case DType::kI8: code = static_cast<float>(static_cast<int8_t>(codes[i])); zero = 0; break;
            case DType::kF8E4M3: code = fp8_table[codes[i]]; zero = 0; break;
            case DType::kU8: code = codes[i]; zero = 128; break;
            default: code = static_cast<float>((i % 2 == 0) ? (codes[i / 2] & 0xf) : (codes[i / 2] >> 4)); zero = 8; break;
          }
          const int64_t g = g_idx ? g_idx[col] : col / gsz;
          if (zeros) zero = zeros[j * groups + g];
          // With a permutation the dequantized value goes to its input column.
          row[perm ? perm[col] : col] = (code - zero) * scales[static_cast<size_t>((j / q.block_rows) * groups + g)];
        }
      }
      cpu::MatmulArgs a;
      a.x = xd.data();
      a.w = rows.data();
      a.w_dtype = DType::kF32;
      a.bias = bias.empty() ? nullptr : bias.data() + j0;
      a.out = out + j0;  // column j0 of out; a.n is out's row stride
      a.m = m;
      a.k = kk;
      a.n = n;
      k.matmul(a, 0, m, 0, nr);
    }
  }, kGrainN);
}

bool w8a8_int8_packable(const TensorView& w, const WeightQuant& q) {
  if (w.ndim != 2 || w.dtype != DType::kI8 || q.act != ActQuant::kInt8 || !q.zeros.empty() || !q.perm.empty() ||
      !q.g_idx.empty() || q.scales.ndim != 2 || q.scales.dim(1) != 1 || q.block_rows < 1)
    return false;
  const int64_t k = w.dim(1);
  return k > 0 && k % 4 == 0 && (q.act_group == 0 || q.act_group == k) &&
         q.scales.dim(0) == (w.dim(0) + q.block_rows - 1) / q.block_rows;
}

DeviceBuffer pack_w8a8_int8(Backend& backend, const TensorView& w, const WeightQuant& q, ThreadPool& pool) {
  if (!w8a8_int8_packable(w, q)) return {};
  const int64_t n = w.dim(0), k = w.dim(1), groups = (n + cpu::kI8PackRows - 1) / cpu::kI8PackRows;
  DeviceBuffer buf(backend, cpu::kI8PackHeaderBytes + static_cast<size_t>(groups * cpu::kI8PackRows * k));
  auto* base = static_cast<uint8_t*>(buf.data());
  std::memset(base, 0, cpu::kI8PackHeaderBytes);
  std::memcpy(base, &cpu::kI8PackMagic, sizeof cpu::kI8PackMagic);
  pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
    cpu::i8_pack_groups(static_cast<const int8_t*>(w.data), n, k, base + cpu::kI8PackHeaderBytes, g0, g1);
  });
  return buf;
}

bool is_w8a8_int8_packed(const MatmulParams& p) {
  if (!p.quant.packed) return false;
  uint32_t magic = 0;
  std::memcpy(&magic, p.quant.packed, sizeof magic);
  return magic == cpu::kI8PackMagic;
}

void w8a8_packed_matmul(const MatmulParams& p, const cpu::KernelTable& k, cpu::Int8PackedFn fn, ThreadPool& pool) {
  const WeightQuant& q = p.quant;
  const int64_t m = p.x.dim(0), kk = p.x.dim(1), n = p.w.dim(0);
  if (!fn || !w8a8_int8_packable(TensorView(static_cast<const void*>(nullptr), DType::kI8, {n, kk}), q))
    throw Error(ErrorCode::kInvalidArgument, "matmul: quant.packed is an int8 W8A8 packed copy this backend cannot read");
  if (m == 0 || n == 0) return;
  const std::vector<float> scales = f32_of(k, q.scales);
  const std::vector<float> bias = p.bias.empty() ? std::vector<float>{} : f32_of(k, p.bias);
  const Int8X xq = quantize_x_int8(p.x.as<const float>(), m, kk, pool);
  cpu::Int8MatmulArgs a;
  a.x = xq.q.data();
  a.x_scale = xq.scale.data();
  a.x_sum = xq.sum.data();
  a.w = reinterpret_cast<const int8_t*>(static_cast<const uint8_t*>(q.packed) + cpu::kI8PackHeaderBytes);
  a.w_scale = scales.data();
  a.block_rows = q.block_rows;
  a.bias = bias.empty() ? nullptr : bias.data();
  a.out = p.out.as<float>();
  a.m = m;
  a.k = kk;
  a.n = n;
  const int64_t groups = (n + cpu::kI8PackRows - 1) / cpu::kI8PackRows;
  const int threads = pool.num_threads();
  if (m == 1) {  // chunks of 4 groups (the kernel's four streams) taken as the threads come free
    pool.dynamic_for(groups, 4, [&](int64_t g0, int64_t g1) { fn(a, 0, 1, g0, g1); });
  } else if (groups >= threads * 4) {
    pool.parallel_for(groups, [&](int64_t g0, int64_t g1) { fn(a, 0, m, g0, g1); });
  } else {
    pool.parallel_for(m, [&](int64_t m0, int64_t m1) { fn(a, m0, m1, 0, groups); });
  }
}

}  // namespace peregrine::ops

namespace peregrine::cpu {

void i8_pack_groups(const int8_t* w, int64_t n, int64_t k, uint8_t* out, int64_t g0, int64_t g1) {
  const int64_t chunks = k / 4;
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* o = out + g * kI8PackRows * k;
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t r = 0; r < kI8PackRows; ++r) {
        const int64_t row = g * kI8PackRows + r;
        for (int64_t i = 0; i < 4; ++i)
          o[c * 64 + r * 4 + i] = row < n ? static_cast<uint8_t>(static_cast<uint8_t>(w[row * k + 4 * c + i]) ^ 0x80u)
                                           : uint8_t{0x80};
      }
  }
}

}  // namespace peregrine::cpu
