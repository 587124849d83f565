// The K split both W4A16 GEMMs share (w4_gemm.cu on mma.sync, w4_wgmma.cu on warpgroup MMA): the splits of an
// output tile are the blocks of one thread-block cluster (grid x), each leaving its f32 partial tile in its own
// shared memory; the partials meet in distributed shared memory and are added in split order, so a row's bits depend
// on the split count (a function of N, K and the SM count: w4_gemm_splits) and never on M.
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/w4_gemm.cuh"

namespace peregrine::cuda::w4split {

constexpr int kMaxSplits = 8;  // portable cluster size

// Called by every thread of every block of the cluster once its partial tile [tile_rows][kCols] (row stride
// kStride floats; rows are tokens m0 + r, columns outputs n0 + c) is in shared memory at `partial`: block `rank`
// adds the splits' partials of rows [rank * tile_rows / splits, (rank + 1) * tile_rows / splits) in split order, adds the bias and stores
// the rows inside M and N. No block leaves while another may still read its shared memory.
template <int kCols, int kStride, int kThreads>
__device__ __forceinline__ void add_splits_and_store(const W4GemmLaunch& p, float* partial, int tile_rows, int rank,
                                                     int splits, int64_t m0, int64_t n0) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1)
    cluster.sync();
  else
    __syncthreads();
  const int r0 = rank * tile_rows / splits, rows = (rank + 1) * tile_rows / splits - r0;
  for (int idx = threadIdx.x; idx < rows * (kCols / 4); idx += kThreads) {
    const int r = r0 + idx / (kCols / 4), c = 4 * (idx % (kCols / 4));
    const int64_t m = m0 + r;
    if (m >= p.m) continue;
    float4 sum = *reinterpret_cast<const float4*>(partial + r * kStride + c);
    if (splits > 1) {  // every split's partial loaded first (remote latency once), then added in split order
      float4 o[kMaxSplits];
#pragma unroll
      for (int q = 0; q < kMaxSplits; ++q)
        if (q < splits) o[q] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(partial, q) + r * kStride + c);
      sum = o[0];
#pragma unroll
      for (int q = 1; q < kMaxSplits; ++q)
        if (q < splits) {
          sum.x += o[q].x;
          sum.y += o[q].y;
          sum.z += o[q].z;
          sum.w += o[q].w;
        }
    }
    const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t n = n0 + c + e;
      if (n >= p.n) break;
      float val = vals[e];
      if (p.bias) val += load_any(p.bias, p.bias_dtype, n);
      store_any(p.out, p.out_dtype, m * p.n + n, val);
    }
  }
  if (splits > 1) cluster.sync();
}

// The barriers of add_splits_and_store alone, for threads of the block that hold no part of the partial tile.
__device__ __forceinline__ void split_barriers(int splits) {
  namespace cg = cooperative_groups;
  if (splits > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    cluster.sync();
  } else {
    __syncthreads();
  }
}

// A launch of `threads`-thread blocks with `smem` bytes of dynamic shared memory on the grid (splits, m_tiles,
// n_tiles), clusters of `splits` blocks along x (none when splits is 1); `at` holds the cluster attribute.
inline cudaLaunchConfig_t cluster_config(cudaLaunchAttribute (&at)[1], int splits, int64_t m_tiles, int64_t n_tiles,
                                         int threads, int smem, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(splits), static_cast<unsigned>(m_tiles), static_cast<unsigned>(n_tiles));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = static_cast<unsigned>(splits);
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = splits > 1 ? 1 : 0;
  return cfg;
}

// kernel(l, splits, extra...) on the grid (splits, m_tiles, n_tiles), the splits of a tile one cluster. The caller
// has set the kernel's dynamic shared memory limit (once per kernel).
template <typename Kernel, typename... Extra>
void launch_clustered(Kernel kernel, const W4GemmLaunch& l, int splits, int64_t m_tiles, int64_t n_tiles, int threads,
                      int smem, cudaStream_t stream, Extra... extra) {
  cudaLaunchAttribute at[1];
  const cudaLaunchConfig_t cfg = cluster_config(at, splits, m_tiles, n_tiles, threads, smem, stream);
  PEREGRINE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, l, splits, extra...));
}

}  // namespace peregrine::cuda::w4split
