// cuBLASLt matmul wrapper: out[M, N] = x[M, K] * w[N, K]^T (+ bias in the epilogue), f32 accumulation.
// Plans (descriptors, layouts, the chosen algorithm) are cached per shape, dtype and split count; the workspace
// is the caller's. Host code only; all work goes on the caller's stream (graph-capturable once a plan exists).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "backend/cuda/gemm.cuh"

namespace peregrine::cuda {

enum class LtPolicy {
  // No split-K or other cross-CTA reductions. Batch-invariant, but slow at small M when N is small.
  kBatchInvariant,
  // One split-K count S(N, K) per weight shape, used for every M, with an out-of-place reduction in f32
  // (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, never in-place): K is cut at the same points and the partial sums
  // are added in the same order whatever M is, so a row's result does not depend on M.
  kBatchInvariantSplitK,
  kFastest,  // the heuristic's first choice (may use split-K at small M; rows may differ across M)
};

class LtMatmul {
 public:
  // base_workspace_bytes: the workspace the caller always has; split-K plans may ask for more (workspace_bytes).
  LtMatmul(int sm_count, size_t base_workspace_bytes);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // cuBLASLt takes x, w and out of one dtype; the bias is fused when its dtype equals out's.
  static bool supports(const GemmLaunch& p);
  static bool fuses_bias(const GemmLaunch& p);

  // The split-K count kBatchInvariantSplitK uses for weight shape [n, k] (a pinned count, else the rule).
  int splits_for(int64_t n, int64_t k) const;
  // Pins the split count for weight shape [n, k] (0 returns it to the rule). Plans are keyed by the count, so
  // this takes effect at the next call; NOTE: rows are batch-invariant only among calls with the same count.
  void pin_splits(int64_t n, int64_t k, int splits);

  // Workspace bytes run() needs for p (builds the plans; 0 when cuBLASLt has no algorithm). At most
  // base_workspace_bytes except for split-K plans, whose f32 partials take splits * rows * n * 4 bytes.
  size_t workspace_bytes(const GemmLaunch& p, LtPolicy policy);
  // Runs the matmul (the bias only when fuses_bias); returns false, having enqueued nothing, when cuBLASLt
  // has no algorithm for it (e.g. misaligned pointers) so the caller can fall back. Building a plan is
  // host-only work, so a first call may happen inside a graph capture. workspace_bytes >= workspace_bytes(p).
  bool run(const GemmLaunch& p, LtPolicy policy, void* workspace, size_t workspace_bytes, cudaStream_t stream);
  size_t num_plans() const { return plans_.size(); }
  // "algo 66 tile 18 stages 9 splits 4 scheme 2 ws 1048576" for the plan the last run() used (tests, benches).
  std::string describe_last_plan() const;

 private:
  struct Key {
    int64_t m, n, k;
    DType dtype;
    DType out_dtype;  // dtype, or f32 for half-precision inputs with f32 output (logits)
    bool bias;
    LtPolicy policy;
    int splits;     // kBatchInvariantSplitK only; 0 otherwise
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
    size_t workspace = 0;
    bool usable = false;
    bool from_enumeration = false;  // no heuristic candidate took the split count; found by listing algos
  };
  Plan& plan_for(const GemmLaunch& p, LtPolicy policy);
  void build_plan(Plan& plan, const GemmLaunch& p, LtPolicy policy, int splits, size_t workspace_limit);
  bool choose_from_heuristic(Plan& plan, LtPolicy policy, int splits, size_t workspace_limit, int alignment);
  bool choose_by_enumeration(Plan& plan, const GemmLaunch& p, int splits, size_t workspace_limit);
  bool configure(cublasLtMatmulAlgo_t& algo, const Plan& plan, int splits, size_t workspace_limit,
                 size_t* workspace) const;
  // Rows per cuBLASLt call: split-K plans cut M so that their partials stay under a cap (rows are
  // independent, and every chunk uses the same split count, so results do not change).
  int64_t rows_per_call(const GemmLaunch& p, LtPolicy policy) const;
  static GemmLaunch chunk_of(const GemmLaunch& p, int64_t first_row, int64_t rows);

  cublasLtHandle_t handle_ = nullptr;
  int sm_count_;
  size_t base_workspace_;
  std::map<std::pair<int64_t, int64_t>, int> pinned_splits_;
  std::unordered_map<Key, Plan, KeyHash> plans_;
  const Plan* last_plan_ = nullptr;
};

// The rule: no split when ceil(n / 128) tiles reach a third of the SMs; else the smallest count that brings
// them to ~45% of the SMs, among counts that cut K at multiples of 256 into parts at least 1024 deep (4096
// when the tiles already fill an eighth of the SMs). Llama-3-8B: k/v_proj 4, down_proj 2, the others 1.
int choose_split_count(int64_t n, int64_t k, int sm_count);

}  // namespace peregrine::cuda
