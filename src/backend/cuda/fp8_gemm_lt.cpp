// cuBLASLt FP8 GEMM with outer-vector scales (see fp8_gemm_lt.h).
#include "backend/cuda/fp8_gemm_lt.h"

#include <cstdlib>
#include <string>

#include "core/status.h"

namespace peregrine::cuda {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::kInternal, std::string("cublasLt (fp8): ") + what + " failed: " + cublasLtGetStatusName(s));
}

cudaDataType_t out_type(DType t) {
  return t == DType::kBF16 ? CUDA_R_16BF : t == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

Fp8LtGemm::Fp8LtGemm() { check(cublasLtCreate(&handle_), "Create"); }

Fp8LtGemm::~Fp8LtGemm() {
  for (auto& [key, p] : plans_) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

bool Fp8LtGemm::supports(const Fp8GemmLaunch& p) {
  return p.k % 16 == 0 && p.n % 16 == 0 && aligned16(p.w) && aligned16(p.x) && aligned16(p.out) &&
         (p.out_dtype == DType::kBF16 || p.out_dtype == DType::kF16 || p.out_dtype == DType::kF32);
}

Fp8LtGemm::Plan& Fp8LtGemm::plan_for(const Fp8GemmLaunch& p, size_t workspace_bytes) {
  return plan_scaled(p.m, p.n, p.k, p.out_dtype, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
                     CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, p.w_scale, p.x_scale, workspace_bytes, 0);
}

Fp8LtGemm::Plan& Fp8LtGemm::plan_blocks(const Fp8BlockGemmLaunch& p, size_t workspace_bytes) {
  return plan_scaled(p.m, p.n, p.k, p.out_dtype, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                     CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, p.w_scale, p.x_scale, workspace_bytes, 16);
}

Fp8LtGemm::Plan& Fp8LtGemm::plan_scaled(int64_t m, int64_t n, int64_t k, DType out, int32_t w_mode, int32_t x_mode,
                                        const void* w_scale, const void* x_scale, size_t workspace_bytes, int tag) {
  const auto key = std::make_tuple(m, n, k, static_cast<int>(out) + tag, workspace_bytes);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& plan = plans_[key];
  make_desc(plan, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  // Libraries without the scale mode refuse the attribute: no plan, the caller falls back.
  if (cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &w_mode, sizeof(w_mode)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &x_mode, sizeof(x_mode)) !=
          CUBLAS_STATUS_SUCCESS)
    return plan;
  // Per-token x per-channel scales (tag 0): fast accumulation as vLLM's and TensorRT-LLM's FP8 GEMMs run it, unless
  // PEREGRINE_FP8_FAST_ACCUM=0. Block scales (tag 16) are promoted every 128 k by the kernel itself.
  // A library that refuses the attribute runs the plan without it.
  if (tag == 0 && fp8_fast_accum()) {
    const int8_t on = 1;
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof(on));
  }
  make_layouts(plan, CUDA_R_8F_E4M3, out_type(out), m, n, k);
  // Scale pointers must be set for the heuristic to see the scaled variant; the real ones are set per run.
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale));
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale));
  pick_algo(plan, workspace_bytes);
  return plan;
}

void Fp8LtGemm::make_desc(Plan& plan, cublasComputeType_t compute, cudaDataType_t scale) {
  check(cublasLtMatmulDescCreate(&plan.desc, compute, scale), "MatmulDescCreate");
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)), "TRANSB");
}

void Fp8LtGemm::make_layouts(Plan& plan, cudaDataType_t in, cudaDataType_t out, int64_t m, int64_t n, int64_t k) {
  // The TN layout: A = W stored [N, K] row-major = [K, N] column-major, used transposed; B = X [M, K] row-major =
  // [K, M]; D [N, M] column-major = out [M, N] row-major.
  check(cublasLtMatrixLayoutCreate(&plan.a, in, k, n, k), "LayoutA");
  check(cublasLtMatrixLayoutCreate(&plan.b, in, k, m, k), "LayoutB");
  check(cublasLtMatrixLayoutCreate(&plan.d, out, n, m, n), "LayoutD");
}

void Fp8LtGemm::pick_algo(Plan& plan, size_t workspace_bytes) {
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const uint64_t ws = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
    plan.usable = true;
  }
}

Fp8LtGemm::Plan& Fp8LtGemm::plan_int8(const Int8GemmLaunch& p, size_t workspace_bytes) {
  const auto key = std::make_tuple(p.m, p.n, p.k, -1, workspace_bytes);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& plan = plans_[key];
  make_desc(plan, CUBLAS_COMPUTE_32I, CUDA_R_32I);
  make_layouts(plan, CUDA_R_8I, CUDA_R_32I, p.m, p.n, p.k);  // the same TN layout as FP8, int32 out
  pick_algo(plan, workspace_bytes);
  return plan;
}

bool Fp8LtGemm::matmul(Plan& plan, const void* alpha, const void* w, const void* x, void* out, void* workspace,
                       cudaStream_t stream) {
  const int32_t zero[2] = {0, 0};  // beta: int32 or f32 zero, the same bits
  const cublasStatus_t st = cublasLtMatmul(handle_, plan.desc, alpha, w, plan.a, x, plan.b, zero, out, plan.d, out,
                                           plan.d, &plan.algo, workspace, plan.workspace, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    plan.usable = false;
    return false;
  }
  check(st, "Matmul");
  return true;
}

bool Fp8LtGemm::supports_int8(const Int8GemmLaunch& p) {
  return p.k % 16 == 0 && p.n % 16 == 0 && aligned16(p.w) && aligned16(p.x) && aligned16(p.out);
}

bool Fp8LtGemm::run_int8(const Int8GemmLaunch& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!supports_int8(p) || p.m == 0) return false;
  Plan& plan = plan_int8(p, workspace_bytes);
  if (!plan.usable) return false;
  const int32_t one = 1;
  return matmul(plan, &one, p.w, p.x, p.out, workspace, stream);
}

bool Fp8LtGemm::run(const Fp8GemmLaunch& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!supports(p) || p.m == 0) return false;
  Plan& plan = plan_for(p, workspace_bytes);
  if (!plan.usable) return false;
  return scaled_matmul(plan, p.w_scale, p.x_scale, p.w, p.x, p.out, workspace, stream);
}

bool Fp8LtGemm::supports_blocks(const Fp8BlockGemmLaunch& p) {
  return p.m % 4 == 0 && p.k % 128 == 0 && p.n % 16 == 0 && aligned16(p.w) && aligned16(p.x) && aligned16(p.out) &&
         aligned16(p.w_scale) && aligned16(p.x_scale) &&
         (p.out_dtype == DType::kBF16 || p.out_dtype == DType::kF16 || p.out_dtype == DType::kF32);
}

bool Fp8LtGemm::blocks_usable(const Fp8BlockGemmLaunch& p, size_t workspace_bytes) {
  return supports_blocks(p) && p.m > 0 && plan_blocks(p, workspace_bytes).usable;
}

bool Fp8LtGemm::run_blocks(const Fp8BlockGemmLaunch& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!supports_blocks(p) || p.m == 0) return false;
  Plan& plan = plan_blocks(p, workspace_bytes);
  return plan.usable && scaled_matmul(plan, p.w_scale, p.x_scale, p.w, p.x, p.out, workspace, stream);
}

bool Fp8LtGemm::scaled_matmul(Plan& plan, const float* w_scale, const float* x_scale, const void* w, const void* x,
                              void* out, void* workspace, cudaStream_t stream) {
  check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)),
        "A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)),
        "B_SCALE_POINTER");
  const float one = 1.0f;
  return matmul(plan, &one, w, x, out, workspace, stream);
}

bool fp8_fast_accum() {
  static const bool on = [] {
    const char* v = std::getenv("PEREGRINE_FP8_FAST_ACCUM");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

Fp8BlockLayout fp8_block_layout() {
  static const Fp8BlockLayout layout = [] {
    const char* v = std::getenv("PEREGRINE_FP8_BLOCK_LAYOUT");
    return v && *v ? Fp8BlockLayout::from_bits(std::atoi(v) & 7) : Fp8BlockLayout{};
  }();
  return layout;
}

}  // namespace peregrine::cuda
