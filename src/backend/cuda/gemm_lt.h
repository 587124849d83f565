// cuBLASLt matmul wrapper: out[M, N] = x[M, K] * w[N, K]^T (+ bias in the epilogue), f32 accumulation.
// Plans (descriptors, layouts, the chosen algorithm) are cached per shape and dtype; the workspace is the
// caller's. Host code only; all work goes on the caller's stream (graph-capturable once a plan exists).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "backend/cuda/gemm.cuh"

namespace peregrine::cuda {

enum class LtPolicy {
  kBatchInvariant,  // algorithms without split-K reductions only
  kFastest,         // the heuristic's first choice
};

class LtMatmul {
 public:
  LtMatmul();
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // cuBLASLt takes x, w and out of one dtype; the bias is fused when its dtype equals out's.
  static bool supports(const GemmLaunch& p);
  static bool fuses_bias(const GemmLaunch& p);
  // Runs the matmul (the bias only when fuses_bias); returns false, having enqueued nothing, when cuBLASLt
  // has no algorithm for it (e.g. misaligned pointers) so the caller can fall back. Building a plan is
  // host-only work, so a first call may happen inside a graph capture.
  bool run(const GemmLaunch& p, LtPolicy policy, void* workspace, size_t workspace_bytes, cudaStream_t stream);
  size_t num_plans() const { return plans_.size(); }

 private:
  struct Key {
    int64_t m, n, k;
    DType dtype;
    bool bias;
    LtPolicy policy;
    int alignment;  // min alignment in bytes of x, w, out (the heuristic depends on it)
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;
  };
  Plan& plan_for(const GemmLaunch& p, LtPolicy policy, size_t workspace_bytes);

  cublasLtHandle_t handle_ = nullptr;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace peregrine::cuda
