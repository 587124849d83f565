// FlashAttention-2 style prefill over the paged cache. A CTA takes 64 packed (token, head) query rows of one
// (sequence, KV head) -- so a K/V tile serves the whole GQA group -- and walks the KV tiles its rows can see
// (causal, sliding window, cached prefix), double-buffered with cp.async; each warp owns 16 rows.
// Tiles sit at absolute key positions, so a row's result does not depend on which other rows share its CTA.
// 8-bit caches stage codes and scales and convert each tile as the decode kernel does.
#include <type_traits>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace peregrine::cuda {
namespace {

using namespace attn;

// Shared memory: the Q tile, then two (K, V) tile pairs (b16 caches) or one pair plus two code staging areas
// (8-bit caches, attention_mma.cuh).
template <int D, KvQuant Q> struct PrefillCfg {
  static constexpr int kThreads = 128;
  static constexpr int kRows = 64;
  static constexpr int kKeys = D <= 128 ? 64 : 32;
  static constexpr int kStages = 2;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr bool kCodes = Q != KvQuant::kNone;
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;
  static constexpr int kStageBytes = kCodes ? CodeStage<D, kKeys>::kBytes : 2 * kTileBytes;
  static constexpr int kSmem = kQBytes + (kCodes ? 2 * kTileBytes : 0) + kStages * kStageBytes;
  __host__ __device__ static constexpr uint32_t stage(int st) { return (kCodes ? 2 * kTileBytes : 0) + st * kStageBytes; }
};

template <typename T, int D, KvQuant Q>
__global__ void __launch_bounds__(128) prefill_kernel(const AttentionLaunch p) {
  using C = PrefillCfg<D, Q>;
  using S = CodeStage<D, C::kKeys>;
  using KvT = std::conditional_t<C::kCodes, uint8_t, T>;
  constexpr int kNt = C::kKeys / 8;  // n-tiles of scores per warp
  extern __shared__ __align__(128) unsigned char smem[];
  const int s = blockIdx.y, kvh = blockIdx.z;
  // Heaviest (last) row tiles first; nothing to do for decode-path sequences and tiles past the last row.
  const PrefillRows at = prefill_rows<C::kRows, C::kKeys>(p, s, gridDim.x - 1 - blockIdx.x);
  if (!at.ok) return;
  const int group = at.group, q0 = at.q0, rows = at.rows, r0 = at.r0, first_pos = at.first_pos;
  const int i_first = at.i_first, i_last = at.i_last, window = at.window;
  const int kv_lo = at.kv_lo, kv_hi = at.kv_hi, t_lo = at.t_lo, t_hi = at.t_hi;
  // A tile is visible to every row when its keys lie in [lo of the last row, pos of the first row].
  const int pos_min = first_pos + i_first;
  const int lo_max = window > 0 ? first_pos + i_last - window + 1 : 0;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c4 = lane % 4;
  const T* q = static_cast<const T*>(p.q);
  const KvT* kc = static_cast<const KvT*>(p.k_cache);
  const KvT* vc = static_cast<const KvT*>(p.v_cache);
  // NOTE: no key tails here: a sequence with remapped keys has one query row (the decode path).
  const PagedKv kv{table_row(p, s), p.block_size, p.block_shift, static_cast<int64_t>(p.num_kv_heads) * D,
                   static_cast<int64_t>(kvh) * D};
  const uint32_t q_s = smem_addr(smem);
  const uint32_t kv_s = q_s + C::kQBytes;
  auto load_tile = [&](int st, int tile) {
    const uint32_t at = kv_s + C::stage(st);
    if constexpr (C::kCodes) {
      load_kv_codes<D, C::kKeys, C::kThreads>(at, kc, vc, p.k_scales, p.v_scales, kv, tile * C::kKeys, kv_lo, kv_hi);
    } else {
      load_kv_tile<T, D, C::kKeys, C::kThreads>(at, at + C::kTileBytes, kc, vc, kv, tile * C::kKeys, kv_lo, kv_hi);
    }
  };

  load_q_rows<T, D, C::kRows>(q_s, q, p.num_q_heads, r0, rows, q0, group, kvh, threadIdx.x, C::kThreads,
                              [](int r, int chunk) { return swizzle<D>(r, chunk * 8); });
  load_tile(0, t_lo);
  cp_async_commit();

  bool row_ok[2];
  int row_pos[2], row_lo[2];
  thread_rows(r0 + warp * 16, g, rows, group, first_pos, window, row_ok, row_pos, row_lo);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const int q_row = warp * 16 + lane % 16;  // ldmatrix row of this lane in the Q tile

  uint32_t qf[C::kQInRegs ? D / 16 : 1][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int t = t_lo, it = 0; t < t_hi; ++t, ++it) {
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (C::kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(q_s + swizzle<D>(q_row, kk * 16 + (lane / 16) * 8), qf[kk]);
      }
    }
    if (t + 1 < t_hi) load_tile((it + 1) % 2, t + 1);
    cp_async_commit();
    uint32_t k_s = kv_s + C::stage(it % 2), v_s = k_s + C::kTileBytes;
    // 8-bit caches: this tile's K and V scales (f32 per key) in the staging area.
    const float* k_scale = reinterpret_cast<const float*>(smem + C::kQBytes + C::stage(it % 2) + S::kKScales);
    const float* v_scale = reinterpret_cast<const float*>(smem + C::kQBytes + C::stage(it % 2) + S::kVScales);
    if constexpr (C::kCodes) {
      convert_kv_codes<T, Q, D, C::kKeys, C::kThreads>(k_s, kv_s, kv_s + C::kTileBytes);
      k_s = kv_s;
      v_s = kv_s + C::kTileBytes;
      __syncthreads();
    }

    float sc[kNt][4];
#pragma unroll
    for (int i = 0; i < kNt; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if constexpr (C::kQInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = qf[kk][i];
      } else {
        ldmatrix_x4(q_s + swizzle<D>(q_row, kk * 16 + (lane / 16) * 8), a);
      }
#pragma unroll
      for (int np = 0; np < kNt / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(k_s + swizzle<D>(np * 16 + (lane % 8) + (lane / 16) * 8, kk * 16 + ((lane / 8) % 2) * 8), b);
        mma16816<T>(sc[2 * np], a, b[0], b[1]);
        mma16816<T>(sc[2 * np + 1], a, b[2], b[3]);
      }
    }
    const int key0 = t * C::kKeys;
    const bool full = key0 >= lo_max && key0 + C::kKeys - 1 <= pos_min;
    float s0[2 * kNt], s1[2 * kNt];
    // Scaled scores; the mask only where some row cannot see every key of the tile (full: the CTA-uniform common
    // case takes the unmasked instantiation).
    auto scores = [&](auto masked) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float f = C::kCodes ? k_scale[nt * 8 + c4 * 2 + e] * scale_log2 : scale_log2;
          s0[nt * 2 + e] = sc[nt][e] * f;
          s1[nt * 2 + e] = sc[nt][2 + e] * f;
          if constexpr (decltype(masked)::value) {
            const int key = key0 + nt * 8 + c4 * 2 + e;
            if (!(row_ok[0] && key <= row_pos[0] && key >= row_lo[0])) s0[nt * 2 + e] = -INFINITY;
            if (!(row_ok[1] && key <= row_pos[1] && key >= row_lo[1])) s1[nt * 2 + e] = -INFINITY;
          }
        }
      }
    };
    if (full) scores(std::false_type{});
    else scores(std::true_type{});
    const float alpha0 = softmax_update(s0, m[0], l[0]);
    const float alpha1 = softmax_update(s1, m[1], l[1]);
    rescale_rows(o, alpha0, alpha1);
    if constexpr (C::kCodes) scale_probabilities<T, Q>(s0, s1, v_scale, c4);  // l takes kVFactor later
#pragma unroll
    for (int kc16 = 0; kc16 < C::kKeys / 16; ++kc16) {
      const uint32_t pa[4] = {pack2<T>(s0[4 * kc16], s0[4 * kc16 + 1]), pack2<T>(s1[4 * kc16], s1[4 * kc16 + 1]),
                              pack2<T>(s0[4 * kc16 + 2], s0[4 * kc16 + 3]),
                              pack2<T>(s1[4 * kc16 + 2], s1[4 * kc16 + 3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            v_s + swizzle<D>(kc16 * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dn * 16 + (lane / 16) * 8), b);
        mma16816<T>(o[2 * dn], pa, b[0], b[1]);
        mma16816<T>(o[2 * dn + 1], pa, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    l[i] *= kVFactor<T, Q>;  // 1 except f16 over 8-bit caches (exact: a power of two)
    if (!row_ok[i]) continue;
    const int pr = r0 + warp * 16 + g + 8 * i;
    const float inv = 1.0f / l[i];
    T* out = static_cast<T*>(p.out) +
             (static_cast<int64_t>(q0 + pr / group) * p.num_q_heads + kvh * group + pr % group) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const uint32_t packed = pack2<T>(o[dn][2 * i] * inv, o[dn][2 * i + 1] * inv);
      *reinterpret_cast<uint32_t*>(out + dn * 8 + c4 * 2) = packed;
    }
  }
}

template <typename T, int D, KvQuant Q> void launch_prefill_typed(const AttentionLaunch& p, cudaStream_t stream) {
  using C = PrefillCfg<D, Q>;
  static const bool attribute_set = [] {
    PEREGRINE_CUDA_CHECK(
        cudaFuncSetAttribute(prefill_kernel<T, D, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    return true;
  }();
  (void)attribute_set;
  const dim3 grid = prefill_grid(p, C::kRows);
  prefill_kernel<T, D, Q><<<grid, C::kThreads, C::kSmem, stream>>>(p);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

template <typename T, KvQuant Q> void launch_prefill_dim(const AttentionLaunch& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: launch_prefill_typed<T, 64, Q>(p, stream); return;
    case 128: launch_prefill_typed<T, 128, Q>(p, stream); return;
    case 256: launch_prefill_typed<T, 256, Q>(p, stream); return;
    default: throw Error(ErrorCode::kInternal, "attention prefill: unsupported head_dim");
  }
}

template <typename T> void launch_prefill_cache(const AttentionLaunch& p, cudaStream_t stream) {
  if (p.cache == DType::kF8E4M3) {
    launch_prefill_dim<T, KvQuant::kF8>(p, stream);
  } else if (p.cache == DType::kI8) {
    launch_prefill_dim<T, KvQuant::kI8>(p, stream);
  } else {
    launch_prefill_dim<T, KvQuant::kNone>(p, stream);
  }
}

}  // namespace

void launch_attention_prefill(const AttentionLaunch& p, cudaStream_t stream) {
  if (launch_attention_prefill_wgmma(p, stream)) return;  // Hopper, b16 caches, head_dim 64 / 128
  if (p.act == DType::kBF16) {
    launch_prefill_cache<bf16>(p, stream);
  } else {
    launch_prefill_cache<f16>(p, stream);
  }
}

}  // namespace peregrine::cuda
