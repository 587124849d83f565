// W4A16 tensor-core GEMM for M > 16 (see w4_gemm.cuh).
//
// Block: 8 warps, a BM x 128 output tile (BM = 32, 64 or 128 rows of x, picked by M; 128 weight rows), K in
// 64-wide tiles through a cp.async ring (x: BM rows x 128 bytes, codes: 128 rows x 32 bytes per stage). Warps are
// 2 (M) x 4 (N), each owning (BM / 2) x 32 outputs: MT m16 tiles x 4 n8 tiles.
//
// Fragment order: lane (g, t) of a warp takes physical k = 16t .. 16t + 15 of a K tile, i.e. 8 bytes of a code row
// (one 8-byte shared load: words u.x = k 16t..16t+7, u.y = 16t+8..16t+15) and two 16-byte chunks of an x row.
// A code word becomes four b16x2 pairs (nibbles s and s + 4, s = 0..3) in two instructions each; mma step
// (h, s2) of the tile takes pairs 2 s2 and 2 s2 + 1 of word h as its B registers, and x is paired the same way
// (byte permutes of the 16-byte chunk 2t + h). A sum over K does not care which k the mma calls which, as long as
// both operands agree, and the pairing is fixed by K alone.
#include "backend/cuda/w4_gemm.cuh"

#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/w4_split.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kBN = 128;      // weight rows per block
constexpr int kBK = 64;       // K per tile (a group holds whole tiles)
constexpr int kThreads = 256;
constexpr int kPartPad = 8;   // floats of padding per row of the f32 partial tile

template <int MT> struct W4Cfg {
  static constexpr int kBM = 32 * MT;
  static constexpr int kStages = MT == 1 ? 10 : 8;
  static constexpr int kXBytes = kBM * kBK * 2;
  static constexpr int kCBytes = kBN * kBK / 2;
  static constexpr int kSBytes = kBN * 4 * 2;  // the tile's group scales, then zeros, of the 128 rows
  static constexpr int kStageBytes = kXBytes + kCBytes + kSBytes;
  static constexpr int kPartBytes = kBM * (kBN + kPartPad) * 4;
  static constexpr int kSmem = kStages * kStageBytes > kPartBytes ? kStages * kStageBytes : kPartBytes;
  static constexpr int kMinBlocks = MT == 4 ? 1 : 2;
};

template <typename T> struct Magic;
template <> struct Magic<bf16> {
  static constexpr uint32_t kBias = 0x43004300u;  // 128 in each half
  static constexpr uint32_t kOne = 0x3f803f80u;
};
template <> struct Magic<f16> {
  static constexpr uint32_t kBias = 0x64006400u;  // 1024 in each half
  static constexpr uint32_t kOne = 0x3c003c00u;
};

// Nibbles 0 and 4 of w (bits 0..3 and 16..19) as the b16x2 pair (c0 - 8, c4 - 8), exact.
template <typename T> __device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  uint32_t v, r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(v) : "r"(w), "r"(0x000f000fu), "r"(Magic<T>::kBias));
  if constexpr (std::is_same_v<T, bf16>) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(v), "r"(Magic<bf16>::kOne), "r"(0xc308c308u));  // -136
  } else {
    asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(0x64086408u));  // 1032
  }
  return r;
}

// x elements (e_s, e_{s+4}) of an 8-element chunk as one b16x2 word, the pairing code_pair gives the codes.
__device__ __forceinline__ uint32_t x_pair(const uint4& v, int s) {
  return __byte_perm(s < 2 ? v.x : v.y, s < 2 ? v.z : v.w, s % 2 ? 0x7632 : 0x5410);
}

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// grid: (splits, M tiles, N tiles); the splits of one output tile are one cluster (when splits > 1).
template <typename T, int MT, bool kZeros>
__global__ void __launch_bounds__(kThreads, W4Cfg<MT>::kMinBlocks) w4_gemm_kernel(W4GemmLaunch p, int splits) {
  using C = W4Cfg<MT>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int wm = warp / 4, wn = warp % 4;
  const int rank = blockIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * C::kBM, n0 = static_cast<int64_t>(blockIdx.z) * kBN;
  const int k_tiles = static_cast<int>(p.k / kBK);
  const int kt0 = k_tiles * rank / splits, kt1 = k_tiles * (rank + 1) / splits, nk = kt1 - kt0;
  const uint32_t sbase = attn::smem_addr(smem);

  // Each thread's share of a stage, worked out once: its global sources (advanced one tile per load) and shared
  // destinations. x: BM rows x 8 chunks (chunk c of row r at c ^ (r & 1)); codes: 128 rows x 2 chunks; the
  // tile's group scale (threads 0..127) or zero (128..255) of each row, so their latency hides in the ring as the
  // codes' does. Rows past M or N are zero-filled (scale 0).
  // (Offsets in 32 bits: w4_gemm_supports bounds M * K and N * K / 2.)
  const T* x = static_cast<const T*>(p.x);
  uint32_t xoff[MT];
  bool xok[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    const int idx = tid + kThreads * j, row = idx / 8, c = idx % 8;
    xok[j] = m0 + row < p.m;
    xoff[j] = xok[j] ? static_cast<uint32_t>((m0 + row) * p.k + static_cast<int64_t>(kt0) * kBK + c * 8) : 0u;
  }
  const int crow = tid / 2;
  const bool cok = n0 + crow < p.n;
  uint32_t coff = cok ? static_cast<uint32_t>((n0 + crow) * (p.k / 2) + static_cast<int64_t>(kt0) * (kBK / 2) + (tid % 2) * 16) : 0u;
  const uint32_t cdst = C::kXBytes + tid * 16;
  const int srow = tid % kBN;
  const bool sok = n0 + srow < p.n && (tid < kBN || p.zeros);
  const float* sg = (tid < kBN ? p.scales : p.zeros) + (sok ? (n0 + srow) * p.groups : 0);
  const uint32_t sdst = C::kXBytes + C::kCBytes + tid * 4;
  const int tiles_per_group = static_cast<int>(p.group_size / kBK);
  int gi = kt0 / tiles_per_group, gcount = kt0 % tiles_per_group;  // the next loaded tile's group, tile within it

  auto load_stage = [&](int slot) {
    const uint32_t base = sbase + slot * C::kStageBytes;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int row = (tid + kThreads * j) / 8, c = tid % 8;  // (kThreads is a multiple of 8: c is tid's)
      attn::cp_async16(base + row * 128 + ((c ^ (row & 1)) * 16), x + xoff[j], xok[j]);
      if (xok[j]) xoff[j] += kBK;
    }
    attn::cp_async16(base + cdst, p.codes + coff, cok);
    if (cok) coff += kBK / 2;
    if (tid < kBN || p.zeros) attn::cp_async4(base + sdst, sg + (sok ? gi : 0), sok);
    if (++gcount == tiles_per_group) {
      gcount = 0;
      ++gi;
    }
  };

  float acc[MT][4][4];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
  const uint32_t kOne = Magic<T>::kOne;

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < nk) load_stage(s);
    attn::cp_async_commit();
  }
  int load_slot = C::kStages - 1, slot = 0;
  for (int i = 0; i < nk; ++i) {
    attn::cp_async_wait<C::kStages - 2>();
    __syncthreads();
    if (i + C::kStages - 1 < nk) load_stage(load_slot);
    attn::cp_async_commit();
    load_slot = load_slot == C::kStages - 1 ? 0 : load_slot + 1;
    const unsigned char* xs = smem + slot * C::kStageBytes;
    slot = slot == C::kStages - 1 ? 0 : slot + 1;
    const unsigned char* cs = xs + C::kXBytes;
    // The tile's B fragments (codes - 8) for the warp's 4 n8 tiles and 4 k16 steps, made once and used by every
    // m16 tile; then one m16 tile at a time: its sums over the K tile, folded into acc with the group's scale.
    uint32_t b[4][4][2];
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      const uint2 u = *reinterpret_cast<const uint2*>(cs + (wn * 32 + nj * 8 + g) * 32 + 8 * t);
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        const uint32_t w = st < 2 ? u.x : u.y;
        b[st][nj][0] = code_pair<T>(w >> (8 * (st % 2)));
        b[st][nj][1] = code_pair<T>(w >> (8 * (st % 2) + 4));
      }
    }
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      float part[4][4], xsum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int nj = 0; nj < 4; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[nj][e] = 0.0f;
      const int r0 = wm * 16 * MT + 16 * mi + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int off = ((2 * t + h) ^ (r0 & 1)) * 16;
        const uint4 v0 = *reinterpret_cast<const uint4*>(xs + r0 * 128 + off);
        const uint4 v1 = *reinterpret_cast<const uint4*>(xs + (r0 + 8) * 128 + off);
#pragma unroll
        for (int s2 = 0; s2 < 2; ++s2) {
          const uint32_t a[4] = {x_pair(v0, 2 * s2), x_pair(v1, 2 * s2), x_pair(v0, 2 * s2 + 1), x_pair(v1, 2 * s2 + 1)};
#pragma unroll
          for (int nj = 0; nj < 4; ++nj) mma<T>(part[nj], a, b[2 * h + s2][nj][0], b[2 * h + s2][nj][1]);
          if constexpr (kZeros) mma<T>(xsum, a, kOne, kOne);
        }
      }
      // acc += s * (sum (c - 8) x + (8 - z) sum x), with the tile's group scale and zero of the lane's columns
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const int col = wn * 32 + nj * 8 + 2 * t;
        const float2 sv = *reinterpret_cast<const float2*>(cs + C::kCBytes + col * 4);
        float2 zv = make_float2(0.0f, 0.0f);
        if constexpr (kZeros) {
          zv = *reinterpret_cast<const float2*>(cs + C::kCBytes + kBN * 4 + col * 4);
          zv = make_float2(8.0f - zv.x, 8.0f - zv.y);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float pv = part[nj][e];
          if constexpr (kZeros) pv = fmaf(e & 1 ? zv.y : zv.x, xsum[e], pv);
          acc[mi][nj][e] = fmaf(e & 1 ? sv.y : sv.x, pv, acc[mi][nj][e]);
        }
      }
    }
  }
  attn::cp_async_wait<0>();
  __syncthreads();

  // The block's f32 partial tile into its shared memory (the ring is free now), then the cluster's partials added
  // in split order: block `rank` finishes rows [rank, rank + 1) * BM / splits of the tile.
  constexpr int kPS = kBN + kPartPad;
  float* partial = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      const int r = wm * 16 * MT + 16 * mi + g, c = wn * 32 + nj * 8 + 2 * t;
      *reinterpret_cast<float2*>(partial + r * kPS + c) = make_float2(acc[mi][nj][0], acc[mi][nj][1]);
      *reinterpret_cast<float2*>(partial + (r + 8) * kPS + c) = make_float2(acc[mi][nj][2], acc[mi][nj][3]);
    }
  w4split::add_splits_and_store<kBN, kPS, kThreads>(p, partial, C::kBM, rank, splits, m0, n0);
}

// PEREGRINE_W4_MMA_BLOCKS: the block count the split rule aims at (default 2 per SM), for tuning.
int64_t split_target(int sm_count) {
  static const int64_t env = [] {
    const char* v = std::getenv("PEREGRINE_W4_MMA_BLOCKS");
    return v ? std::atoll(v) : 0LL;
  }();
  return env > 0 ? env : 2LL * sm_count;
}

template <typename T, int MT, bool kZeros>
void launch_mt(const W4GemmLaunch& l, int splits, cudaStream_t stream) {
  using C = W4Cfg<MT>;
  auto kernel = w4_gemm_kernel<T, MT, kZeros>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
  PEREGRINE_CUDA_CHECK(attr);
  w4split::launch_clustered(kernel, l, splits, ceil_div(l.m, C::kBM), ceil_div(l.n, kBN), kThreads, C::kSmem, stream);
}

}  // namespace

bool w4_gemm_supports(const W4GemmLaunch& l) {
  return (l.dtype == DType::kBF16 || l.dtype == DType::kF16) && (l.out_dtype == l.dtype || l.out_dtype == DType::kF32) &&
         l.m >= 1 && l.n >= 1 && l.k >= kBK && l.k % kBK == 0 && l.group_size >= kBK && l.group_size % kBK == 0 &&
         l.groups * l.group_size == l.k && l.scales && aligned16(l.x) && aligned16(l.codes) &&
         ceil_div(l.m, 32) <= 65535 && ceil_div(l.n, kBN) <= 65535 && l.m * l.k < (int64_t{1} << 31) &&
         l.n * l.k / 2 < (int64_t{1} << 31);
}

int w4_gemm_splits(int64_t n, int64_t k, int sm_count) {
  const int64_t n_tiles = ceil_div(n, kBN), k_tiles = k / kBK, target = split_target(sm_count);
  int s = 1;
  while (s < w4split::kMaxSplits && n_tiles * s * 2 <= target && k_tiles / (s * 2) >= 4) s *= 2;
  return s;
}

void launch_w4_gemm(const W4GemmLaunch& l, cudaStream_t stream) {
  if (l.m == 0 || l.n == 0) return;
  // PEREGRINE_W4_MMA_BM: the largest M tile (32, 64 or 128; tuning). Rows do not depend on it.
  static const int64_t max_bm = [] {
    const char* v = std::getenv("PEREGRINE_W4_MMA_BM");
    return v ? std::atoll(v) : 128LL;
  }();
  const int splits = w4_gemm_splits(l.n, l.k, l.sm_count);
  const auto go = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto z = [&](auto mt) {
      if (l.zeros) launch_mt<T, decltype(mt)::value, true>(l, splits, stream);
      else launch_mt<T, decltype(mt)::value, false>(l, splits, stream);
    };
    if (l.m <= 32 || max_bm <= 32) z(std::integral_constant<int, 1>{});
    else if (l.m <= 64 || max_bm <= 64) z(std::integral_constant<int, 2>{});
    else z(std::integral_constant<int, 4>{});
  };
  if (l.dtype == DType::kBF16) go(TypeTag<bf16>{});
  else go(TypeTag<f16>{});
}

}  // namespace peregrine::cuda
