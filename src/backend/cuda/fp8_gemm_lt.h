// FP8 W8A8 GEMM through cuBLASLt on Hopper: out[M, N] = (x_q[M, K] * x_scale[M]) . (w[N, K] * w_scale[N])^T with
// e4m3 inputs, f32 accumulation (no fast accumulation) and the per-token and per-channel scales applied by cuBLASLt
// itself (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on both operands). D[N, M] column-major = op(W)[N, K] * X[K, M]
// (the TN layout FP8 needs). Plans are cached per shape and output dtype; run() returns false, having enqueued
// nothing, when cuBLASLt has no algorithm (older libraries, misaligned pointers), so the caller falls back.
// The same class runs int8 W8A8's GEMM (run_int8): s8 x s8 with exact int32 accumulation into an int32 [M, N], the
// scales applied after (w8_matmul.cuh's launch_w8_int32_epilogue, the warp kernel's arithmetic).
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
  void make_desc(Plan& plan, cublasComputeType_t compute, cudaDataType_t scale);  // with the TN transposes
  void make_layouts(Plan& plan, cudaDataType_t in, cudaDataType_t out, int64_t m, int64_t n, int64_t k);
  void pick_algo(Plan& plan, size_t workspace_bytes);
  bool matmul(Plan& plan, const void* alpha, const void* w, const void* x, void* out, void* workspace,
              cudaStream_t stream);
  cublasLtHandle_t handle_ = nullptr;
  // Keyed by (M, N, K, output dtype or -1 for int8, workspace bytes).
  std::map<std::tuple<int64_t, int64_t, int64_t, int, size_t>, Plan> plans_;
};

}  // namespace peregrine::cuda
