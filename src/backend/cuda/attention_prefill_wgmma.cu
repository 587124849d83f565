// Prefill attention on Hopper's warpgroup MMA (sm_90a), bf16/f16 caches, head_dim 64 and 128. A CTA of two
// warpgroups takes 128 packed (token, head) query rows of one (sequence, KV head), 64 a warpgroup, and walks the
// 128-key K/V tiles its rows can see (causal, sliding window, cached prefix), three stages deep with cp.async into
// 128-byte-swizzled tiles. Per tile a warpgroup computes S = Q K^T with both operands in shared memory, runs the
// online softmax on S in registers (the m16n8 fragment layout the mma.sync kernel uses), and accumulates O += P V
// with P in registers and V read MN-major from shared memory. The two warpgroups of an SM interleave one's softmax
// with the other's multiplies. Tiles sit at absolute key positions, so a row's result depends only on its own
// sequence and position, never on the rows beside it.
// 8-bit caches (int8 / fp8 e4m3) pass each tile's codes through a staging area, turned into exact T values before the
// multiplies, their per-key scales applied to the scores (K) and the probabilities (V). Other head dims and
// pre-Hopper GPUs take attention_prefill.cu's FlashAttention-2 kernel.
// Measured and removed (2026-12-06, docs/BENCHMARKS.md): tile copies by the tensor memory accelerator (block-sized
// boxes), with and without a warp-specialised producer and ping-pong consumers; a warp-specialised form with a
// cp.async producer warpgroup and ping-pong consumers; the next tile's copies issued before the wait for S; the
// block-table entries read once a warp and shuffled to the copies — none faster than this kernel.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace peregrine::cuda {
namespace {

using namespace attn;

// Shared memory: Q, then kStages (K, V) tile pairs of T. 8-bit caches: two pairs, each followed by its keys' K and V
// scales (f32), and one staging area of codes and scales (attention_mma.cuh's CodeStage) that each tile passes through.
template <int D, KvQuant Q> struct WgPrefillCfg {
  static constexpr bool kCodes = Q != KvQuant::kNone;
  static constexpr int kThreads = 256;  // two warpgroups
  static constexpr int kRows = 128;     // 64 per warpgroup
  static constexpr int kKeys = 128;
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;
  static constexpr int kScaleBytes = kCodes ? 2 * kKeys * 4 : 0;
  static constexpr int kStageBytes = 2 * kTileBytes + kScaleBytes;  // K, V (, K scales, V scales): 1024-byte multiple
  static constexpr int kStages = kCodes ? 2 : 3;
  static constexpr int kStagingBytes = kCodes ? CodeStage<D, kKeys>::kBytes : 0;
  // + alignment slack for the 1024-byte atoms
  static constexpr int kSmem = 1024 + kQBytes + kStages * kStageBytes + kStagingBytes;
};

#ifdef PEREGRINE_WGMMA
// ---- pieces of the kernel (a thread's rows are g and g + 8 of its warp's 16; fragments as in attention_mma.cuh)

// Scores of keys a row cannot see (causal, window, missing row) become -inf.
template <int kNt>
__device__ __forceinline__ void mask_scores(float (&sc)[kNt][4], int key0, int c4, const bool (&ok)[2],
                                            const int (&pos)[2], const int (&lo)[2]) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + nt * 8 + c4 * 2 + e;
      if (!(ok[0] && key <= pos[0] && key >= lo[0])) sc[nt][e] = -INFINITY;
      if (!(ok[1] && key <= pos[1] && key >= lo[1])) sc[nt][2 + e] = -INFINITY;
    }
  }
}

// Online softmax of a tile in log2 units: the scores (scaled inside the exponent's FMA) become probabilities, m and l
// move on, alpha rescales the old accumulators. Row maxima and sums as trees over a row's 32 values (short dependency
// chains: a warpgroup has one warp a scheduler to hide latency with).
template <int kNt>
__device__ __forceinline__ void online_softmax(float (&sc)[kNt][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx4[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) mx4[j] = fmaxf(sc[j][2 * i], sc[j][2 * i + 1]);
#pragma unroll
    for (int nt = 4; nt < kNt; ++nt) mx4[nt % 4] = fmaxf(mx4[nt % 4], fmaxf(sc[nt][2 * i], sc[nt][2 * i + 1]));
    float mx = fmaxf(fmaxf(mx4[0], mx4[1]), fmaxf(mx4[2], mx4[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[i], mx * scale_log2);
    const float base = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: o and l stay 0
    alpha[i] = fast_exp2(m[i] - base);
    float sum4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      sc[nt][2 * i] = fast_exp2(fmaf(sc[nt][2 * i], scale_log2, -base));
      sc[nt][2 * i + 1] = fast_exp2(fmaf(sc[nt][2 * i + 1], scale_log2, -base));
      sum4[nt % 4] += sc[nt][2 * i] + sc[nt][2 * i + 1];
    }
    l[i] = l[i] * alpha[i] + ((sum4[0] + sum4[1]) + (sum4[2] + sum4[3]));
    m[i] = m_new;
  }
}

// Probabilities -> the m16n8k16 A fragments of the PV multiply (16 keys each).
template <typename T, int kNt>
__device__ __forceinline__ void pack_probs(const float (&sc)[kNt][4], uint32_t (&pa)[kNt / 2][4]) {
#pragma unroll
  for (int kc16 = 0; kc16 < kNt / 2; ++kc16) {
    pa[kc16][0] = pack2<T>(sc[2 * kc16][0], sc[2 * kc16][1]);
    pa[kc16][1] = pack2<T>(sc[2 * kc16][2], sc[2 * kc16][3]);
    pa[kc16][2] = pack2<T>(sc[2 * kc16 + 1][0], sc[2 * kc16 + 1][1]);
    pa[kc16][3] = pack2<T>(sc[2 * kc16 + 1][2], sc[2 * kc16 + 1][3]);
  }
}

// A warpgroup's 64 rows from packed row wg_r0: a tile is visible to every one of them when its keys lie in
// [lo_max, pos_min] (the window start of its last row, the position of its first).
__device__ __forceinline__ void warpgroup_bounds(int wg_r0, int rows, int group, int first_pos, int window,
                                                 int& pos_min, int& lo_max) {
  const int wg_first = min(wg_r0, rows - 1) / group, wg_last = min(rows - 1, wg_r0 + 63) / group;
  pos_min = first_pos + wg_first;
  lo_max = window > 0 ? first_pos + wg_last - window + 1 : 0;
}

// S = Q K^T of a warpgroup's 64 rows (q_desc: their K-major tile) against the kKeys-key K tile at k_s, issued and
// committed as one group, not waited for. Descriptors advance by their start address (>> 4; a shared address below
// 256 KiB never carries out of the field).
template <typename T, int D, int kRows, int kKeys>
__device__ __forceinline__ void issue_scores(float (&sc)[kKeys / 8][4], uint64_t q_desc, uint32_t k_s) {
  const uint64_t k_desc = wg::desc128(k_s, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = q_desc + (((kk / 4) * kRows * 128 + (kk % 4) * 32) >> 4);
    const uint64_t db = k_desc + (((kk / 4) * kKeys * 128 + (kk % 4) * 32) >> 4);
    wg::Mma<T, kKeys>::ss(sc, da, db, kk > 0 ? 1 : 0);
  }
  wg::commit();
}

// O += P V over the kKeys-key V tile at v_at (read MN-major), P the packed probabilities, committed as one group.
// Never behind a branch: ptxas commits a group that may be empty with an extra (empty) multiply after the branch,
// which is one more group for the waits to count (a wait<1> for S would then wait for this PV too).
template <typename T, int D, int kKeys>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&pa)[kKeys / 16][4], uint32_t v_at) {
  const uint64_t v_desc = wg::desc128(v_at, kKeys * 128, 1024);
#pragma unroll
  for (int kc16 = 0; kc16 < kKeys / 16; ++kc16) wg::Mma<T, D>::rs_mn(o, pa[kc16], v_desc + ((kc16 * 16 * 128) >> 4));
  wg::commit();
}

// The last tile's PV, waited for.
template <typename T, int D, int kKeys>
__device__ __forceinline__ void last_pv(float (&o)[D / 8][4], const uint32_t (&pa)[kKeys / 16][4], uint32_t v_at) {
  wg::fence_operands(o);
  wg::fence();
  issue_pv<T, D, kKeys>(o, pa, v_at);
  wg::wait<0>();
  wg::fence_operands(o);
}

// O / l of the thread's existing rows into out (l reduced over the quad first, times `factor`).
template <typename T, int D>
__device__ __forceinline__ void store_rows(const AttentionLaunch& p, const float (&o)[D / 8][4], float (&l)[2],
                                           float factor, const bool (&ok)[2], int pr0, int g, int c4, int q0,
                                           int group, int kvh) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    l[i] *= factor;
    if (!ok[i]) continue;
    const int pr = pr0 + g + 8 * i;
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
#endif  // PEREGRINE_WGMMA

// kPow2: block sizes that are powers of two up to kKeys (b16 caches; the copies' addresses get cheaper).
template <typename T, int D, KvQuant Q, bool kPow2>
__global__ void __launch_bounds__(256, 1) prefill_wgmma_kernel(const AttentionLaunch p) {
#ifdef PEREGRINE_WGMMA
  using C = WgPrefillCfg<D, Q>;
  using S = CodeStage<D, C::kKeys>;
  using KvT = std::conditional_t<C::kCodes, uint8_t, T>;
  constexpr int kNt = C::kKeys / 8;  // score fragments (8 keys each) per thread row pair
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const int s = blockIdx.y, kvh = blockIdx.z;
  // Heaviest (last) row tiles first; nothing to do for decode-path sequences and tiles past the last row.
  const PrefillRows at = prefill_rows<C::kRows, C::kKeys>(p, s, gridDim.x - 1 - blockIdx.x);
  if (!at.ok) return;
  const int group = at.group, q0 = at.q0, rows = at.rows, r0 = at.r0, first_pos = at.first_pos, window = at.window;
  const int kv_lo = at.kv_lo, kv_hi = at.kv_hi, t_lo = at.t_lo, t_hi = at.t_hi;

  const int wgi = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, c4 = lane % 4;
  // This warpgroup's rows: a tile is visible to all of them when its keys lie in [lo of the last, pos of the first].
  const int wg_r0 = r0 + wgi * 64;
  int pos_min, lo_max;
  warpgroup_bounds(wg_r0, rows, group, first_pos, window, pos_min, lo_max);

  const KvT* kc = static_cast<const KvT*>(p.k_cache);
  const KvT* vc = static_cast<const KvT*>(p.v_cache);
  const PagedKv kv{table_row(p, s), p.block_size, p.block_shift, static_cast<int64_t>(p.num_kv_heads) * D,
                   static_cast<int64_t>(kvh) * D};
  const uint32_t q_s = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t kv_s = q_s + C::kQBytes;
  const uint32_t staging = kv_s + C::kStages * C::kStageBytes;  // 8-bit caches
  // K/V tile loads (b16 caches): a thread copies chunk `ch` of kPasses rows of a tile (row i * kRowsPerPass + kr).
  // The rows' block-table entries are read a tile ahead (branch-free: the key clamped into [kv_lo, kv_hi)) and used
  // only by the next tile's copies, so neither waits on the other; keys outside [kv_lo, kv_hi) and holes (-1) are
  // zero-filled. kPow2 (block sizes 2^k <= kKeys, which divide a tile): a row's place in its block is the same in
  // every tile, so a copy's source is its block's start plus a fixed offset.
  constexpr int kRowsPerPass = C::kThreads / (D / 8), kPasses = C::kKeys / kRowsPerPass;
  const int kr = threadIdx.x / (D / 8), ch = threadIdx.x % (D / 8);
  int32_t blk[kPasses];
  auto block_of = [&](int key) {
    if constexpr (kPow2) return key >> kv.block_shift;
    else return kv.block_shift >= 0 ? key >> kv.block_shift : key / kv.block_size;
  };
  auto lookup = [&](int t) {
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int key = min(max(t * C::kKeys + i * kRowsPerPass + kr, kv_lo), kv_hi - 1);
      blk[i] = __ldg(kv.table + block_of(key));
    }
  };
  const KvT* k_row = kc + kv.head_offset + ch * 8;  // chunk ch of this KV head in slot 0
  const KvT* v_row = vc + kv.head_offset + ch * 8;
  const int row_stride = static_cast<int>(kv.row_stride);
  const int block_stride = kv.block_size * row_stride;  // elements a block (< 2^31: at most 128 x heads x D)
  auto load_tile = [&](int t, int st) {
    const uint32_t k_at = kv_s + st * C::kStageBytes, v_at = k_at + C::kTileBytes;
#pragma unroll
    for (int i = 0; i < kPasses && !C::kCodes; ++i) {
      const int key = t * C::kKeys + i * kRowsPerPass + kr;
      const int32_t b = blk[i];
      const bool valid = key >= kv_lo && key < kv_hi && b >= 0;
      const uint32_t dst = wg::sw128(i * kRowsPerPass + kr, ch, C::kKeys);
      int64_t offset;
      if constexpr (kPow2) {
        offset = static_cast<int64_t>(b) * block_stride + ((i * kRowsPerPass + kr) & (kv.block_size - 1)) * row_stride;
      } else {
        const int in_block = key - block_of(key) * kv.block_size;
        offset = (static_cast<int64_t>(b) * kv.block_size + in_block) * kv.row_stride;
      }
      if (!valid) offset = 0;
      cp_async16(k_at + dst, k_row + offset, valid);
      cp_async16(v_at + dst, v_row + offset, valid);
    }
  };

  load_q_rows<T, D, C::kRows>(q_s, static_cast<const T*>(p.q), p.num_q_heads, r0, rows, q0, group, kvh, threadIdx.x,
                              C::kThreads, [](int r, int chunk) { return wg::sw128(r, chunk, C::kRows); });
  // 8-bit caches: a tile's codes and scales land in the staging area, and every thread then turns its share into
  // the stage's T tiles (exact values) and copies the scales beside them.
  auto load_codes = [&](int t) {
    if constexpr (C::kCodes)
      load_kv_codes<D, C::kKeys, C::kThreads>(staging, kc, vc, p.k_scales, p.v_scales, kv, t * C::kKeys, kv_lo, kv_hi);
  };
  auto convert = [&](int st) {
    if constexpr (!C::kCodes) return;
    const uint32_t k_at = kv_s + st * C::kStageBytes;
    convert_kv_codes<T, Q, D, C::kKeys, C::kThreads, true>(staging, k_at, k_at + C::kTileBytes);
    float* scales = reinterpret_cast<float*>(smem_raw + (k_at - smem_addr(smem_raw)) + 2 * C::kTileBytes);
    const float* staged = reinterpret_cast<const float*>(smem_raw + (staging - smem_addr(smem_raw)) + S::kKScales);
    for (int i = threadIdx.x; i < 2 * C::kKeys; i += C::kThreads) scales[i] = staged[i];  // K then V, as staged
  };
  if constexpr (C::kCodes) {
    load_codes(t_lo);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    convert(0);
    wg::fence_proxy_async();
    __syncthreads();  // the next load overwrites the staging area
    if (t_lo + 1 < t_hi) load_codes(t_lo + 1);
    cp_async_commit();
  } else {
    lookup(t_lo);
    load_tile(t_lo, 0);
    cp_async_commit();
    if (t_lo + 1 < t_hi) lookup(t_lo + 1);
  }

  bool row_ok[2];
  int row_pos[2], row_lo[2];
  thread_rows(wg_r0 + warp * 16, g, rows, group, first_pos, window, row_ok, row_pos, row_lo);
  const float scale_log2 = p.scale * 1.4426950408889634f;

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  // Q (this warpgroup's 64 rows) and K as K-major operands; V as an MN-major one.
  const uint64_t q_desc = wg::desc128(q_s + wgi * 64 * 128, 16, 1024);

  // Per tile t: S_t = Q K_t and O += P_{t-1} V_{t-1} issued together; the softmax of S_t runs while the tensor
  // cores still multiply P_{t-1} V_{t-1}; then O is rescaled to S_t's row maxima and P_t packed. Three stages: tile
  // t+1 loads while V_{t-1} and tile t are read. The first tile has no PV before it: its step is a copy of the loop
  // body without one (kFirst), so no multiply sits behind a branch.
  uint32_t pa[C::kKeys / 16][4];
  auto step = [&](int t, int it, auto first) {
    constexpr bool kFirst = decltype(first)::value;
    if constexpr (!C::kCodes) {
      cp_async_wait<0>();
      wg::fence_proxy_async();
      __syncthreads();  // tile t is everyone's; tile t-2's readers (PV_{t-2}) are done
    }  // (8-bit caches: tile t was converted and fenced before)
    const float* k_scale = reinterpret_cast<const float*>(smem_raw + (kv_s - smem_addr(smem_raw)) +
                                                          (it % C::kStages) * C::kStageBytes + 2 * C::kTileBytes);
    [[maybe_unused]] const float* v_scale = k_scale + C::kKeys;  // 8-bit caches only
    const uint32_t k_s = kv_s + (it % C::kStages) * C::kStageBytes;
    const uint32_t v_prev = kv_s + ((it + C::kStages - 1) % C::kStages) * C::kStageBytes + C::kTileBytes;

    float sc[kNt][4];
    wg::fence_operands(o);
    wg::fence();
    issue_scores<T, D, C::kRows, C::kKeys>(sc, q_desc, k_s);
    if constexpr (!kFirst) {
      issue_pv<T, D, C::kKeys>(o, pa, v_prev);
      wg::wait<1>();  // S_t (groups complete in order)
    } else {
      wg::wait<0>();
    }
    wg::fence_operands(sc);

    // Online softmax in log2 units: scores scaled inside the exponent's FMA; masked scores are -inf. 8-bit caches:
    // the scores of codes times each key's K scale first.
    if constexpr (C::kCodes) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        const float2 ks = *reinterpret_cast<const float2*>(k_scale + nt * 8 + c4 * 2);
        sc[nt][0] *= ks.x;
        sc[nt][1] *= ks.y;
        sc[nt][2] *= ks.x;
        sc[nt][3] *= ks.y;
      }
    }
    const int key0 = t * C::kKeys;
    if (!(key0 >= lo_max && key0 + C::kKeys - 1 <= pos_min)) mask_scores(sc, key0, c4, row_ok, row_pos, row_lo);
    float alpha[2];
    online_softmax(sc, m, l, alpha, scale_log2);
    if constexpr (!C::kCodes) {
      // Tile t+1's copies (block ids read a tile ago) go out beside PV_{t-1}, behind the softmax (which they would
      // otherwise delay: 1.72 ms against 1.65 ms for 8K causal on an H100); then tile t+2's lookups.
      if (t + 1 < t_hi) load_tile(t + 1, (it + 1) % C::kStages);
      cp_async_commit();
      if (t + 2 < t_hi) lookup(t + 2);
    }
    if constexpr (!kFirst) {
      wg::wait<0>();  // PV_{t-1}: o and pa are free
      wg::fence_operands(o);
      rescale_rows(o, alpha[0], alpha[1]);
    }
    if constexpr (C::kCodes) {  // V's per-key scales on the probabilities (l keeps the unscaled ones), times kVFactor
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        const float2 vs = *reinterpret_cast<const float2*>(v_scale + nt * 8 + c4 * 2);
        sc[nt][0] *= kVFactor<T, Q> * vs.x;
        sc[nt][1] *= kVFactor<T, Q> * vs.y;
        sc[nt][2] *= kVFactor<T, Q> * vs.x;
        sc[nt][3] *= kVFactor<T, Q> * vs.y;
      }
    }
    pack_probs<T>(sc, pa);
    if constexpr (C::kCodes) {
      if (t + 1 < t_hi) {  // tile t+1 into the stage PV_{t-1} just finished reading
        cp_async_wait<0>();
        __syncthreads();  // its codes landed for everyone; both warpgroups are past PV_{t-1}
        convert((it + 1) % C::kStages);
        wg::fence_proxy_async();
        __syncthreads();
        if (t + 2 < t_hi) load_codes(t + 2);
        cp_async_commit();
      }
    }
  };
  if (t_hi > t_lo) {
    step(t_lo, 0, std::true_type{});
    for (int t = t_lo + 1, it = 1; t < t_hi; ++t, ++it) step(t, it, std::false_type{});
    last_pv<T, D, C::kKeys>(o, pa, kv_s + ((t_hi - 1 - t_lo) % C::kStages) * C::kStageBytes + C::kTileBytes);
  }
  cp_async_wait<0>();

  // kVFactor: 1 except f16 over 8-bit caches (exact: a power of two)
  store_rows<T, D>(p, o, l, kVFactor<T, Q>, row_ok, wg_r0 + warp * 16, g, c4, q0, group, kvh);
#else
  (void)p;
  __trap();  // never launched: the host takes this kernel only on sm_90 devices, which run the sm_90a code
#endif
}

template <typename T, int D, KvQuant Q, bool kPow2> void launch_wg(const AttentionLaunch& p, cudaStream_t stream) {
  using C = WgPrefillCfg<D, Q>;
  static const bool attribute_set = [] {
    PEREGRINE_CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_kernel<T, D, Q, kPow2>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    return true;
  }();
  (void)attribute_set;
  prefill_wgmma_kernel<T, D, Q, kPow2><<<prefill_grid(p, C::kRows), C::kThreads, C::kSmem, stream>>>(p);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

template <typename T, int D, KvQuant Q> void launch_typed(const AttentionLaunch& p, cudaStream_t stream) {
  if constexpr (Q == KvQuant::kNone) {
    if (p.block_shift >= 0 && p.block_size <= WgPrefillCfg<D, Q>::kKeys) {
      launch_wg<T, D, Q, true>(p, stream);
      return;
    }
  }
  launch_wg<T, D, Q, false>(p, stream);
}

bool prefill_wgmma_enabled() {
  // PEREGRINE_PREFILL_WGMMA=0 keeps every prefill on the FlashAttention-2 kernel (A/B benchmarks).
  static const bool env_on = [] {
    const char* v = std::getenv("PEREGRINE_PREFILL_WGMMA");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return env_on && device_has_wgmma();
}

}  // namespace


namespace {

template <typename T, KvQuant Q> void launch_dim(const AttentionLaunch& p, cudaStream_t stream) {
  if (p.head_dim == 128) launch_typed<T, 128, Q>(p, stream);
  else launch_typed<T, 64, Q>(p, stream);
}

template <typename T> void launch_cache(const AttentionLaunch& p, cudaStream_t stream) {
  if (p.cache == DType::kF8E4M3) launch_dim<T, KvQuant::kF8>(p, stream);
  else if (p.cache == DType::kI8) launch_dim<T, KvQuant::kI8>(p, stream);
  else launch_dim<T, KvQuant::kNone>(p, stream);
}

}  // namespace

bool launch_attention_prefill_wgmma(const AttentionLaunch& p, cudaStream_t stream) {
  const bool codes = p.cache == DType::kI8 || p.cache == DType::kF8E4M3;
  if (p.cache != p.act && !codes) return false;
  if ((p.head_dim != 64 && p.head_dim != 128) || !prefill_wgmma_enabled()) return false;
  if (p.act == DType::kBF16) launch_cache<bf16>(p, stream);
  else launch_cache<f16>(p, stream);
  return true;
}

// Whether the current device runs the sm_90a code (compute capability 9.0), per device, asked once
// (declared in attention_wgmma.cuh).
bool device_has_wgmma() {
  static int cached[64];  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  PEREGRINE_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0, minor = 0;
    PEREGRINE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    PEREGRINE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cached[dev] = major == 9 && minor == 0 ? 1 : 2;
  }
  return cached[dev] == 1;
}

}  // namespace peregrine::cuda
