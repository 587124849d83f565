// cuBLASLt plans: D[N, M] (column-major) = op(W)[N, K] * X[K, M], i.e. row-major out = x * w^T.
#include "backend/cuda/gemm_lt.h"

#include <algorithm>
#include <string>

#include "core/status.h"

namespace peregrine::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::kInternal,
                std::string("cublasLt: ") + what + " failed: " + cublasLtGetStatusName(status));
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  for (int a = 256; a > 1; a /= 2)
    if (v % a == 0) return a;
  return 1;
}

}  // namespace

size_t LtMatmul::KeyHash::operator()(const Key& k) const {
  size_t h = static_cast<size_t>(k.m) * 0x9E3779B97F4A7C15ull;
  h ^= static_cast<size_t>(k.n) * 0xC2B2AE3D27D4EB4Full + (h << 6);
  h ^= static_cast<size_t>(k.k) * 0x165667B19E3779F9ull + (h >> 2);
  h ^= (static_cast<size_t>(k.dtype) << 3) | (static_cast<size_t>(k.bias) << 1) | static_cast<size_t>(k.policy);
  h ^= static_cast<size_t>(k.alignment) << 12;
  return h;
}

LtMatmul::LtMatmul() { check_cublas(cublasLtCreate(&handle_), "cublasLtCreate"); }

LtMatmul::~LtMatmul() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

bool LtMatmul::supports(const GemmLaunch& p) {
  return is_float(p.x_dtype) && p.x_dtype == p.w_dtype && p.w_dtype == p.out_dtype && p.m > 0 && p.n > 0 &&
         p.k > 0;
}

bool LtMatmul::fuses_bias(const GemmLaunch& p) { return p.bias != nullptr && p.bias_dtype == p.out_dtype; }

LtMatmul::Plan& LtMatmul::plan_for(const GemmLaunch& p, LtPolicy policy, size_t workspace_bytes) {
  const bool bias = fuses_bias(p);
  const int alignment = std::min({alignment_of(p.x), alignment_of(p.w), alignment_of(p.out)});
  Key key{p.m, p.n, p.k, p.x_dtype, bias, policy, alignment};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan plan;
  const cudaDataType_t dt = cuda_type(p.x_dtype);
  check_cublas(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
               "set TRANSA");
  check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
               "set TRANSB");
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
                 "set EPILOGUE");
    check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt)),
                 "set BIAS_DATA_TYPE");
    const void* bias_ptr = p.bias;  // a valid pointer for the heuristic; reset on every run
    check_cublas(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
        "set BIAS_POINTER");
  }
  const uint64_t m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
  check_cublas(cublasLtMatrixLayoutCreate(&plan.a, dt, k, n, static_cast<int64_t>(k)), "layout A");
  check_cublas(cublasLtMatrixLayoutCreate(&plan.b, dt, k, m, static_cast<int64_t>(k)), "layout B");
  check_cublas(cublasLtMatrixLayoutCreate(&plan.c, dt, n, m, static_cast<int64_t>(n)), "layout C");

  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const uint64_t ws = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const uint32_t align = static_cast<uint32_t>(alignment);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align));
  if (policy == LtPolicy::kBatchInvariant) {
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
  }
  constexpr int kWanted = 8;
  cublasLtMatmulHeuristicResult_t results[kWanted] = {};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref,
                                                         kWanted, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  int chosen = -1;
  if (status == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < found && chosen < 0; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      if (policy == LtPolicy::kBatchInvariant) {
        uint32_t splits = 1;
        size_t written = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits), &written);
        if (splits > 1) continue;
      }
      chosen = i;
    }
  }
  if (chosen >= 0) {
    plan.algo = results[chosen].algo;
    plan.usable = true;
  }
  return plans_.emplace(key, plan).first->second;  // unusable plans are cached too: no repeated queries
}

bool LtMatmul::run(const GemmLaunch& p, LtPolicy policy, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) {
  Plan& plan = plan_for(p, policy, workspace_bytes);
  if (!plan.usable) return false;
  if (fuses_bias(p)) {
    const void* bias_ptr = p.bias;
    check_cublas(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
        "set BIAS_POINTER");
  }
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cublasLtMatmul(handle_, plan.desc, &alpha, p.w, plan.a, p.x, plan.b, &beta, p.out, plan.c, p.out,
                              plan.c, &plan.algo, workspace, workspace_bytes, stream),
               "cublasLtMatmul");
  return true;
}

}  // namespace peregrine::cuda
