// Split-K flash-decoding on tensor cores. A CTA takes (split, sequence, KV head): the KV head's query rows
// (q_len * group <= 16, packed as token-major (token, head) rows) form one 16-row mma tile shared by four
// warps; each 64-key tile streams through a cp.async pipeline (two stages for b16 caches at D 128, else three
// or two) and each warp handles 16 of its keys. Warps merge in shared memory; splits merge in
// decode_combine_kernel (fixed order: deterministic).
// 8-bit caches (int8 / fp8 e4m3) stream their codes and scales instead; each thread loads its mma fragments
// straight from the staged codes (K's k order and V's output dims permuted so a thread's codes sit in whole words)
// and turns them exactly into f16 values in registers (the mma runs in f16 over 8-bit caches whatever the
// activations are); the scales multiply scores and probabilities in f32.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/env_switch.h"

#include <algorithm>
#include <cstdlib>

namespace peregrine::cuda {
namespace {

using namespace attn;

// Shared memory: the Q tile, then kStages (K, V) tile pairs (b16 caches) or kStages code staging areas (8-bit caches,
// attention_mma.cuh, in its fragment layout).
template <int D, KvQuant Q> struct DecodeCfg {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 128;
  static constexpr int kKeys = kDecodeTileKeys;  // per tile; 16 per warp
  // b16 caches at D 128: two stages (70 KB, three CTAs an SM; three stages took 102 KB, two CTAs, and were 2-5%
  // slower on an H100: docs/BENCHMARKS.md, 2026-12-06). 8-bit caches at D <= 128 and D 64: three.
  static constexpr int kStages = (Q == KvQuant::kNone && D == 128) ? 2 : D <= 128 ? 3 : 2;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr bool kCodes = Q != KvQuant::kNone;
  static constexpr int kQBytes = kDecodeMaxRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;
  static constexpr int kStageBytes = kCodes ? CodeStage<D, kKeys>::kBytes : 2 * kTileBytes;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kSmem = kQBytes + kPipeBytes;
  static constexpr int kMergeBytes = (kWarps * kDecodeMaxRows * D + 2 * kWarps * kDecodeMaxRows) * 4;
  static_assert(kMergeBytes <= kPipeBytes, "merge scratch must fit in the pipeline buffers");
  // Byte offset (from the pipeline's start) of stage st.
  __host__ __device__ static constexpr uint32_t stage(int st) { return st * kStageBytes; }
};

struct DecodeSeq {
  int q0, q_len, rows, first_pos, kv_lo, kv_hi, tile_lo, n_tiles, num_splits, tiles_per_split;
};

// The sequence's decode geometry; rows == 0 when the sequence is not on the decode path.
__device__ __forceinline__ DecodeSeq decode_seq(const AttentionLaunch& p, int s, int group) {
  DecodeSeq d{};
  d.q0 = p.query_start_loc[s];
  d.q_len = p.query_start_loc[s + 1] - d.q0;
  d.rows = d.q_len * group;
  if (d.rows <= 0 || d.rows > kDecodeMaxRows) {
    d.rows = 0;
    return d;
  }
  const int len = p.seq_lens[s];
  d.first_pos = len - d.q_len;
  d.kv_lo = p.sliding_window > 0 ? max(0, d.first_pos - p.sliding_window + 1) : 0;
  d.kv_hi = len;
  d.tile_lo = d.kv_lo / kDecodeTileKeys;
  d.n_tiles = (d.kv_hi + kDecodeTileKeys - 1) / kDecodeTileKeys - d.tile_lo;
  d.num_splits = decode_num_splits(d.n_tiles, decode_min_tiles(p), decode_max_splits(p), p.num_kv_heads,
                                   p.decode_wave_ctas, &d.tiles_per_split, p.decode_split_cost);
  return d;
}

template <typename T, int D, KvQuant Q, int kMinBlocks>
__global__ void __launch_bounds__(128, kMinBlocks) decode_kernel(const AttentionLaunch p, int grid_splits, int rows_cap) {
  using C = DecodeCfg<D, Q>;
  using S = CodeStage<D, C::kKeys>;
  using KvT = std::conditional_t<C::kCodes, uint8_t, T>;
  // The mma's operand type: f16 over 8-bit caches whatever the activations are (the hardware turns two e4m3 codes
  // into f16 in one instruction, and f16 holds every int8 and e4m3 value; Q and the probabilities are rounded to f16,
  // finer than bf16 within its range), else the activations' own.
  using M = std::conditional_t<C::kCodes, __half, T>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int split = blockIdx.x, s = blockIdx.y, kvh = blockIdx.z;
  const int group = p.num_q_heads / p.num_kv_heads;
  const DecodeSeq d = decode_seq(p, s, group);
  if (d.rows == 0 || split >= d.num_splits) return;
  const int t_begin = d.tile_lo + split * d.tiles_per_split;
  const int t_end = min(d.tile_lo + d.n_tiles, t_begin + d.tiles_per_split);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c4 = lane % 4;
  const T* q = static_cast<const T*>(p.q);
  const KvT* kc = static_cast<const KvT*>(p.k_cache);
  const KvT* vc = static_cast<const KvT*>(p.v_cache);
  PagedKv kv{table_row(p, s), p.block_size, p.block_shift, static_cast<int64_t>(p.num_kv_heads) * D,
             static_cast<int64_t>(kvh) * D};
  if (p.tail_from && p.tail_from[s] < p.seq_lens[s]) {
    kv.tail = p.tail + p.tail_offset[s];
    kv.tail_from = p.tail_from[s];
  }
  const uint32_t q_s = smem_addr(smem);
  const uint32_t kv_s = q_s + C::kQBytes;
  auto load_tile = [&](int st, int tile) {
    const uint32_t at = kv_s + C::stage(st);
    if constexpr (C::kCodes) {
      load_kv_codes<D, C::kKeys, C::kThreads, true>(at, kc, vc, p.k_scales, p.v_scales, kv, tile * C::kKeys, d.kv_lo,
                                                    d.kv_hi);
    } else {
      load_kv_tile<T, D, C::kKeys, C::kThreads>(at, at + C::kTileBytes, kc, vc, kv, tile * C::kKeys, d.kv_lo,
                                                d.kv_hi);
    }
  };
  // The split's first tile goes out before the wait for the kernel before (launch_pdl) when all its keys are older
  // than the step's tokens: only the step's own keys (written by the RoPE + KV-write kernel just before) and Q
  // depend on it; the geometry reads the step's inputs alone. Remapped keys (tails) wait.
  const bool early = t_begin < t_end && kv.tail == nullptr && (t_begin + 1) * C::kKeys <= d.first_pos;
  if (early) load_tile(0, t_begin);
  pdl_wait();
  pdl_trigger();
  // A tile is visible to every row when its keys lie in [lo of the last row, pos of the first row].
  const int pos_min = d.first_pos;
  const int lo_max = p.sliding_window > 0 ? d.first_pos + (d.rows - 1) / group - p.sliding_window + 1 : 0;

  // Q rows: packed row r = (token r / group, head kvh * group + r % group); rows past d.rows are zero.
  for (int id = threadIdx.x; id < kDecodeMaxRows * (D / 8); id += C::kThreads) {
    const int r = id / (D / 8), chunk = id % (D / 8);
    const bool valid = r < d.rows;
    const T* src = q;
    if (valid)
      src = q + (static_cast<int64_t>(d.q0 + r / group) * p.num_q_heads + kvh * group + r % group) * D + chunk * 8;
    if constexpr (std::is_same_v<M, T>) {
      cp_async16(q_s + swizzle<D>(r, chunk * 8), src, valid);
    } else {  // bf16 Q as f16 (the first barrier below publishes it)
      float v[8] = {};
      if (valid) load8(src, v);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_s + swizzle<D>(r, chunk * 8)),
                   "r"(pack2<M>(v[0], v[1])), "r"(pack2<M>(v[2], v[3])), "r"(pack2<M>(v[4], v[5])),
                   "r"(pack2<M>(v[6], v[7]))
                   : "memory");
    }
  }
#pragma unroll
  for (int st = 0; st < C::kStages - 1; ++st) {
    if (t_begin + st < t_end && !(st == 0 && early)) load_tile(st, t_begin + st);
    cp_async_commit();
  }

  // This thread's two rows (g and g + 8) of the 16-row tile.
  bool row_ok[2];
  int row_pos[2], row_lo[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = g + 8 * i;
    row_ok[i] = r < d.rows;
    row_pos[i] = d.first_pos + r / group;
    row_lo[i] = p.sliding_window > 0 ? row_pos[i] - p.sliding_window + 1 : 0;
  }
  const float scale_log2 = p.scale * 1.4426950408889634f;

  // Q's A fragment of k-block kk. b16 caches: ldmatrix's layout. 8-bit caches: the k order is permuted so that a
  // thread's four K codes of a k-block are 4 adjacent bytes: k-block kk = 4h + i takes, for the thread of column c4,
  // dims base .. base + 3 with base = 16 (c4 + 4h) + 4i as its k slots 2c4, 2c4 + 1, 2c4 + 8, 2c4 + 9.
  auto q_frag = [&](int kk, uint32_t (&a)[4]) {
    if constexpr (C::kCodes) {
      const int base = 16 * (c4 + 4 * (kk / 4)) + 4 * (kk % 4);
      const uint32_t off = ((base % 8) * 2);
      lds64(q_s + swizzle<D>(g, base / 8 * 8) + off, a[0], a[2]);
      lds64(q_s + swizzle<D>(g + 8, base / 8 * 8) + off, a[1], a[3]);
    } else {
      ldmatrix_x4(q_s + swizzle<D>(lane % 16, kk * 16 + (lane / 16) * 8), a);
    }
  };
  uint32_t qf[C::kQInRegs ? D / 16 : 1][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int t = t_begin, it = 0; t < t_end; ++t, ++it) {
    cp_async_wait<C::kStages - 2>();
    __syncthreads();
    if constexpr (C::kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) q_frag(kk, qf[kk]);
      }
    }
    {
      const int next = t + C::kStages - 1;
      const int st = (it + C::kStages - 1) % C::kStages;
      if (next < t_end) load_tile(st, next);
      cp_async_commit();
    }
    const int st = it % C::kStages;
    const uint32_t k_s = kv_s + C::stage(st), v_s = k_s + (C::kCodes ? S::kCodeBytes : C::kTileBytes);
    // 8-bit caches: this tile's K and V scales (f32 per key) in the staging area.
    const float* k_scale = reinterpret_cast<const float*>(smem + C::kQBytes + C::stage(st) + S::kKScales);
    const float* v_scale = reinterpret_cast<const float*>(smem + C::kQBytes + C::stage(st) + S::kVScales);

    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    if constexpr (C::kCodes) {
      // K's B fragments straight from the codes: row warp * 16 + nt * 8 + g, 16 bytes per (row, c4 + 4h); word i of
      // them is k-block 4h + i (see q_frag).
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int row = warp * 16 + nt * 8 + g;
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
          uint32_t w[4];
          lds128(k_s + row * D + k_code_chunk<D, true>(row, c4 + 4 * h) * 16, w);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            uint32_t a[4];
            if constexpr (C::kQInRegs) {
#pragma unroll
              for (int j = 0; j < 4; ++j) a[j] = qf[4 * h + i][j];
            } else {
              q_frag(4 * h + i, a);
            }
            uint32_t b0, b1;
            codes_to_b16<M, Q>(w[i], b0, b1);
            mma16816<M>(sc[nt], a, b0, b1);
          }
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        if constexpr (C::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = qf[kk][i];
        } else {
          q_frag(kk, a);
        }
        uint32_t b[4];
        ldmatrix_x4(k_s + swizzle<D>(warp * 16 + (lane % 8) + (lane / 16) * 8, kk * 16 + ((lane / 8) % 2) * 8), b);
        mma16816<T>(sc[0], a, b[0], b[1]);
        mma16816<T>(sc[1], a, b[2], b[3]);
      }
    }
    const int key_base = t * C::kKeys + warp * 16;
    const bool full = t * C::kKeys >= lo_max && t * C::kKeys + C::kKeys - 1 <= pos_min;
    float s0[4], s1[4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key_base + nt * 8 + c4 * 2 + e;
        const bool v0 = full || (row_ok[0] && key <= row_pos[0] && key >= row_lo[0]);
        const bool v1 = full || (row_ok[1] && key <= row_pos[1] && key >= row_lo[1]);
        const float f = C::kCodes ? k_scale[warp * 16 + nt * 8 + c4 * 2 + e] * scale_log2 : scale_log2;
        s0[nt * 2 + e] = v0 ? sc[nt][e] * f : -INFINITY;
        s1[nt * 2 + e] = v1 ? sc[nt][2 + e] * f : -INFINITY;
      }
    }
    const float alpha0 = softmax_update(s0, m[0], l[0]);
    const float alpha1 = softmax_update(s1, m[1], l[1]);
    rescale_rows(o, alpha0, alpha1);
    if constexpr (C::kCodes) scale_probabilities<M, Q>(s0, s1, v_scale + warp * 16, c4);  // l takes kVFactor later
    const uint32_t pa[4] = {pack2<M>(s0[0], s0[1]), pack2<M>(s1[0], s1[1]), pack2<M>(s0[2], s0[3]),
                            pack2<M>(s1[2], s1[3])};
    if constexpr (C::kCodes) {
      // V's B fragments straight from the codes. The output dims are permuted: column j of n-tile dn = 4a + b is dim
      // 32a + 4j + b, so the thread of column g needs dims 32a + 4g .. + 3 (one word) of its four key rows 2c4, 2c4 + 1,
      // 2c4 + 8, 2c4 + 9 (P's k slots); byte permutes pair each dim's codes of two keys.
#pragma unroll
      for (int a = 0; a < D / 32; ++a) {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int row = warp * 16 + 2 * c4 + (j & 1) + (j >> 1) * 8;
          const int word = 8 * a + g;
          w[j] = lds32(v_s + row * D + v_code_chunk<D, true>(row, word / 4) * 16 + (word % 4) * 4);
        }
        // Byte pairs: lo01 holds keys (2c4, 2c4 + 1) of dims 0 and 1 as two 16-bit pairs, hi01 of dims 2 and 3;
        // lo89 / hi89 the same of keys 2c4 + 8, + 9. Each pair is one half of an mma B fragment.
        const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
        const uint32_t lo89 = __byte_perm(w[2], w[3], 0x5140), hi89 = __byte_perm(w[2], w[3], 0x7362);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const uint32_t b0 = code_pair_f16<Q>(b < 2 ? lo01 : hi01, b % 2);
          const uint32_t b1 = code_pair_f16<Q>(b < 2 ? lo89 : hi89, b % 2);
          mma16816<M>(o[4 * a + b], pa, b0, b1);
        }
      }
    } else {
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(v_s + swizzle<D>(warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dn * 16 + (lane / 16) * 8), b);
        mma16816<T>(o[2 * dn], pa, b[0], b[1]);
        mma16816<T>(o[2 * dn + 1], pa, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Merge the four warps (each saw a quarter of every tile) through shared memory.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    l[i] *= kVFactor<M, Q>;  // 1 except over 8-bit caches (f16 mma; exact: a power of two)
  }
  float* so = reinterpret_cast<float*>(smem + C::kQBytes);  // [warp][16][D]
  float* sm = so + C::kWarps * kDecodeMaxRows * D;            // [warp][16]
  float* sl = sm + C::kWarps * kDecodeMaxRows;                // [warp][16]
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    // Column j of n-tile dn: dim dn * 8 + j (b16 caches), 32 (dn / 4) + 4j + dn % 4 (8-bit caches, see above).
    const int c0 = C::kCodes ? 32 * (dn / 4) + 8 * c4 + dn % 4 : dn * 8 + c4 * 2;
    const int c1 = C::kCodes ? c0 + 4 : c0 + 1;
    if (g < d.rows) {  // only real rows are read below
      so[(warp * 16 + g) * D + c0] = o[dn][0];
      so[(warp * 16 + g) * D + c1] = o[dn][1];
    }
    if (g + 8 < d.rows) {
      so[(warp * 16 + g + 8) * D + c0] = o[dn][2];
      so[(warp * 16 + g + 8) * D + c1] = o[dn][3];
    }
  }
  if (c4 == 0) {
    sm[warp * 16 + g] = m[0];
    sm[warp * 16 + g + 8] = m[1];
    sl[warp * 16 + g] = l[0];
    sl[warp * 16 + g + 8] = l[1];
  }
  __syncthreads();

  const int64_t part = ((static_cast<int64_t>(s) * p.num_kv_heads + kvh) * grid_splits + split) * rows_cap;
  float* ws_o = p.workspace;
  float* ws_lse = p.workspace + static_cast<int64_t>(p.num_seqs) * p.num_kv_heads * grid_splits * rows_cap * D;
  for (int idx = threadIdx.x; idx < d.rows * D; idx += C::kThreads) {
    const int r = idx / D, col = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) mx = fmaxf(mx, sm[w * 16 + r]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {
        const float f = exp2f(sm[w * 16 + r] - mx);
        sum += f * sl[w * 16 + r];
        acc += f * so[(w * 16 + r) * D + col];
      }
    }
    if (d.num_splits == 1) {
      const int64_t token = d.q0 + r / group;
      static_cast<T*>(p.out)[(token * p.num_q_heads + kvh * group + r % group) * D + col] = from_f32<T>(acc / sum);
    } else {
      ws_o[(part + r) * D + col] = sum > 0.f ? acc / sum : 0.f;
      if (col == 0) ws_lse[part + r] = sum > 0.f ? mx + log2f(sum) : -INFINITY;
    }
  }
}

// The split combine's weights: every row's log-sum-exps in one round of loads, then a thread a row turns them into
// 2^(lse_i - max lse) (0 for an empty split) and their total. Every thread of the block calls it.
__device__ __forceinline__ void combine_weights(const AttentionLaunch& p, const DecodeSeq& d, int64_t part0,
                                                int grid_splits, int rows_cap,
                                                float (&weights)[kDecodeMaxRows][kDecodeSplitsLimit],
                                                float (&totals)[kDecodeMaxRows]) {
  const int n = d.num_splits;
  const float* ws_lse =
      p.workspace + static_cast<int64_t>(p.num_seqs) * p.num_kv_heads * grid_splits * rows_cap * p.head_dim;
  for (int i = threadIdx.x; i < d.rows * n; i += blockDim.x) {
    const int r = i / n, split = i % n;
    weights[r][split] = ws_lse[part0 + split * rows_cap + r];
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < d.rows) {
    float* w = weights[threadIdx.x];
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = fmaxf(mx, w[i]);
    float total = 0.f;
    for (int i = 0; i < n; ++i) {
      w[i] = w[i] == -INFINITY ? 0.f : exp2f(w[i] - mx);
      total += w[i];
    }
    totals[threadIdx.x] = total;
  }
  __syncthreads();
}

// Merges the splits of each decode-path (sequence, KV head): out = sum_i w_i O_i / sum_i w_i with
// w_i = 2^(lse_i - max lse), splits in index order. Every row's log-sum-exps come in one round of loads, a thread a
// row makes its weights and their sum, then a thread an output (the block holds up to kCombineThreads of them) loads
// its partials sixteen at a time, predicated, and sums them in split order: a few round trips to L2 where a loop
// over rows and splits made dozens. (Measured against eight at a time from 128 threads, the same sums: H100, 8B
// shape, bf16 bs 1 +1.4%, W4A16 bs 1 +2.4%, bf16 bs 64 +1.2%; docs/BENCHMARKS.md, 2026-12-07.)
// kFour: a thread four neighbouring outputs instead (16-byte loads, at most kCombineFourThreads a block), the same
// sums. At batch 256 a thread an output takes blocks of 512 threads at 64 registers, two an SM: eight waves, 41 us a
// layer under ncu (H100, 2026-12-07). PEREGRINE_DECODE_COMBINE_VEC=1 (or decode_combine_vec_mode) until a GPU run
// has checked and measured it.
constexpr int kCombineThreads = 1024, kCombineFourThreads = 256;
template <typename T, bool kFour>
__global__ void __launch_bounds__(kFour ? kCombineFourThreads : kCombineThreads)
    decode_combine_kernel(const AttentionLaunch p, int grid_splits, int rows_cap) {
  pdl_wait();
  pdl_trigger();
  __shared__ float weights[kDecodeMaxRows][kDecodeSplitsLimit];
  __shared__ float totals[kDecodeMaxRows];
  const int s = blockIdx.x, kvh = blockIdx.y;
  const int group = p.num_q_heads / p.num_kv_heads;
  const DecodeSeq d = decode_seq(p, s, group);
  if (d.rows == 0 || d.num_splits <= 1) return;
  const int D = p.head_dim, n = d.num_splits;
  const int64_t part0 = (static_cast<int64_t>(s) * p.num_kv_heads + kvh) * grid_splits * rows_cap;
  const float* ws_o = p.workspace;
  combine_weights(p, d, part0, grid_splits, rows_cap, weights, totals);
  constexpr int kPer = kFour ? 4 : 1;  // outputs a thread
  const int64_t split_stride = static_cast<int64_t>(rows_cap) * D;
  for (int idx = threadIdx.x; idx < d.rows * D / kPer; idx += blockDim.x) {
    const int r = idx / (D / kPer), col = (idx % (D / kPer)) * kPer;
    const float* src = ws_o + (part0 + r) * D + col;
    float acc[kPer] = {};
    for (int i = 0; i < n; i += 16) {
      if constexpr (kFour) {
        float4 v[16];
#pragma unroll
        for (int j = 0; j < 16; ++j)  // all in flight; past n unused
          v[j] = *reinterpret_cast<const float4*>(src + min(i + j, n - 1) * split_stride);
        // The values as of here: keeps the compiler from sinking each load into its use below (a round trip each).
#pragma unroll
        for (int j = 0; j < 16; ++j) asm volatile("" ::"f"(v[j].x), "f"(v[j].y), "f"(v[j].z), "f"(v[j].w));
#pragma unroll
        for (int j = 0; j < 16; ++j)
          if (i + j < n) {
            const float w = weights[r][i + j];
            acc[0] += w * v[j].x;
            acc[1] += w * v[j].y;
            acc[2] += w * v[j].z;
            acc[3] += w * v[j].w;
          }
      } else {
        float v[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = i + j < n ? src[(i + j) * split_stride] : 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j)
          if (i + j < n) acc[0] += weights[r][i + j] * v[j];
      }
    }
    const int64_t token = d.q0 + r / group;
    T* out = static_cast<T*>(p.out) + (token * p.num_q_heads + kvh * group + r % group) * D + col;
#pragma unroll
    for (int e = 0; e < kPer; ++e) out[e] = from_f32<T>(acc[e] / totals[r]);
  }
}

EnvSwitch g_combine_four("PEREGRINE_DECODE_COMBINE_VEC");  // decode_combine_vec_mode

template <typename T, int D, KvQuant Q, int kMinBlocks>
void launch_decode_typed(const AttentionLaunch& p, int grid_splits, int rows_cap, cudaStream_t stream) {
  using C = DecodeCfg<D, Q>;
  static const bool attribute_set = [] {
    PEREGRINE_CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<T, D, Q, kMinBlocks>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    return true;
  }();
  (void)attribute_set;
  // The CTAs of this kernel the device runs at once (decode_num_splits' wave rule): its occupancy times the SMs.
  static const int wave_ctas = [] {
    int device = 0, sms = 0, per_sm = 0;
    PEREGRINE_CUDA_CHECK(cudaGetDevice(&device));
    PEREGRINE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    PEREGRINE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel<T, D, Q, kMinBlocks>,
                                                                       C::kThreads, C::kSmem));
    return sms * per_sm;
  }();
  AttentionLaunch q = p;
  q.decode_wave_ctas = p.decode_waves ? wave_ctas : 0;
  dim3 grid(static_cast<unsigned>(grid_splits), static_cast<unsigned>(q.num_seqs),
            static_cast<unsigned>(q.num_kv_heads));
  launch_pdl(decode_kernel<T, D, Q, kMinBlocks>, grid, C::kThreads, C::kSmem, stream, q.num_tokens, q, grid_splits,
             rows_cap);
  if (grid_splits > 1) {
    dim3 cgrid(static_cast<unsigned>(q.num_seqs), static_cast<unsigned>(q.num_kv_heads));
    if (g_combine_four.on()) {
      const int threads = std::clamp((rows_cap * D / 4 + 31) / 32 * 32, 32, kCombineFourThreads);
      launch_pdl(decode_combine_kernel<T, true>, cgrid, threads, 0, stream, q.num_tokens, q, grid_splits, rows_cap);
    } else {
      const int threads = std::clamp((rows_cap * D + 31) / 32 * 32, 128, kCombineThreads);
      launch_pdl(decode_combine_kernel<T, false>, cgrid, threads, 0, stream, q.num_tokens, q, grid_splits, rows_cap);
    }
  }
}

// 8-bit caches at D <= 128: four CTAs an SM (128 registers; a few bytes spill). Without the bound (154 registers,
// three CTAs) it was 1-5% slower or equal on the H200 (docs/BENCHMARKS.md, 2026-12-05). b16 caches at D 128: three
// (168 registers, within the bound); others no bound.
template <typename T, int D, KvQuant Q>
void launch_decode_blocks(const AttentionLaunch& p, int grid_splits, int rows_cap, cudaStream_t stream) {
  constexpr int kMinBlocks = (Q != KvQuant::kNone && D <= 128) ? 4 : (D == 128 ? 3 : 0);
  launch_decode_typed<T, D, Q, kMinBlocks>(p, grid_splits, rows_cap, stream);
}

template <typename T, KvQuant Q>
void launch_decode_dim(const AttentionLaunch& p, int grid_splits, int rows_cap, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: launch_decode_blocks<T, 64, Q>(p, grid_splits, rows_cap, stream); return;
    case 128: launch_decode_blocks<T, 128, Q>(p, grid_splits, rows_cap, stream); return;
    case 256: launch_decode_blocks<T, 256, Q>(p, grid_splits, rows_cap, stream); return;
    default: throw Error(ErrorCode::kInternal, "attention decode: unsupported head_dim");
  }
}

template <typename T>
void launch_decode_cache(const AttentionLaunch& p, int grid_splits, int rows_cap, cudaStream_t stream) {
  if (p.cache == DType::kF8E4M3) {
    launch_decode_dim<T, KvQuant::kF8>(p, grid_splits, rows_cap, stream);
  } else if (p.cache == DType::kI8) {
    launch_decode_dim<T, KvQuant::kI8>(p, grid_splits, rows_cap, stream);
  } else {
    launch_decode_dim<T, KvQuant::kNone>(p, grid_splits, rows_cap, stream);
  }
}

}  // namespace

void decode_combine_vec_mode(int mode) { g_combine_four.set(mode); }

void launch_attention_decode(const AttentionLaunch& p, int grid_splits, int rows_cap, cudaStream_t stream) {
  if (p.act == DType::kBF16) {
    launch_decode_cache<bf16>(p, grid_splits, rows_cap, stream);
  } else {
    launch_decode_cache<f16>(p, grid_splits, rows_cap, stream);
  }
}

}  // namespace peregrine::cuda
