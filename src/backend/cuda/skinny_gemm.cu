#include "backend/cuda/skinny_gemm.cuh"

#include <algorithm>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kWarps = 8;         // K is split over a block's warps, the same way for every M
constexpr int kChunk = 64;        // K per warp pass: four m16n8k16 steps
constexpr int kRowsPerTile = 16;  // weight rows per block (mma's M)

__host__ __device__ inline int64_t segment_tiles(int64_t n) {
  return (n + kRowsPerTile - 1) / kRowsPerTile;
}

// The K positions each lane holds are permuted, identically in w (A) and x (B), so that a lane's share of a
// 64-wide chunk is 16 consecutive elements (two 16-byte loads per row): lane (g, t) holds physical k = 16t..16t+15,
// and mma step i reads its words 2i and 2i+1 as the fragment's k = {2t, 2t+1} and {2t+8, 2t+9}. A sum over K does
// not care which k is called which, as long as both operands agree.
__device__ __forceinline__ uint32_t word(const uint4 (&v)[2], int i) {
  const uint4& h = v[i / 4];
  switch (i % 4) {
    case 0:
      return h.x;
    case 1:
      return h.y;
    case 2:
      return h.z;
    default:
      return h.w;
  }
}

// NT n-tiles of 8 tokens; U chunks loaded ahead per warp; MINB blocks per SM (the register budget). U and MINB
// change how the loads are grouped, never the order of any output's sum.
template <typename T, int NT, int U, int MINB>
__global__ void __launch_bounds__(kWarps * 32, MINB) skinny_gemm_kernel(SkinnyGemmLaunch p) {
  // This block's segment and 16-row tile.
  int64_t tile = blockIdx.x;
  const void* w_any = nullptr;
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  void* out = nullptr;
  int64_t n = 0;
  bool found = false;
#pragma unroll
  for (int s = 0; s < kSkinnyMaxSegments; ++s) {
    if (!found && s < p.num_segments) {
      const int64_t tiles = segment_tiles(p.seg[s].n);
      if (tile < tiles) {
        found = true;
        w_any = p.seg[s].w;
        bias = p.seg[s].bias;
        bias_dtype = p.seg[s].bias_dtype;
        out = p.seg[s].out;
        n = p.seg[s].n;
      } else {
        tile -= tiles;
      }
    }
  }
  if (!found) return;  // whole block: uniform

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k = p.k, n0 = tile * kRowsPerTile;
  const T* w = static_cast<const T*>(w_any);
  const T* x = static_cast<const T*>(p.x);
  const T* wa = w + (n0 + g < n ? n0 + g : n - 1) * k;  // rows past n read the last row; never stored
  const T* wb = w + (n0 + g + 8 < n ? n0 + g + 8 : n - 1) * k;
  const T* x0 = x + g * k;  // n-tile j's row for this lane: x0 + 8j * k, read only when 8j + g < M

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

  const int64_t chunks = (k + kChunk - 1) / kChunk;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t c0 = warp; c0 < chunks; c0 += int64_t{kWarps} * U) {
    uint4 a[U][2], b8[U][2], bx[U][NT][2];  // rows g and g+8 of w; x rows of each n-tile
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + int64_t{u} * kWarps;
      const int64_t kk = c * kChunk + 16 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool valid = c < chunks && kk + 8 * h < k;  // K % 8 == 0: a 16-byte piece is all in or all out
        a[u][h] = valid ? __ldcs(reinterpret_cast<const uint4*>(wa + kk + 8 * h)) : zero;
        b8[u][h] = valid ? __ldcs(reinterpret_cast<const uint4*>(wb + kk + 8 * h)) : zero;
#pragma unroll
        for (int j = 0; j < NT; ++j)
          bx[u][j][h] = valid && j * 8 + g < p.m
                            ? __ldg(reinterpret_cast<const uint4*>(x0 + int64_t{j} * 8 * k + kk + 8 * h))
                            : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + int64_t{u} * kWarps >= chunks) break;  // warp-uniform; depends on K alone
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t frag[4] = {word(a[u], 2 * i), word(b8[u], 2 * i), word(a[u], 2 * i + 1), word(b8[u], 2 * i + 1)};
#pragma unroll
        for (int j = 0; j < NT; ++j) attn::mma16816<T>(acc[j], frag, word(bx[u][j], 2 * i), word(bx[u][j], 2 * i + 1));
      }
    }
  }

  // The warps' partials meet in shared memory and are added in warp order.
  __shared__ float4 partial[kWarps][NT][32];
#pragma unroll
  for (int j = 0; j < NT; ++j) partial[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  __syncthreads();
  constexpr int kOutputs = kRowsPerTile * 8 * NT;
  for (int o = threadIdx.x; o < kOutputs; o += kWarps * 32) {
    const int r = o % kRowsPerTile, col = o / kRowsPerTile;  // consecutive threads: consecutive output columns
    const int j = col / 8, c = col % 8;
    const int src_lane = (r % 8) * 4 + c / 2, e = (r / 8) * 2 + c % 2;
    const float* part = reinterpret_cast<const float*>(&partial[0][j][src_lane]) + e;
    float s = part[0];
#pragma unroll
    for (int ww = 1; ww < kWarps; ++ww) s += part[ww * NT * 32 * 4];
    const int64_t row = n0 + r;
    if (col < p.m && row < n) {
      if (bias) s += load_any(bias, bias_dtype, row);
      store_any(out, p.out_dtype, col * n + row, s);
    }
  }
}

template <typename T>
void launch_typed(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  int64_t tiles = 0;
  for (int s = 0; s < l.num_segments; ++s) tiles += segment_tiles(l.seg[s].n);
  const dim3 grid(static_cast<unsigned>(tiles)), block(kWarps * 32);
  static_assert(kSkinnyMaxM <= 16, "one or two n-tiles of 8 tokens");
  if (l.m <= 8) {
    // Two blocks per SM with four chunks ahead, or three with two ahead when that fills the last wave of blocks
    // much better (q/k/v's 384 tiles on 132 SMs: 73% of 2 x 132 slots in two waves, 97% of 3 x 132 in one).
    auto wave_fill = [&](int per_sm) {
      const int64_t slots = int64_t{std::max(1, l.sm_count)} * per_sm;
      return static_cast<double>(tiles) / static_cast<double>(ceil_div(tiles, slots) * slots);
    };
    if (wave_fill(3) > wave_fill(2) + 0.05) {
      skinny_gemm_kernel<T, 1, 2, 3><<<grid, block, 0, stream>>>(l);
    } else {
      skinny_gemm_kernel<T, 1, 4, 2><<<grid, block, 0, stream>>>(l);
    }
  } else {
    skinny_gemm_kernel<T, 2, 2, 2><<<grid, block, 0, stream>>>(l);
  }
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool skinny_gemm_supports(const SkinnyGemmLaunch& l) {
  if (l.dtype != DType::kBF16 && l.dtype != DType::kF16) return false;
  if (l.out_dtype != DType::kBF16 && l.out_dtype != DType::kF16 && l.out_dtype != DType::kF32) return false;
  if (l.m < 1 || l.m > kSkinnyMaxM || l.k < 8 || l.k % 8 != 0) return false;
  if (l.num_segments < 1 || l.num_segments > kSkinnyMaxSegments || !aligned16(l.x)) return false;
  for (int s = 0; s < l.num_segments; ++s)
    if (l.seg[s].n < 1 || !aligned16(l.seg[s].w)) return false;
  return true;
}

void launch_skinny_gemm(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  if (l.dtype == DType::kBF16) return launch_typed<bf16>(l, stream);
  launch_typed<f16>(l, stream);
}

}  // namespace peregrine::cuda
