// W4A16 GEMM for 16 < M on Hopper's warpgroup MMA (see w4_gemm.cuh; sm_90a only, w4_gemm.cu elsewhere).
//
// The weights are the MMA's M side and x its N side: a block owns 128 weight rows (two warpgroups of 64) and NT
// tokens (32 or 64, the wgmma's N; larger M takes several token tiles), two blocks an SM. Each 64-wide K tile's
// codes and x rows stream through an 8-stage ring of TMA tensor copies (w4_wgmma_tma_kernel, the default; the
// cp.async ring of w4_wgmma_kernel, which also stages the group scales and zeros, where TMA cannot run); x lands in
// the 128-byte-swizzled K-major layout wgmma reads B from, and each
// thread turns its rows' codes into the m16n8k16 A fragments in registers — a code byte's two nibbles as the b16
// pair (c - 8, c' - 8), exact, in four instructions (shift, byte permute, lop3 under the exponent of 128 / 1024,
// one packed fma/sub) — so the codes are read once per block and never written back as b16.
//
// Sums: a group's tiles accumulate into one f32 tile (wgmma, scale-d 0 at the group's first tile), folded at the
// group's end as acc += s · (P + (8 - z) · Σx), the w4_gemm formula; Σx of each token over the group in f32 from
// the staged x in an order fixed by K (zeros only). The K split: w4_gemm's, or fewer or more blocks where its
// clusters would not all fit on the device at once (fitted_splits) — a function of (N, K, the device), its blocks one
// cluster adding their partials in split order. A row's bits therefore never depend on M or on the token tile (NT)
// that M picked; they differ from w4_gemm's (another MMA), so the backend uses one of the two for all M up to 128.
// At 64 < M <= 256 w4_wide_kernel (below) takes all of M in one block, the scale in the fragments: a path of its own.
//
// Each warpgroup waits for a tile's multiplies before making the next tile's fragments, so conversion and MMA
// overlap across the block's two warpgroups and the SM's two blocks. Keeping each k step's multiply in flight while
// the next k step's fragment is made (four fragment sets) was measured no faster here (H100, 2026-12-07: decode at
// batch 64 and 256 within -2%..0%) and removed; the wide kernel, with no fold inside its loop, does it.
#include <cuda.h>  // CUtensorMap (the encoder comes through the runtime's driver entry point)

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/w4_gemm.cuh"
#include "backend/cuda/w4_split.cuh"

namespace peregrine::cuda {
namespace {

namespace wg = attn::wg;

constexpr int kRows = 128;  // weight rows per block: two warpgroups of 64
constexpr int kTK = 64;     // K per tile
constexpr int kThreads = 256;
constexpr int kStages = 8;
constexpr int kPartPad = 4;  // floats of padding per token row of the f32 partial tile

template <int NT>
struct WgCfg {
  static constexpr int kXBytes = NT * 128;  // NT tokens x 64 K, one 128-byte swizzled row each
  static constexpr int kCBytes = kRows * kTK / 2;
  static constexpr int kSBytes = kRows * 4 * 2;                    // the tile's group scale, then zero, of the 128 rows
  static constexpr int kStageBytes = kXBytes + kCBytes + kSBytes;  // a 1024-byte multiple (swizzle atoms)
  static constexpr int kRing = kStages * kStageBytes;
  static constexpr int kPartBytes = NT * (kRows + kPartPad) * 4;
  static constexpr int kXsumBytes = 2 * NT * 4;  // Σx of the tokens over the group, two groups (zeros only)
  static constexpr int kSmem = 1024 + (kRing > kPartBytes ? kRing : kPartBytes) + kXsumBytes;
  static_assert(kStageBytes % 1024 == 0, "swizzled x tiles need 1024-byte aligned stages");
};

#ifdef PEREGRINE_WGMMA
// Byte t of w: its low nibble c (even k) and high nibble c' (odd k) as the b16 pair (c - 8, c' - 8), exact.
// perm = t | (t + 4) << 8 puts byte t of w in byte 0 and byte t of w >> 4 (whose low nibble is c') in byte 2.
template <typename T>
__device__ __forceinline__ uint32_t byte_pair(uint32_t w, uint32_t perm) {
  const uint32_t y = __byte_perm(w, w >> 4, perm);
  uint32_t v, r;
  if constexpr (std::is_same_v<T, bf16>) {
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(v) : "r"(y), "r"(0x000f000fu), "r"(0x43004300u));  // 128 + c
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(v), "r"(0x3f803f80u), "r"(0xc308c308u));   // - 136
  } else {
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(v) : "r"(y), "r"(0x000f000fu), "r"(0x64006400u));  // 1024 + c
    asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(0x64086408u));                             // - 1032
  }
  return r;
}

__device__ __forceinline__ float b16_lo(uint32_t v, bool is_bf16) {
  return is_bf16 ? __uint_as_float(v << 16) : __half2float(__ushort_as_half(static_cast<unsigned short>(v & 0xffffu)));
}
__device__ __forceinline__ float b16_hi(uint32_t v, bool is_bf16) {
  return is_bf16 ? __uint_as_float(v & 0xffff0000u)
                 : __half2float(__ushort_as_half(static_cast<unsigned short>(v >> 16)));
}

// ---- One K tile's work, shared by both kernels ----
// The A fragments of this thread's rows (r0, r0 + 8) for the tile's four k16 steps, kk from words 2kk (a0, a1) and
// 2kk + 1 (a2, a3); the staged codes: 128 rows x 2 chunks, chunk h of row r at r * 32 + ((h ^ ((r >> 2) & 1)) << 4)
// (a warp's eight rows read without bank conflicts).
__device__ __forceinline__ void tile_words(const unsigned char* codes, int r0, uint32_t (&w)[2][8]) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = r0 + 8 * rr;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 u = *reinterpret_cast<const uint4*>(codes + row * 32 + ((h ^ ((row >> 2) & 1)) << 4));
      w[rr][4 * h] = u.x;
      w[rr][4 * h + 1] = u.y;
      w[rr][4 * h + 2] = u.z;
      w[rr][4 * h + 3] = u.w;
    }
  }
}
template <typename T>
__device__ __forceinline__ void kstep_fragment(const uint32_t (&w)[2][8], int kk, uint32_t perm, uint32_t (&a)[4]) {
  a[0] = byte_pair<T>(w[0][2 * kk], perm);
  a[1] = byte_pair<T>(w[1][2 * kk], perm);
  a[2] = byte_pair<T>(w[0][2 * kk + 1], perm);
  a[3] = byte_pair<T>(w[1][2 * kk + 1], perm);
}
template <typename T>
__device__ __forceinline__ void tile_fragments(const unsigned char* codes, int r0, uint32_t perm, uint32_t (&a)[4][4]) {
  uint32_t w[2][8];
  tile_words(codes, r0, w);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) kstep_fragment<T>(w, kk, perm, a[kk]);
}

// The tile's four multiplies into acc (scale-d 0 at a group's first tile: the group starts afresh), waited for.
template <typename T, int NT>
__device__ __forceinline__ void tile_mma(float (&acc)[NT / 8][4], const uint32_t (&a)[4][4], uint64_t bdesc,
                                         bool first) {
  wg::fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wg::MmaK<T, NT>::rs_k(acc, a[kk], bdesc + ((kk * 32) >> 4), first && kk == 0 ? 0 : 1);
  wg::commit();
  wg::wait<0>();
  wg::fence_operands(acc);
}

// The finished group's sums into the total: total += s · (P + (8 - z) · Σx) per row and token; xs: the group's Σx
// of the tile's NT tokens (zeros only).
template <int NT, bool kZeros>
__device__ __forceinline__ void fold_group(const float (&acc)[NT / 8][4], float (&total)[NT / 8][4], const float* xs,
                                           const float (&s)[2], const float (&z)[2], int t) {
#pragma unroll
  for (int j = 0; j < NT / 8; ++j) {
    float2 x2 = make_float2(0.0f, 0.0f);
    if constexpr (kZeros) x2 = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float pv = acc[j][e];
      if constexpr (kZeros) pv = fmaf(8.0f - z[e / 2], e & 1 ? x2.y : x2.x, pv);
      total[j][e] = fmaf(s[e / 2], pv, total[j][e]);
    }
  }
}

// Σx of the staged tile's NT tokens (x: row r's chunk c at r * 128 + ((c ^ (r & 7)) << 4)) by kThr threads (id:
// 0..kThr-1), kThr / NT a token, each summing its chunks in k order, then across them by xor shuffles; added to the
// group's running sum xs (reset at its first tile).
template <typename T, int NT, int kThr>
__device__ __forceinline__ void tile_xsum(const unsigned char* x_tile, float* xs, bool first, int id) {
  constexpr int kPerTok = kThr / NT, kChunks = 8 / kPerTok;
  const int r = id / kPerTok, q = id % kPerTok;
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int chunk = q * kChunks + c;
    const uint4 v = *reinterpret_cast<const uint4*>(x_tile + r * 128 + ((chunk ^ (r & 7)) << 4));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s += b16_lo(w[e], std::is_same_v<T, bf16>);
      s += b16_hi(w[e], std::is_same_v<T, bf16>);
    }
  }
#pragma unroll
  for (int o = 1; o < kPerTok; o *= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (q == 0) xs[r] = (first ? 0.0f : xs[r]) + s;
}

// The block's f32 partial tile [token][row] (row stride kRows + kPartPad) into shared memory, then the cluster's
// partials added in split order: block `rank` finishes tokens [rank, rank + 1) * NT / splits of the tile.
template <int NT>
__device__ __forceinline__ void finish_tile(const W4GemmLaunch& p, unsigned char* smem, const float (&total)[NT / 8][4],
                                            int r0, int t, int rank, int splits, int64_t m0, int64_t n0) {
  constexpr int kPS = kRows + kPartPad;
  float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) partial[(8 * j + 2 * t + (e & 1)) * kPS + r0 + 8 * (e / 2)] = total[j][e];
  w4split::add_splits_and_store<kRows, kPS, kThreads>(p, partial, NT, rank, splits, m0, n0);
}

#endif  // PEREGRINE_WGMMA

// grid: (splits, token tiles, weight-row tiles); the splits of one output tile are one cluster (splits > 1).
template <typename T, int NT, bool kZeros>
__global__ void __launch_bounds__(kThreads, 2) w4_wgmma_kernel(W4GemmLaunch p, int splits) {
#ifdef PEREGRINE_WGMMA
  using C = WgCfg<NT>;
  constexpr int kFrags = NT / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = attn::smem_addr(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  float* xsum = reinterpret_cast<float*>(smem + (C::kRing > C::kPartBytes ? C::kRing : C::kPartBytes));
  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int rank = blockIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * NT, n0 = static_cast<int64_t>(blockIdx.z) * kRows;
  const int k_tiles = static_cast<int>(p.k / kTK);
  const int kt0 = k_tiles * rank / splits, kt1 = k_tiles * (rank + 1) / splits, nk = kt1 - kt0;
  const int tpg = static_cast<int>(p.group_size / kTK);  // tiles per group

  // Each thread's share of a stage (offsets in 32 bits: w4_gemm_supports bounds M * K and N * K / 2).
  // x: NT rows x 8 chunks, chunk c of token row r at r * 128 + ((c ^ (r & 7)) << 4); codes: 128 rows x 2 chunks,
  // chunk h of row r at r * 32 + ((h ^ ((r >> 2) & 1)) << 4) (a warp's eight rows read without bank conflicts);
  // the tile's group scale (threads 0..127) or zero (128..255) of each row. Rows past M or N are zero-filled.
  constexpr int kXPer = NT * 8 / kThreads;  // 16-byte x chunks per thread: 2 (NT 64) or 1 (NT 32)
  const T* x = static_cast<const T*>(p.x);
  uint32_t xoff[kXPer], xdst[kXPer];
  bool xok[kXPer];
#pragma unroll
  for (int j = 0; j < kXPer; ++j) {
    const int idx = tid + kThreads * j, row = idx / 8, c = idx % 8;
    xok[j] = m0 + row < p.m;
    xoff[j] = xok[j] ? static_cast<uint32_t>((m0 + row) * p.k + static_cast<int64_t>(kt0) * kTK + c * 8) : 0u;
    xdst[j] = static_cast<uint32_t>(row * 128 + ((c ^ (row & 7)) << 4));
  }
  const int crow = tid / 2, ch = tid % 2;
  const bool cok = n0 + crow < p.n;
  uint32_t coff =
      cok ? static_cast<uint32_t>((n0 + crow) * (p.k / 2) + static_cast<int64_t>(kt0) * (kTK / 2) + ch * 16) : 0u;
  const uint32_t cdst = C::kXBytes + crow * 32 + ((ch ^ ((crow >> 2) & 1)) << 4);
  const int srow = tid % kRows;
  const bool sok = n0 + srow < p.n && (tid < kRows || kZeros);
  const float* sg = (tid < kRows ? p.scales : p.zeros) + (sok ? (n0 + srow) * p.groups : 0);
  const uint32_t sdst = C::kXBytes + C::kCBytes + tid * 4;
  int gi = kt0 / tpg, gcount = kt0 % tpg;  // the next loaded tile's group, and its tile within that group

  auto load_stage = [&](int slot) {
    const uint32_t base = sbase + slot * C::kStageBytes;
#pragma unroll
    for (int j = 0; j < kXPer; ++j) {
      attn::cp_async16(base + xdst[j], x + xoff[j], xok[j]);
      if (xok[j]) xoff[j] += kTK;
    }
    attn::cp_async16(base + cdst, p.codes + coff, cok);
    if (cok) coff += kTK / 2;
    if (tid < kRows || kZeros) attn::cp_async4(base + sdst, sg + (sok ? gi : 0), sok);
    if (++gcount == tpg) {
      gcount = 0;
      ++gi;
    }
  };

  // This thread's rows within the block (r0, r0 + 8) and its A-fragment byte selector.
  const int r0 = wgi * 64 + warp * 16 + g;
  const uint32_t perm = static_cast<uint32_t>(t | ((t + 4) << 8));
  float acc[kFrags][4], total[kFrags][4];
#pragma unroll
  for (int j = 0; j < kFrags; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = total[j][e] = 0.0f;
  float s_cur[2] = {0.0f, 0.0f}, z_cur[2] = {0.0f, 0.0f};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load_stage(s);
    attn::cp_async_commit();
  }
  for (int i = 0; i < nk; ++i) {
    const int tile = kt0 + i, slot = i % kStages;
    const bool first = i == 0 || tile % tpg == 0;  // the first tile of a group (within this split)
    const int parity = (tile / tpg) & 1;
    attn::cp_async_wait<kStages - 2>();
    wg::fence_proxy_async();
    __syncthreads();
    // Everyone's tile i is visible, and every warpgroup has waited for its tile i - 1 multiplies: tile i - 1's slot
    // takes tile i + kStages - 1, and a group that ended at tile i - 1 folds (its Σx was written before this barrier).
    if (i > 0 && first) fold_group<NT, kZeros>(acc, total, xsum + (parity ^ 1) * NT, s_cur, z_cur, t);
    if (i + kStages - 1 < nk) load_stage((i + kStages - 1) % kStages);
    attn::cp_async_commit();
    const unsigned char* st = smem + slot * C::kStageBytes;
    if constexpr (kZeros) tile_xsum<T, NT, kThreads>(st, xsum + parity * NT, first, tid);
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = r0 + 8 * rr;
      s_cur[rr] = *reinterpret_cast<const float*>(st + C::kXBytes + C::kCBytes + row * 4);
      if constexpr (kZeros)
        z_cur[rr] = *reinterpret_cast<const float*>(st + C::kXBytes + C::kCBytes + kRows * 4 + row * 4);
    }
    uint32_t a[4][4];
    tile_fragments<T>(st + C::kXBytes, r0, perm, a);
    tile_mma<T, NT>(acc, a, wg::desc128(sbase + slot * C::kStageBytes, 16, 1024), first);
  }
  attn::cp_async_wait<0>();
  __syncthreads();  // the last group's Σx visible; the ring free for the partial tile
  if (nk > 0) fold_group<NT, kZeros>(acc, total, xsum + (((kt1 - 1) / tpg) & 1) * NT, s_cur, z_cur, t);
  finish_tile<NT>(p, smem, total, r0, t, rank, splits, m0, n0);
#endif
}

// ---- The same product with x and the codes through TMA (the default; PEREGRINE_W4_WG_TMA=0: the ring above) ----
// Thread 0 issues each stage's two tensor copies (x 128-byte swizzled, the codes 32-byte swizzled: the layouts the
// cp.async ring makes) completing on the stage's full barrier; each warp arrives on the stage's empty barrier once
// its multiplies are done. The copies are the async proxy's own writes, so no proxy fence; no CTA barrier a tile
// (thread 0 refills the slot of tile i - 2 at tile i: a warpgroup may run a tile ahead of the other). Scales and
// zeros come from global memory a group ahead into registers; Σx (zeros only) per warpgroup.
template <int NT>
struct TmaCfg {
  static constexpr int kXBytes = NT * 128;
  static constexpr int kCBytes = kRows * kTK / 2;
  static constexpr int kStageBytes = kXBytes + kCBytes;
  static constexpr int kRing = kStages * kStageBytes;
  static constexpr int kPartBytes = NT * (kRows + kPartPad) * 4;
  static constexpr int kXsumBytes = 2 * 2 * NT * 4;  // per warpgroup, two groups
  static constexpr int kSmem = 1024 + (kRing > kPartBytes ? kRing : kPartBytes) + kXsumBytes;
  static_assert(kStageBytes % 1024 == 0, "swizzled tiles need 1024-byte aligned stages");
};

#ifdef PEREGRINE_WGMMA
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nW4_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra W4_MBAR_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The TMA kernels' ring of kS stages, each x's tile (kXBytes, from token row m0) then the codes' tile (from weight
// row n0): a full barrier a stage (thread 0's arrival plus the copies' bytes) and an empty one (a warp each).
template <int kS, int kStageBytes, int kXBytes>
struct TmaRing {
  uint32_t sbase, full0, empty0;
  const CUtensorMap *xmap, *cmap;
  int kt0, m0, n0;
  // Thread 0 initializes the barriers; then every thread syncs.
  __device__ __forceinline__ void init(int tid) const {
    if (tid == 0) {
      for (int s = 0; s < kS; ++s) {
        mbar_init(full0 + 8 * s, 1);
        mbar_init(empty0 + 8 * s, kThreads / 32);
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
  }
  // Thread 0: the split's tile j into its slot.
  __device__ __forceinline__ void issue(int j) const { issue_at(j, kt0 + j, n0); }
  // Ring position j takes K tile kt of weight rows from n (the stream-K kernel's producer: its own coordinates).
  __device__ __forceinline__ void issue_at(int j, int kt, int n) const {
    const int slot = j % kS;
    const uint32_t base = sbase + slot * kStageBytes, bar = full0 + 8 * slot;
    mbar_expect_tx(bar, kStageBytes);
    tma_load_2d(base, xmap, kt * kTK, m0, bar);
    tma_load_2d(base + kXBytes, cmap, kt * (kTK / 2), n, bar);
  }
  // Thread 0, before the split's first tile: the first kS tiles.
  __device__ __forceinline__ void prime(int tid, int nk) const {
    if (tid == 0)
      for (int j = 0; j < kS && j < nk; ++j) issue(j);
  }
  // Thread 0 at tile i: the slot tile i - 2 used takes tile i + kS - 2 once every warp has released it.
  __device__ __forceinline__ void refill(int tid, int i, int nk) const {
    if (tid != 0) return;
    const int j = i + kS - 2;
    if (j >= kS && j < nk) {
      mbar_wait(empty0 + 8 * (j % kS), static_cast<uint32_t>((j / kS - 1) & 1));
      issue(j);
    }
  }
  // One thread of a producer warp (the wide kernel): after prime, every later tile into its slot once every warp has
  // released the slot's previous tile.
  __device__ __forceinline__ void produce(int nk) const {
    for (int j = kS; j < nk; ++j) {
      mbar_wait(empty0 + 8 * (j % kS), static_cast<uint32_t>((j / kS - 1) & 1));
      issue(j);
    }
  }
  __device__ __forceinline__ void wait_full(int i) const {
    mbar_wait(full0 + 8 * (i % kS), static_cast<uint32_t>((i / kS) & 1));
  }
  // Lane 0 of each warp, once the warp is done with tile i's slot.
  __device__ __forceinline__ void release(int i, int lane) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * (i % kS));
  }
};
#endif

template <typename T, int NT, bool kZeros>
__global__ void __launch_bounds__(kThreads, 2)
    w4_wgmma_tma_kernel(W4GemmLaunch p, int splits, const __grid_constant__ CUtensorMap xmap,
                        const __grid_constant__ CUtensorMap cmap) {
#ifdef PEREGRINE_WGMMA
  using C = TmaCfg<NT>;
  constexpr int kFrags = NT / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];
  const uint32_t raw = attn::smem_addr(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  float* xsum_all = reinterpret_cast<float*>(smem + (C::kRing > C::kPartBytes ? C::kRing : C::kPartBytes));
  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  float* xsum = xsum_all + wgi * 2 * NT;
  const int rank = blockIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * NT, n0 = static_cast<int64_t>(blockIdx.z) * kRows;
  const int k_tiles = static_cast<int>(p.k / kTK);
  const int kt0 = k_tiles * rank / splits, kt1 = k_tiles * (rank + 1) / splits, nk = kt1 - kt0;
  const int tpg = static_cast<int>(p.group_size / kTK);
  const TmaRing<kStages, C::kStageBytes, C::kXBytes> ring{sbase, attn::smem_addr(&bars[0]),
                                                          attn::smem_addr(&bars[kStages]), &xmap, &cmap, kt0,
                                                          static_cast<int>(m0), static_cast<int>(n0)};
  ring.init(tid);
  ring.prime(tid, nk);

  const int r0 = wgi * 64 + warp * 16 + g;
  const uint32_t perm = static_cast<uint32_t>(t | ((t + 4) << 8));
  const int64_t rows[2] = {n0 + r0, n0 + r0 + 8};
  float s_cur[2] = {0.0f, 0.0f}, z_cur[2] = {0.0f, 0.0f}, s_nxt[2] = {0.0f, 0.0f}, z_nxt[2] = {0.0f, 0.0f};
  auto load_group = [&](int64_t gidx) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const bool ok = rows[rr] < p.n && gidx < p.groups;
      s_nxt[rr] = ok ? __ldg(p.scales + rows[rr] * p.groups + gidx) : 0.0f;
      if constexpr (kZeros) z_nxt[rr] = ok ? __ldg(p.zeros + rows[rr] * p.groups + gidx) : 0.0f;
    }
  };
  int64_t gnext = kt0 / tpg;
  load_group(gnext);
  float acc[kFrags][4], total[kFrags][4];
#pragma unroll
  for (int j = 0; j < kFrags; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = total[j][e] = 0.0f;

  auto wg_barrier = [&] { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wgi) : "memory"); };

  for (int i = 0; i < nk; ++i) {
    const int tile = kt0 + i, slot = i % kStages;
    const bool first = i == 0 || tile % tpg == 0;
    const int parity = (tile / tpg) & 1;
    ring.refill(tid, i, nk);
    if (first) {
      if (i > 0) {
        if constexpr (kZeros) wg_barrier();  // the warpgroup's Σx of the finished group
        fold_group<NT, kZeros>(acc, total, xsum + (parity ^ 1) * NT, s_cur, z_cur, t);
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        s_cur[rr] = s_nxt[rr];
        z_cur[rr] = z_nxt[rr];
      }
      load_group(++gnext);
    }
    ring.wait_full(i);
    const unsigned char* st = smem + slot * C::kStageBytes;
    if constexpr (kZeros) tile_xsum<T, NT, 128>(st, xsum + parity * NT, first, tid % 128);
    uint32_t a[4][4];
    tile_fragments<T>(st + C::kXBytes, r0, perm, a);
    tile_mma<T, NT>(acc, a, wg::desc128(sbase + slot * C::kStageBytes, 16, 1024), first);
    ring.release(i, lane);
  }
  __syncthreads();  // every tile consumed (no copy in flight); the last group's Σx visible; the ring free
  if (nk > 0) fold_group<NT, kZeros>(acc, total, xsum + (((kt1 - 1) / tpg) & 1) * NT, s_cur, z_cur, t);
  finish_tile<NT>(p, smem, total, r0, t, rank, splits, m0, n0);
#endif
}

// ---- 64 < M <= 256: every token of the batch in one block, the scales in the fragments ----
// (The default on Hopper; PEREGRINE_W4_WG_WIDE=0 keeps the kernels above.) They convert each tile's codes once per 64
// tokens and keep a group's sums apart from the total (acc and total, 64 registers a 64-token tile), so larger M
// takes more blocks, each converting the same codes again. Here a block holds 128 weight rows × NTT 64-token tiles
// (all of M), one block an SM: each k16 step's fragment is made once and multiplies the NTT tiles of x in one
// m64n(64·NTT)k16 (the tiles lie one after another in the stage, so one descriptor spans them; one m64n64k16 a
// tile measured 1-3% slower, H100 2026-12-07), and the fragment
// carries the scale: s · (c − z) rounded once from f32 to x's type — the weight that dequantizing gives — so one f32
// accumulator runs over the whole K range (no fold, no Σx). Its own path: rows agree for every M in (64, 256] and
// differ from the kernels above (as the dequantize path's do).
template <int NTT>
struct WideCfg {
  static constexpr int kXBytes = NTT * 64 * 128;
  static constexpr int kCBytes = kRows * kTK / 2;
  static constexpr int kStageBytes = kXBytes + kCBytes;
  // As many stages as 200 KB hold (5 at 256 tokens, 7 at 192, 8 at 128): the producer refills a slot once every
  // warp has released it, a tile after its tile.
  static constexpr int kStages = 204800 / kStageBytes < 8 ? 204800 / kStageBytes : 8;
  static constexpr int kRing = kStages * kStageBytes;
  static constexpr int kPartBytes = NTT * 64 * (kRows + kPartPad) * 4;
  static constexpr int kSmem = 1024 + (kRing > kPartBytes ? kRing : kPartBytes);
  static_assert(kStageBytes % 1024 == 0, "swizzled tiles need 1024-byte aligned stages");
};

#ifdef PEREGRINE_WGMMA
// Byte t of w (w4 = w >> 4) as the pair (s · (c − z), s · (c′ − z)) in T, each rounded once from f32: the nibbles
// become bf16 128 + c exactly (as byte_pair), then f32 by a shift, then fma with kc = −(128 + z) · s.
template <typename T>
__device__ __forceinline__ uint32_t scaled_pair(uint32_t w, uint32_t w4, uint32_t perm, float s, float kc) {
  const uint32_t y = __byte_perm(w, w4, perm);
  uint32_t v;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(v) : "r"(y), "r"(0x000f000fu), "r"(0x43004300u));
  const float lo = fmaf(__uint_as_float(v << 16), s, kc), hi = fmaf(__uint_as_float(v & 0xffff0000u), s, kc);
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16>)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <typename T>
__device__ __forceinline__ void kstep_scaled(const uint32_t (&w)[2][8], int kk, uint32_t perm, const float (&s)[2],
                                             const float (&kc)[2], uint32_t (&a)[4]) {
  a[0] = scaled_pair<T>(w[0][2 * kk], w[0][2 * kk] >> 4, perm, s[0], kc[0]);
  a[1] = scaled_pair<T>(w[1][2 * kk], w[1][2 * kk] >> 4, perm, s[1], kc[1]);
  a[2] = scaled_pair<T>(w[0][2 * kk + 1], w[0][2 * kk + 1] >> 4, perm, s[0], kc[0]);
  a[3] = scaled_pair<T>(w[1][2 * kk + 1], w[1][2 * kk + 1] >> 4, perm, s[1], kc[1]);
}
#endif

#ifdef PEREGRINE_WGMMA
// A consumer warpgroup's share of one segment of the wide kernels' work: K tiles kta .. kta + nk − 1 (nk ≥ 1) of the
// row tile from weight row n0, found at ring positions j .. j + nk − 1, into acc (started afresh by the first
// multiply). The multiplies stay in flight while the next k step's fragment is made: four fragment sets, one per k
// step of a tile; each k step's multiply is one commit group, and the next k step's fragment is made once at most
// three groups are in flight (so the group that read that set last, the previous tile's, has retired); at a tile's
// end the next tile's words are read and its first fragment made the same way. No group ends inside the loop (no
// fold); a tile's slot is released at the next tile's end, once its multiplies have retired, the last one at the
// segment's end. The scale and kc = −(128 + z) · s of the thread's two rows are made a group after their loads.
template <typename T, int NTT, bool kZeros, typename Ring>
__device__ __forceinline__ void wide_segment(const W4GemmLaunch& p, const Ring& ring, const unsigned char* smem,
                                             uint32_t sbase, int64_t n0, int kta, int nk, int j, int r0,
                                             uint32_t perm, int lane, float (&acc)[NTT * 8][4]) {
  using C = WideCfg<NTT>;
  constexpr int kS = C::kStages;
  const int tpg = static_cast<int>(p.group_size / kTK);
  const int64_t rows[2] = {n0 + r0, n0 + r0 + 8};
  float s_cur[2], k_cur[2], s_nxt[2], k_nxt[2] = {8.0f, 8.0f};
  auto load_group = [&](int64_t gidx) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const bool ok = rows[rr] < p.n && gidx < p.groups;
      s_nxt[rr] = ok ? __ldg(p.scales + rows[rr] * p.groups + gidx) : 0.0f;
      if constexpr (kZeros) k_nxt[rr] = ok ? __ldg(p.zeros + rows[rr] * p.groups + gidx) : 8.0f;
    }
  };
  int64_t gnext = kta / tpg;
  int gpos = kta % tpg;  // tile kta + i's place in its group (no division in the loop)
  load_group(gnext);
  auto next_group = [&] {  // k_nxt holds the group's zero until here
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      s_cur[rr] = s_nxt[rr];
      k_cur[rr] = -(128.0f + k_nxt[rr]) * s_nxt[rr];
    }
    load_group(++gnext);
  };
  uint32_t w[2][8], a[4][4];
  next_group();
  ring.wait_full(j);
  tile_words(smem + (j % kS) * C::kStageBytes + C::kXBytes, r0, w);
  kstep_scaled<T>(w, 0, perm, s_cur, k_cur, a[0]);
  for (int i = 0; i < nk; ++i) {
    const int q = j + i;
    const uint64_t bdesc = wg::desc128(sbase + (q % kS) * C::kStageBytes, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wg::fence();
      wg::MmaK<T, NTT * 64>::rs_k(acc, a[kk], bdesc + ((kk * 32) >> 4), i == 0 && kk == 0 ? 0 : 1);
      wg::commit();
      if (kk < 3) {
        wg::wait<3>();
        kstep_scaled<T>(w, kk + 1, perm, s_cur, k_cur, a[kk + 1]);
      }
    }
    if (i + 1 < nk) {
      ring.wait_full(q + 1);
      tile_words(smem + ((q + 1) % kS) * C::kStageBytes + C::kXBytes, r0, w);
      if (++gpos == tpg) {
        gpos = 0;
        next_group();
      }
      wg::wait<3>();
      kstep_scaled<T>(w, 0, perm, s_cur, k_cur, a[0]);
    } else {
      wg::wait<0>();
    }
    wg::fence_operands(acc);
    if (i > 0) ring.release(q - 1, lane);
  }
  wg::wait<0>();  // (done in the last step; here too so ptxas sees it on the loop's exit edge)
  wg::fence_operands(acc);
  ring.release(j + nk - 1, lane);
}
#endif

// Two consumer warpgroups and a producer warpgroup whose first thread keeps the ring full (a whole warpgroup, so
// registers can move to the consumers: 168 a thread at launch, the producers down to 56 and the consumers up to 224,
// setmaxnreg). Thread 0 refilling the ring at each tile, as the TMA kernel does, measured 4-6% slower on the H100
// (2026-12-07: decode at batch 128 8,016 vs 8,496 tok/s, batch 256 10,168 vs 10,598): it waited there for the other
// warpgroup to release a slot, and its own warpgroup with it.
constexpr int kWideThreads = kThreads + 128;

template <typename T, int NTT, bool kZeros>
__global__ void __launch_bounds__(kWideThreads, 1)
    w4_wide_kernel(W4GemmLaunch p, int splits, const __grid_constant__ CUtensorMap xmap,
                   const __grid_constant__ CUtensorMap cmap) {
#ifdef PEREGRINE_WGMMA
  using C = WideCfg<NTT>;
  constexpr int kS = C::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 * kS];
  const uint32_t raw = attn::smem_addr(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int rank = blockIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.z) * kRows;
  const int k_tiles = static_cast<int>(p.k / kTK);
  const int kt0 = k_tiles * rank / splits, kt1 = k_tiles * (rank + 1) / splits, nk = kt1 - kt0;
  const TmaRing<kS, C::kStageBytes, C::kXBytes> ring{sbase, attn::smem_addr(&bars[0]), attn::smem_addr(&bars[kS]),
                                                     &xmap, &cmap, kt0, 0, static_cast<int>(n0)};
  ring.init(tid);
  constexpr int kPS = kRows + kPartPad;
  float* partial = reinterpret_cast<float*>(smem);
  if (tid >= kThreads) {
    // The producer warpgroup: its first thread keeps the ring full, kS - 1 tiles ahead of the slowest warp; then
    // the warpgroup takes part in the epilogue's barriers only.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    if (tid == kThreads) {
      ring.prime(0, nk);
      ring.produce(nk);
    }
    __syncwarp();
    __syncthreads();
    w4split::split_barriers(splits);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");

  const int r0 = wgi * 64 + warp * 16 + g;
  const uint32_t perm = static_cast<uint32_t>(t | ((t + 4) << 8));
  // Not initialized: the first multiply runs with scale-d 0 (zeros written here would sit on the loop's entry edge,
  // and ptxas then serializes every multiply, C7515); a split without tiles stores zeros instead.
  float acc[NTT * 8][4];
  if (nk > 0) wide_segment<T, NTT, kZeros>(p, ring, smem, sbase, n0, kt0, nk, 0, r0, perm, lane, acc);
  __syncthreads();  // every tile consumed; the ring free for the partial tile
#pragma unroll
  for (int f = 0; f < NTT * 8; ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      partial[(8 * f + 2 * t + (e & 1)) * kPS + r0 + 8 * (e / 2)] = nk > 0 ? acc[f][e] : 0.0f;
  w4split::add_splits_and_store<kRows, kPS, kThreads>(p, partial, NTT * 64, rank, splits, 0, n0);
#endif
}

// ---- 64 < M <= 256, stream-K: the wide kernel's tiles over every SM ----
// The wide kernel gives a block one row tile's K range (or 1/splits of it in a cluster), so N = 14336 (112 row tiles)
// leaves 20 of the H100's 132 SMs idle and a cluster split can only take whole waves. Here the (row tile, K tile)
// units of the whole product, row tile by row tile, are cut into `blocks` equal runs (blocks a function of N, K and
// the SM count: never of M), one block an SM; a block walks its run, and where a run starts or ends inside a row
// tile the tile's K range is shared: the block holding the tile's first K tile (it reaches it at the end of its run)
// adds the later segments' f32 partials — each left by the block after it at the start of its run in the
// workspace, announced by a flag — in K order to its own, then stores; a block's run holds at most one such later
// segment (its first), so the workspace is a partial a block. The same fragments, MMAs and producer warpgroup as the
// wide kernel; a segment's first multiply starts its accumulator afresh. Every block is resident at once (one an
// SM, at most the SM count), so a block waiting for its neighbour's partial never waits for a block not running.
template <typename T, int NTT, bool kZeros>
__global__ void __launch_bounds__(kWideThreads, 1)
    w4_streamk_kernel(W4GemmLaunch p, int blocks, const __grid_constant__ CUtensorMap xmap,
                      const __grid_constant__ CUtensorMap cmap) {
#ifdef PEREGRINE_WGMMA
  using C = WideCfg<NTT>;
  constexpr int kS = C::kStages;
  constexpr int kF = NTT * 8;  // accumulator fragments a thread
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 * kS];
  const uint32_t raw = attn::smem_addr(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int b = blockIdx.x;
  const int k_tiles = static_cast<int>(p.k / kTK);
  const int64_t units = (p.n + kRows - 1) / kRows * k_tiles;
  const int64_t u0 = units * b / blocks, u1 = units * (b + 1) / blocks;
  const int nu = static_cast<int>(u1 - u0);
  const TmaRing<kS, C::kStageBytes, C::kXBytes> ring{sbase, attn::smem_addr(&bars[0]), attn::smem_addr(&bars[kS]),
                                                     &xmap, &cmap, 0, 0, 0};
  ring.init(tid);
  if (tid >= kThreads) {
    // The producer warpgroup: its first thread issues the run's units in order, each once its slot is released.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    if (tid == kThreads) {
      for (int j = 0; j < nu; ++j) {
        if (j >= kS) mbar_wait(ring.empty0 + 8 * (j % kS), static_cast<uint32_t>((j / kS - 1) & 1));
        const int64_t u = u0 + j;
        ring.issue_at(j, static_cast<int>(u % k_tiles), static_cast<int>(u / k_tiles) * kRows);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
  const auto consumers_sync = [] { asm volatile("bar.sync 1, 256;\n" ::: "memory"); };

  const int r0 = wgi * 64 + warp * 16 + g;
  const uint32_t perm = static_cast<uint32_t>(t | ((t + 4) << 8));
  float acc[kF][4];
  int j = 0;  // the run's unit index: the ring position
  for (int64_t u = u0; u < u1;) {
    const int64_t tile = u / k_tiles, tile_end = (tile + 1) * k_tiles;
    const int kta = static_cast<int>(u - tile * k_tiles);
    const int nk = static_cast<int>((u1 < tile_end ? u1 : tile_end) - u);
    const int64_t n0 = tile * kRows;
    wide_segment<T, NTT, kZeros>(p, ring, smem, sbase, n0, kta, nk, j, r0, perm, lane, acc);

    // The segment's end. Fragment f, element e: token 8f + 2t + (e & 1), weight row r0 + 8 (e / 2). The workspace
    // holds a partial as [fragment][consumer thread] float4s.
    float4* ws = reinterpret_cast<float4*>(p.workspace);
    if (kta > 0) {  // a later segment of its tile: the partial, then the flag
#pragma unroll
      for (int f = 0; f < kF; ++f)
        __stcg(ws + (static_cast<int64_t>(b) * kF + f) * kThreads + tid,
               make_float4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]));
      consumers_sync();
      if (tid == 0) {
        __threadfence();
        asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p.flags + b), "r"(1) : "memory");
      }
    } else {
      // The tile's first segment: the later ones (the next blocks' first segments, in K order) added in.
      for (int ob = b + 1; ob < blocks && units * ob / blocks < tile_end; ++ob) {
        if (tid == 0) {
          int ready = 0;
          do {
            asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(ready) : "l"(p.flags + ob) : "memory");
          } while (ready == 0);
        }
        consumers_sync();
#pragma unroll
        for (int f = 0; f < kF; ++f) {
          const float4 v = __ldcg(ws + (static_cast<int64_t>(ob) * kF + f) * kThreads + tid);
          acc[f][0] += v.x;
          acc[f][1] += v.y;
          acc[f][2] += v.z;
          acc[f][3] += v.w;
        }
        consumers_sync();  // every thread has read it before the flag goes back to 0 for the next launch
        if (tid == 0) p.flags[ob] = 0;
      }
#pragma unroll
      for (int f = 0; f < kF; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t m = 8 * f + 2 * t + (e & 1), n = n0 + r0 + 8 * (e / 2);
          if (m >= p.m || n >= p.n) continue;
          float v = acc[f][e];
          if (p.bias) v += load_any(p.bias, p.bias_dtype, n);
          store_any(p.out, p.out_dtype, m * p.n + n, v);
        }
    }
    u += nk;
    j += nk;
  }
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A 2-D tiled map over a row-major [outer][inner] array (row pitch `pitch` bytes), box [box_outer][box_inner].
CUtensorMap tiled_map(CUtensorMapDataType type, const void* base, uint64_t inner, uint64_t outer, uint64_t pitch,
                      uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swizzle) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {pitch};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error(ErrorCode::kInternal, "w4_wgmma: cuTensorMapEncodeTiled failed");
  return map;
}

// The TMA kernels' maps: x as [M][K] in boxes of kTK × `tokens` rows (128-byte swizzle), the codes as [N][K / 2]
// in boxes of kTK / 2 × kRows (32-byte swizzle).
CUtensorMap x_tiles(const W4GemmLaunch& l, int tokens) {
  return tiled_map(l.dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, l.x,
                   static_cast<uint64_t>(l.k), static_cast<uint64_t>(l.m), static_cast<uint64_t>(l.k) * 2, kTK,
                   static_cast<uint32_t>(tokens), CU_TENSOR_MAP_SWIZZLE_128B);
}
CUtensorMap code_tiles(const W4GemmLaunch& l) {
  return tiled_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, l.codes, static_cast<uint64_t>(l.k / 2), static_cast<uint64_t>(l.n),
                   static_cast<uint64_t>(l.k / 2), kTK / 2, kRows, CU_TENSOR_MAP_SWIZZLE_32B);
}

template <typename T, int NT, bool kZeros>
void launch_nt_tma(const W4GemmLaunch& l, int splits, cudaStream_t stream) {
  using C = TmaCfg<NT>;
  auto kernel = w4_wgmma_tma_kernel<T, NT, kZeros>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
  PEREGRINE_CUDA_CHECK(attr);
  w4split::launch_clustered(kernel, l, splits, ceil_div(l.m, NT), ceil_div(l.n, kRows), kThreads, C::kSmem, stream,
                            x_tiles(l, NT), code_tiles(l));
}

// The wide kernel on (splits, 1, row tiles) in clusters of `splits`, or (streamk) its stream-K form on `splits`
// blocks, one an SM.
template <typename T, int NTT, bool kZeros, bool kStreamK>
void launch_wide(const W4GemmLaunch& l, int splits, cudaStream_t stream) {
  using C = WideCfg<NTT>;
  auto kernel = kStreamK ? w4_streamk_kernel<T, NTT, kZeros> : w4_wide_kernel<T, NTT, kZeros>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
  PEREGRINE_CUDA_CHECK(attr);
  const CUtensorMap xmap = x_tiles(l, NTT * 64), cmap = code_tiles(l);
  if constexpr (kStreamK) {
    kernel<<<splits, kWideThreads, C::kSmem, stream>>>(l, splits, xmap, cmap);
    PEREGRINE_CUDA_CHECK(cudaGetLastError());
  } else {
    w4split::launch_clustered(kernel, l, splits, 1, ceil_div(l.n, kRows), kWideThreads, C::kSmem, stream, xmap, cmap);
  }
}

template <typename T, int NT, bool kZeros>
void launch_nt(const W4GemmLaunch& l, int splits, cudaStream_t stream) {
  using C = WgCfg<NT>;
  auto kernel = w4_wgmma_kernel<T, NT, kZeros>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
  PEREGRINE_CUDA_CHECK(attr);
  w4split::launch_clustered(kernel, l, splits, ceil_div(l.m, NT), ceil_div(l.n, kRows), kThreads, C::kSmem, stream);
}


// Clusters of c blocks of `kernel` (`threads` threads, `smem` bytes of dynamic shared memory) that the device runs
// at once.
template <typename Kernel>
int cluster_capacity(Kernel kernel, int smem, int c, int threads = kThreads) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, int>, int> cache;
  int device = 0;
  PEREGRINE_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), smem, c, device);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  PEREGRINE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchAttribute at[1];
  cudaLaunchConfig_t cfg = w4split::cluster_config(at, c, 1, 1, threads, smem, nullptr);
  cfg.numAttrs = 1;  // a cluster of one too: the query takes the attribute at every size
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  cache.emplace(key, n);
  return n;
}

// The K split: w4_gemm's (a function of N, K and the SM count), unless its clusters do not all fit on the device
// at once — clusters of eight place on one GPC each, so an H100 runs 30 of them where 32 row tiles of q/o or down
// need 32, and the last two ran as a second wave (ncu: SMs active 57% of such a launch). Then the split whose
// waves × tiles a block is least (ties keep the smaller split), 1 to 8 blocks, any count. A function of (N, K, the
// device and this kernel), never of M: M's token tiles only add waves to every choice alike.
// PEREGRINE_W4_WG_FIT=0 keeps w4_gemm's split (comparisons). Measured on the H100: decode at batch 64 +9%
// (docs/BENCHMARKS.md, 2026-12-07).
template <typename Kernel>
int fitted_splits(const W4GemmLaunch& l, Kernel kernel, int smem) {
  const int base = w4_gemm_splits(l.n, l.k, l.sm_count);
  static const bool fit = [] {
    const char* v = std::getenv("PEREGRINE_W4_WG_FIT");
    return !(v && std::string_view(v) == "0");
  }();
  static const int forced = [] {  // PEREGRINE_W4_WG_SPLITS=N (1..8, at most K / 256): every layer's split (tests)
    const char* v = std::getenv("PEREGRINE_W4_WG_SPLITS");
    return v ? std::atoi(v) : 0;
  }();
  if (forced >= 1 && forced <= w4split::kMaxSplits && l.k / kTK >= forced) return forced;
  if (!fit) return base;
  const int64_t n_tiles = ceil_div(l.n, kRows), k_tiles = l.k / kTK;
  const auto cost = [&](int c) -> int64_t {
    const int cap = cluster_capacity(kernel, smem, c);
    if (cap <= 0) return INT64_MAX;
    return ceil_div(n_tiles, static_cast<int64_t>(cap)) * ceil_div(k_tiles, static_cast<int64_t>(c));
  };
  int best = base;
  int64_t best_cost = cost(base);
  for (int c = 1; c <= w4split::kMaxSplits; ++c) {
    if (c == base || (c > 1 && k_tiles / c < 4)) continue;
    const int64_t v = cost(c);
    if (v < best_cost || (v == best_cost && c < best)) {
      best = c;
      best_cost = v;
    }
  }
  return best;
}

// The wide kernel's split: one block an SM; the split (1-8, any count, each at least 4 K tiles) whose waves of
// clusters × K tiles a block is least, counting the clusters the device runs at once (clusters place within one
// GPC: 32 row tiles in clusters of four took two waves on the H100, so down at M 256 ran 1.75x gate/up's time for
// the same work). Ties keep the smaller split. Queried on the 256-token kernel whatever M is: a function of (N, K,
// the device), never of M. PEREGRINE_W4_WG_WIDE_FIT=0: the rule before (row tiles × splits within the SMs).
template <typename T, bool kZeros>
int wide_splits(const W4GemmLaunch& l) {
  const int64_t n_tiles = ceil_div(l.n, kRows), k_tiles = l.k / kTK;
  static const bool fit = [] {
    const char* v = std::getenv("PEREGRINE_W4_WG_WIDE_FIT");
    return !(v && std::string_view(v) == "0");
  }();
  if (!fit) {
    int s = 1;
    while (s < w4split::kMaxSplits && n_tiles * (s + 1) <= l.sm_count && k_tiles / (s + 1) >= 4) ++s;
    return s;
  }
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int c = 1; c <= w4split::kMaxSplits && (c == 1 || k_tiles / c >= 4); ++c) {
    const int cap = cluster_capacity(w4_wide_kernel<T, 4, kZeros>, WideCfg<4>::kSmem, c, kWideThreads);
    if (cap <= 0) continue;
    const int64_t v = ceil_div(n_tiles, static_cast<int64_t>(cap)) * ceil_div(k_tiles, static_cast<int64_t>(c));
    if (v < best_cost) {
      best = c;
      best_cost = v;
    }
  }
  return best;
}

// The stream-K kernel's block count for (N, K) on this device — one block an SM, each run at least one K tile — or
// 0 to keep the wide kernel's cluster split. Measured on the H100 (2026-12-07, 8B shape, M 128 / 256): down (32 row
// tiles × 224 K tiles; clusters of three or four) 51.9 -> 47.6 / 67.9 -> 66.6 µs on stream-K; gate/up (112 × 64, no
// split) 45.9 / 61.6 on the wide kernel against 45.7 / 64.9 — with every SM pulling x a K tile costs more (ncu:
// 13.1M SM cycles on stream-K against 9.8M on 112 SMs), which undoes the 20 SMs gained. So stream-K where the cluster
// split takes three or more blocks a tile and a run is at least 32 K tiles (at most a few partials a tile): down,
// not gate/up, q/o (runs of 16) or k/v. A function of (N, K, the device), never of M. PEREGRINE_W4_WG_STREAMK=0
// never takes it, =1 takes it wherever it can run (comparisons).
int streamk_env_mode() {
  const char* v = std::getenv("PEREGRINE_W4_WG_STREAMK");
  return v && std::string_view(v) == "0" ? 0 : v && std::string_view(v) == "1" ? 1 : 2;
}
std::atomic<int> g_streamk_mode{streamk_env_mode()};

int streamk_blocks(const W4GemmLaunch& l, int cluster_splits) {
  const int mode = g_streamk_mode.load(std::memory_order_relaxed);
  if (mode == 0 || !l.workspace || !l.flags || l.sm_count < 1) return 0;
  const int64_t k_tiles = l.k / kTK, units = ceil_div(l.n, kRows) * k_tiles;
  const int blocks = static_cast<int>(std::min<int64_t>(l.sm_count, units));
  if (mode == 1) return blocks;
  const int64_t run = ceil_div(units, static_cast<int64_t>(blocks));
  return cluster_splits >= 3 && run >= 32 ? blocks : 0;
}

}  // namespace

void w4_wgmma_streamk_mode(int mode) {
  g_streamk_mode.store(mode >= 0 && mode <= 2 ? mode : streamk_env_mode(), std::memory_order_relaxed);
}

// A partial a block of the stream-K kernel at its widest (four token tiles: 32 fragments a consumer thread).
size_t w4_wgmma_workspace_bytes(int sm_count) {
  return static_cast<size_t>(sm_count) * (4 * 8) * kThreads * sizeof(float4);
}

bool w4_wgmma_supports(const W4GemmLaunch& l) {
  return device_has_wgmma() && w4_gemm_supports(l);
}

void launch_w4_wgmma(const W4GemmLaunch& l, cudaStream_t stream) {
  if (l.m == 0 || l.n == 0) return;
  static const bool tma_on = [] {
    const char* v = std::getenv("PEREGRINE_W4_WG_TMA");
    return !(v && std::string_view(v) == "0");
  }();
  // 64 < M <= 256 on the wide kernel (PEREGRINE_W4_WG_WIDE=0: the 64-token kernels, for comparisons;
  // PEREGRINE_W4_WG_WIDE_FROM=m, 65..256: the wide kernel from M = m). Measured on the H100 (2026-12-07): decode
  // at batch 128 6,977 tok/s on the 64-token kernels (two token tiles), 7,903 on the wide one (bf16 8,874).
  static const bool wide_on = [] {
    const char* v = std::getenv("PEREGRINE_W4_WG_WIDE");
    return !(v && std::string_view(v) == "0");
  }();
  static const int64_t wide_from = [] {
    const char* v = std::getenv("PEREGRINE_W4_WG_WIDE_FROM");
    return v && *v ? std::clamp<int64_t>(std::atoll(v), 65, 256) : int64_t{65};
  }();
  const bool tma = tma_on && encode_tiled() && reinterpret_cast<uintptr_t>(l.x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(l.codes) % 16 == 0 && l.k % 16 == 0;
  const auto go = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto z = [&](auto zeros) {
      constexpr bool Z = decltype(zeros)::value;
      // The split is chosen on the 64-token TMA kernel whatever M is and whichever kernel runs (so it never
      // depends on M or on the pointers' alignment).
      if (tma && wide_on && l.m >= wide_from) {
        const int splits = wide_splits<T, Z>(l), blocks = streamk_blocks(l, splits);
        const auto wide = [&](auto streamk) {
          constexpr bool S = decltype(streamk)::value;
          const int n = S ? blocks : splits;
          if (l.m > 192)
            launch_wide<T, 4, Z, S>(l, n, stream);
          else if (l.m > 128)
            launch_wide<T, 3, Z, S>(l, n, stream);
          else
            launch_wide<T, 2, Z, S>(l, n, stream);
        };
        if (blocks > 0)
          wide(std::true_type{});
        else
          wide(std::false_type{});
        return;
      }
      const int splits = fitted_splits(l, w4_wgmma_tma_kernel<T, 64, Z>, TmaCfg<64>::kSmem);
      if (tma) {
        if (l.m <= 32)
          launch_nt_tma<T, 32, Z>(l, splits, stream);
        else
          launch_nt_tma<T, 64, Z>(l, splits, stream);
      } else {
        if (l.m <= 32)
          launch_nt<T, 32, Z>(l, splits, stream);
        else
          launch_nt<T, 64, Z>(l, splits, stream);
      }
    };
    if (l.zeros)
      z(std::true_type{});
    else
      z(std::false_type{});
  };
  if (l.dtype == DType::kBF16)
    go(TypeTag<bf16>{});
  else
    go(TypeTag<f16>{});
}

}  // namespace peregrine::cuda
