// RMSNorm kernel: each row is handled by `tpr` threads (a warp up to a whole block); two passes over the
// row (the second hits L1/L2), the residual sum rounded to the activation dtype before the statistics. The sums of
// squares go through norm_sum.cuh, which the 8-bit skinny kernel's norm fusion shares.
#include <type_traits>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ggml_xq.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kThreads = kNormThreads;

// A thread's row of a launch of tpr threads a row: its index, its lane, whether it exists, and its pointers.
template <typename T, typename TW> struct NormRow {
  int64_t row;
  int lane;
  bool active;
  const T* x;
  T* res;
  T* out;
  const TW* w;
  __device__ __forceinline__ NormRow(const RmsNormLaunch& p, int tpr)
      : row(static_cast<int64_t>(blockIdx.x) * (kThreads / tpr) + threadIdx.x / tpr),
        lane(static_cast<int>(threadIdx.x) % tpr),
        active(row < p.rows),
        x(static_cast<const T*>(p.x) + row * p.hidden),
        res(p.residual ? static_cast<T*>(p.residual) + row * p.hidden : nullptr),
        out(static_cast<T*>(p.out) + row * p.hidden),
        w(static_cast<const TW*>(p.weight)) {}
};

template <typename T, typename TW>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(RmsNormLaunch p, int tpr, bool vec) {
  pdl_wait();
  pdl_trigger();
  const NormRow<T, TW> nr(p, tpr);
  const int64_t h = p.hidden;

  float ss = 0.f;
  if (nr.active) {
    if (vec) {
      for (int64_t i = nr.lane * 8; i < h; i += tpr * 8) {
        float v[8];
        load8(nr.x + i, v);
        if (nr.res) {
          float r[8];
          load8(nr.res + i, r);
#pragma unroll
          for (int e = 0; e < 8; ++e) v[e] = to_f32(from_f32<T>(v[e] + r[e]));
          store8(nr.res + i, v);
        }
        ss = add_squares8(v, ss);
      }
    } else {
      for (int64_t i = nr.lane; i < h; i += tpr) {
        float v = to_f32(nr.x[i]);
        if (nr.res) {
          T sum = from_f32<T>(v + to_f32(nr.res[i]));
          nr.res[i] = sum;
          v = to_f32(sum);
        }
        ss = __fmaf_rn(v, v, ss);
      }
    }
  }
  ss = row_sum(ss, tpr);
  if (!nr.active) return;
  const float inv = rms_inv(ss, h, p.eps);
  const T* src = nr.res ? nr.res : nr.x;
  if (vec) {
    for (int64_t i = nr.lane * 8; i < h; i += tpr * 8) {
      float v[8], wv[8];
      load8(src + i, v);
      load8(nr.w + i, wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = v[e] * inv * wv[e];
      store8(nr.out + i, v);
    }
  } else {
    for (int64_t i = nr.lane; i < h; i += tpr) nr.out[i] = from_f32<T>(to_f32(src[i]) * inv * to_f32(nr.w[i]));
  }
}

// The same arithmetic as rms_norm_kernel's vector path (each lane's sum of squares over its 8-element pieces in
// order, the xor butterfly, then the warps' partials in order: bitwise the same results), with a lane's C pieces of
// x, residual and weight all loaded before anything is stored, so a row costs one round trip to memory instead of
// one per piece and pass (out may alias x, which forces the compiler to keep the generic kernel's order).
template <typename T, typename TW, int C>
__global__ void __launch_bounds__(kThreads) rms_norm_regs_kernel(RmsNormLaunch p, int tpr) {
  pdl_wait();
  pdl_trigger();
  const NormRow<T, TW> nr(p, tpr);
  const int64_t h = p.hidden;
  float v[C][8], wv[C][8];
  float ss = 0.f;
  if (nr.active) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
      if (i < h) {
        load8(nr.x + i, v[c]);
        load8(nr.w + i, wv[c]);
        if (nr.res) {
          float r[8];
          load8(nr.res + i, r);
#pragma unroll
          for (int e = 0; e < 8; ++e) v[c][e] = to_f32(from_f32<T>(v[c][e] + r[e]));
        }
      }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
      if (i < h) {
        if (nr.res) store8(nr.res + i, v[c]);
        ss = add_squares8(v[c], ss);
      }
    }
  }
  ss = row_sum(ss, tpr);
  if (!nr.active) return;
  const float inv = rms_inv(ss, h, p.eps);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
    if (i < h) {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] = v[c][e] * inv * wv[c][e];
      store8(nr.out + i, v[c]);
    }
  }
}

// 8 norm weights as loaded (16-bit: one 16-byte piece; f32: two).
template <typename TW> struct Weights8 {
  uint4 raw[sizeof(TW) / 2];
  __device__ __forceinline__ void load(const TW* p) {
#pragma unroll
    for (int r = 0; r < static_cast<int>(sizeof(TW)) / 2; ++r) raw[r] = reinterpret_cast<const uint4*>(p)[r];
  }
  __device__ __forceinline__ float operator[](int e) const { return to_f32(reinterpret_cast<const TW*>(raw)[e]); }
};

// rms_norm_regs_kernel's arithmetic (the same bits) with the rounded outputs also quantized per row for a W8A8
// matmul (launch fields xq, xs, act_quant; act_quant.cuh's arithmetic, the amax over the row by row_max: fmaxf is
// order-free): the quantizer's bits on that kernel's output; out itself is not written. x, the residual sum
// and the outputs stay packed in x's dtype (each is a T value anyway) and the weights as loaded, so a thread holds
// half the registers of the float copies and more blocks share an SM through the reductions and the codes' divisions.
// Inactive rows' lanes stay to the end (row_max may synchronize the block).
// kGgml: the packed GGUF kernels' int8 blocks instead (ggml_xq.cuh; a row's lanes are whole warps, tpr >= 32, and a
// block's four pieces sit on four neighbouring lanes: hidden % 128 == 0).
template <typename T, typename TW, int C, bool kGgml>
__global__ void __launch_bounds__(kThreads) rms_norm_quant_kernel(RmsNormLaunch p, int tpr) {
  pdl_wait();
  pdl_trigger();
  const NormRow<T, TW> nr(p, tpr);
  const int64_t h = p.hidden;
  uint4 xv[C], rv[C];
  Weights8<TW> wv[C];
  if (nr.active) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
      if (i < h) {
        xv[c] = *reinterpret_cast<const uint4*>(nr.x + i);
        wv[c].load(nr.w + i);
        if (nr.res) rv[c] = *reinterpret_cast<const uint4*>(nr.res + i);
      }
    }
  }
  float ss = 0.f;
  if (nr.active) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
      if (i < h) {
        T* xe = reinterpret_cast<T*>(&xv[c]);
        if (nr.res) {
          const T* re = reinterpret_cast<const T*>(&rv[c]);
#pragma unroll
          for (int e = 0; e < 8; ++e) xe[e] = from_f32<T>(to_f32(xe[e]) + to_f32(re[e]));
          *reinterpret_cast<uint4*>(nr.res + i) = xv[c];
        }
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = to_f32(xe[e]);
        ss = add_squares8(v, ss);
      }
    }
  }
  ss = row_sum(ss, tpr);
  const float inv = rms_inv(ss, h, p.eps);
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
    if (nr.active && i < h) {
      T* xe = reinterpret_cast<T*>(&xv[c]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        xe[e] = from_f32<T>(to_f32(xe[e]) * inv * wv[c][e]);
        amax = fmaxf(amax, fabsf(to_f32(xe[e])));
      }
    }
  }
  if constexpr (kGgml) {
    if (!nr.active) return;  // whole warps (tpr >= 32)
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
      const T* xe = reinterpret_cast<const T*>(&xv[c]);
      float f[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = i < h ? to_f32(xe[e]) : 0.0f;
      ggml_xq_piece8(f, i < h, nr.row, h, i, p.ggml);
    }
    return;
  }
  amax = row_max(amax, tpr);
  if (!nr.active) return;
  const ActQuantizer qz(p.act_quant, amax);
  uint2* q = reinterpret_cast<uint2*>(p.xq + nr.row * h);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = (nr.lane + static_cast<int64_t>(c) * tpr) * 8;
    if (i < h) {
      const T* xe = reinterpret_cast<const T*>(&xv[c]);
      float f[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = to_f32(xe[e]);
      q[i / 8] = qz.codes8(f);
    }
  }
  if (nr.lane == 0) p.xs[nr.row] = qz.scale();
}

bool vector_rows(const RmsNormLaunch& p) {
  return p.hidden % 8 == 0 && aligned16(p.x) && aligned16(p.out) && aligned16(p.weight) &&
         (p.residual == nullptr || aligned16(p.residual));
}

}  // namespace

bool rms_norm_quant_takes(const RmsNormLaunch& p) {
  if ((p.act != DType::kBF16 && p.act != DType::kF16) || !vector_rows(p)) return false;
  const int64_t units = p.hidden / 8;
  return ceil_div(units, rms_norm_lanes(units)) <= 8;
}

bool rms_norm_ggml_takes(const RmsNormLaunch& p) { return p.hidden % 128 == 0 && rms_norm_quant_takes(p); }

void launch_rms_norm(const RmsNormLaunch& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  bool vec = vector_rows(p);
  int64_t per_thread_units = vec ? p.hidden / 8 : p.hidden;
  const int tpr = rms_norm_lanes(per_thread_units);
  int rows_per_block = kThreads / tpr;
  unsigned blocks = static_cast<unsigned>(ceil_div(p.rows, rows_per_block));
  const int64_t pieces = vec ? ceil_div(per_thread_units, tpr) : 0;  // 8-element pieces per lane
  const bool quant = p.act_quant != 0, ggml = p.act_quant == kActQuantGgml;
  PEREGRINE_CHECK(!quant || (ggml ? rms_norm_ggml_takes(p) && p.ggml.q && p.ggml.d && p.ggml.sum && p.ggml.sum16 &&
                                        (reinterpret_cast<uintptr_t>(p.ggml.q) & 3u) == 0
                                  : rms_norm_quant_takes(p) && (p.act_quant == 1 || p.act_quant == 2) && p.xq && p.xs &&
                                        (reinterpret_cast<uintptr_t>(p.xq) & 7u) == 0),
                  "rms_norm: a quantizing launch the kernel does not take");
  dispatch_float(p.act, [&](auto at) {
    using T = typename decltype(at)::type;
    dispatch_float(p.weight_dtype, [&](auto wt) {
      using TW = typename decltype(wt)::type;
      if (quant) {
        if constexpr (sizeof(T) == 2) {
          auto go = [&](auto g) {
            constexpr bool kG = decltype(g)::value;
            auto* kernel = pieces <= 2   ? rms_norm_quant_kernel<T, TW, 2, kG>
                           : pieces <= 4 ? rms_norm_quant_kernel<T, TW, 4, kG>
                                         : rms_norm_quant_kernel<T, TW, 8, kG>;
            launch_pdl(kernel, blocks, kThreads, 0, stream, p.rows, p, tpr);
          };
          if (ggml) go(std::true_type{});
          else go(std::false_type{});
        }
      } else if (pieces >= 1 && pieces <= 2) {
        launch_pdl(rms_norm_regs_kernel<T, TW, 2>, blocks, kThreads, 0, stream, p.rows, p, tpr);
      } else if (pieces >= 3 && pieces <= 4) {
        launch_pdl(rms_norm_regs_kernel<T, TW, 4>, blocks, kThreads, 0, stream, p.rows, p, tpr);
      } else if (pieces >= 5 && pieces <= 8) {
        launch_pdl(rms_norm_regs_kernel<T, TW, 8>, blocks, kThreads, 0, stream, p.rows, p, tpr);
      } else {
        launch_pdl(rms_norm_kernel<T, TW>, blocks, kThreads, 0, stream, p.rows, p, tpr, vec);
      }
    });
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
