// cuBLASLt FP8 GEMM with outer-vector scales (see fp8_gemm_lt.h).
#include "backend/cuda/fp8_gemm_lt.h"

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
  const auto key = std::make_tuple(p.m, p.n, p.k, static_cast<int>(p.out_dtype), workspace_bytes);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& plan = plans_[key];
  make_desc(plan, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  // Libraries without outer-vector scaling refuse the attribute: no plan, the caller falls back.
  if (cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)) !=
          CUBLAS_STATUS_SUCCESS)
    return plan;
  make_layouts(plan, CUDA_R_8F_E4M3, out_type(p.out_dtype), p.m, p.n, p.k);
  // Scale pointers must be set for the heuristic to see the scaled variant; the real ones are set per run.
  const void* dummy = p.w_scale;
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof(dummy));
  dummy = p.x_scale;
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof(dummy));
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
  check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.w_scale, sizeof(p.w_scale)),
        "A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.x_scale, sizeof(p.x_scale)),
        "B_SCALE_POINTER");
  const float one = 1.0f;
  return matmul(plan, &one, p.w, p.x, p.out, workspace, stream);
}

}  // namespace peregrine::cuda
