// W4A16 GEMM for M > 16 on the tensor cores (ops.h WeightQuant: kI4 codes [N, K / 2] as stored, low nibble = even
// k; f32 group scales [N, groups]; optional f32 zero points), bf16 or f16 activations, f32 accumulation.
//
// The codes are read once per M tile from global memory (cp.async into a multi-stage shared-memory ring beside
// the x tile) and become exact values in registers: a nibble pair OR-ed under the exponent of 128 (bf16) / 1024
// (f16) minus 136 / 1032 gives code - 8 exactly, which goes to mma.sync m16n8k16 as the B operand (x is A). Each
// 64-wide K tile lies in one group (group_size a multiple of 64), so the tile's f32 sums P = Σ (c - 8) x are
// scaled once: acc += s · (P + (8 - z) · Σx), with Σx from one more mma against all-ones B (only with zeros).
// The K order of a row is fixed by K and by the split count, which depends on (N, K) and the SM count alone;
// the splits of an output tile are one thread-block cluster and meet in distributed shared memory, added in
// split order. So a row's bits never depend on M (nor on which M tile size was picked for M).
// Not taken (the caller keeps dequantize + cuBLASLt): act-order perm / g_idx, groups not a multiple of 64, K not a
// multiple of 64, other code types.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct W4GemmLaunch {
  const void* x;          // [M, K] bf16 or f16
  DType dtype;
  const uint8_t* codes;   // [N, K / 2] int4
  const float* scales;    // [N, groups]
  const float* zeros;     // [N, groups] or null (midpoint 8)
  const void* bias;       // [N] or null
  DType bias_dtype;
  void* out;              // [M, N] in x's dtype or f32
  DType out_dtype;
  int64_t m, n, k, groups, group_size;
  int sm_count;           // picks the split count (with N and K; never M)
  // Hopper's stream-K kernel (w4_wgmma.cu) where both are set: w4_wgmma_workspace_bytes(sm_count) of scratch, and
  // sm_count ints zeroed once (each launch leaves them zero); without them it keeps the cluster split.
  float* workspace = nullptr;
  int* flags = nullptr;
};

// The backend's M range for this kernel: M > 16 (the skinny kernel below) up to this, i.e. decode and verify
// batches; larger M (prefill chunks) dequantizes into a scratch for cuBLASLt, whose wgmma GEMM beats mma.sync
// once the dequantization is amortized (per 8B layer on the H200: this kernel 384 us at M = 128 against 499 us,
// 698 against 547 at M = 256, 1,223 against 690 at M = 512; docs/BENCHMARKS.md).
constexpr int64_t kW4GemmMaxM = 256;

bool w4_gemm_supports(const W4GemmLaunch& l);
// The K split of weight shape [n, k] on a device of sm_count SMs (1, 2, 4 or 8; the cluster size).
int w4_gemm_splits(int64_t n, int64_t k, int sm_count);
void launch_w4_gemm(const W4GemmLaunch& l, cudaStream_t stream);

// The same product on Hopper's warpgroup MMA (w4_wgmma.cu): the codes as wgmma's A operand in registers, x as its
// B operand in shared memory, 128 weight rows x 32 or 64 tokens a block, the same K split. Its rows differ from
// launch_w4_gemm's (another MMA) and never depend on M. Supported where w4_gemm is, on devices that run sm_90a.
bool w4_wgmma_supports(const W4GemmLaunch& l);
size_t w4_wgmma_workspace_bytes(int sm_count);
// The stream-K kernel's choice for later launches: 0 never, 1 wherever it can run, 2 by the cost rule, -1 back to
// PEREGRINE_W4_WG_STREAMK (0 / 1; unset: the rule). Tests use it to run their shapes on it.
void w4_wgmma_streamk_mode(int mode);
void launch_w4_wgmma(const W4GemmLaunch& l, cudaStream_t stream);

}  // namespace peregrine::cuda
