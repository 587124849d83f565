// FP8 W8A8 GEMM through cuBLASLt on Hopper: out[M, N] = (x_q[M, K] * x_scale[M]) . (w[N, K] * w_scale[N])^T with
// e4m3 inputs, fast accumulation (as vLLM's and TensorRT-LLM's FP8 GEMMs run; f32 accumulation with
// PEREGRINE_FP8_FAST_ACCUM=0: fp8_fast_accum()) and the per-token and per-channel scales applied by cuBLASLt
// itself (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on both operands). D[N, M] column-major = op(W)[N, K] * X[K, M]
// (the TN layout FP8 needs). Plans are cached per shape and output dtype; run() returns false, having enqueued
// nothing, when cuBLASLt has no algorithm (older libraries, misaligned pointers), so the caller falls back.
// The same class runs int8 W8A8's GEMM (run_int8): s8 x s8 with exact int32 accumulation into an int32 [M, N], the
// scales applied after (w8_matmul.cuh's launch_w8_int32_epilogue, the warp kernel's arithmetic).
// And FP8 in 128 x 128 weight blocks (DeepSeek / Qwen3-FP8 checkpoints) with x quantized per token and 128 k
// (run_blocks): CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F on W, VEC128_32F on x, each 128-deep partial sum scaled
// by cuBLASLt as it is accumulated in f32 (Hopper; no fast accumulation). The scale tensors' layouts are
// Fp8BlockLayout's (tests/cuda/w8_matmul_test.cpp's Fp8BlockLayoutProbe checks them against a host reference).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace peregrine::cuda {

struct Fp8GemmLaunch {
  const uint8_t* w;       // [N, K] e4m3
  const uint8_t* x;       // [M, K] e4m3 (quantized activations)
  const float* w_scale;   // [N]
  const float* x_scale;   // [M]
  void* out;              // [M, N]
  DType out_dtype;        // bf16, f16 or f32
  int64_t m, n, k;
};

// Where cuBLASLt's block-scaled FP8 GEMM reads its scales. x's (M rows, a multiple of 4; KB = K / 128 blocks a
// row): element (row m, block b) at x_scale[b * M + m] when x_m_major (token index contiguous), else
// x_scale[m * KB + b]; W's (NB = ceil(N / 128) block rows, KB block columns): (nb, kb) at w_scale[nb * w_ld + kb]
// when w_k_major (as checkpoints store weight_scale_inv), else w_scale[kb * w_ld + nb], w_ld the contiguous count,
// rounded up to a multiple of 4 when w_pad4 is set.
struct Fp8BlockLayout {
  bool x_m_major = true, w_k_major = true, w_pad4 = true;
  int64_t x_ld(int64_t m, int64_t kb) const { return x_m_major ? m : kb; }
  int64_t w_ld(int64_t nb, int64_t kb) const { return pad(w_k_major ? kb : nb, w_pad4); }
  int64_t x_floats(int64_t m, int64_t kb) const { return m * kb; }
  int64_t w_floats(int64_t nb, int64_t kb) const { return w_ld(nb, kb) * (w_k_major ? nb : kb); }
  // True when W's scales as stored ([NB, KB] row-major) are already this layout.
  bool w_as_stored(int64_t nb, int64_t kb) const { return w_k_major && w_ld(nb, kb) == kb; }
  int bits() const { return (x_m_major ? 1 : 0) | (w_k_major ? 2 : 0) | (w_pad4 ? 4 : 0); }
  static Fp8BlockLayout from_bits(int b) { return {(b & 1) != 0, (b & 2) != 0, (b & 4) != 0}; }
  static int64_t pad(int64_t v, bool on) { return on ? (v + 3) / 4 * 4 : v; }
};
// The layout the backend uses: the default above, or PEREGRINE_FP8_BLOCK_LAYOUT=bits (0..7, Fp8BlockLayout::bits;
// for probing a library whose layout differs).
Fp8BlockLayout fp8_block_layout();
// Whether per-channel FP8 GEMMs run with cuBLASLt's fast accumulation (default; PEREGRINE_FP8_FAST_ACCUM=0 turns it
// off): Hopper's FP8 tensor cores then keep their partial sums in their own reduced precision instead of promoting
// them to f32 periodically.
bool fp8_fast_accum();

struct Fp8BlockGemmLaunch {
  const uint8_t* w;       // [N, K] e4m3
  const uint8_t* x;       // [M, K] e4m3 (x quantized per token and 128 k)
  const float* w_scale;   // layout's W scales
  const float* x_scale;   // layout's x scales
  void* out;              // [M, N]
  DType out_dtype;        // bf16, f16 or f32
  int64_t m, n, k;        // K a multiple of 128
};

struct Int8GemmLaunch {
  const int8_t* w;  // [N, K]
  const int8_t* x;  // [M, K]
  int32_t* out;     // [M, N]: the exact integer dot products
  int64_t m, n, k;
};

class Fp8LtGemm {
 public:
  Fp8LtGemm();
  ~Fp8LtGemm();
  Fp8LtGemm(const Fp8LtGemm&) = delete;
  Fp8LtGemm& operator=(const Fp8LtGemm&) = delete;
  // K a multiple of 16, pointers 16-byte aligned.
  static bool supports(const Fp8GemmLaunch& p);
  bool run(const Fp8GemmLaunch& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
  // K and N multiples of 16, pointers 16-byte aligned.
  static bool supports_int8(const Int8GemmLaunch& p);
  bool run_int8(const Int8GemmLaunch& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
  // M a multiple of 4 (cuBLASLt 13.1 on Hopper refuses others), K of 128, N of 16, pointers 16-byte aligned.
  static bool supports_blocks(const Fp8BlockGemmLaunch& p);
  // True when cuBLASLt has an algorithm for this shape (planned once); run_blocks then enqueues it.
  bool blocks_usable(const Fp8BlockGemmLaunch& p, size_t workspace_bytes);
  bool run_blocks(const Fp8BlockGemmLaunch& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
    bool usable = false;
  };
  Plan& plan_for(const Fp8GemmLaunch& p, size_t workspace_bytes);
  Plan& plan_int8(const Int8GemmLaunch& p, size_t workspace_bytes);
  Plan& plan_blocks(const Fp8BlockGemmLaunch& p, size_t workspace_bytes);
  Plan& plan_scaled(int64_t m, int64_t n, int64_t k, DType out, int32_t w_mode, int32_t x_mode, const void* w_scale,
                    const void* x_scale, size_t workspace_bytes, int tag);
  void make_desc(Plan& plan, cublasComputeType_t compute, cudaDataType_t scale);  // with the TN transposes
  void make_layouts(Plan& plan, cudaDataType_t in, cudaDataType_t out, int64_t m, int64_t n, int64_t k);
  void pick_algo(Plan& plan, size_t workspace_bytes);
  bool scaled_matmul(Plan& plan, const float* w_scale, const float* x_scale, const void* w, const void* x, void* out,
                     void* workspace, cudaStream_t stream);
  bool matmul(Plan& plan, const void* alpha, const void* w, const void* x, void* out, void* workspace,
              cudaStream_t stream);
  cublasLtHandle_t handle_ = nullptr;
  // Keyed by (M, N, K, output dtype (+ 16 for blocks) or -1 for int8, workspace bytes).
  std::map<std::tuple<int64_t, int64_t, int64_t, int, size_t>, Plan> plans_;
};

}  // namespace peregrine::cuda
