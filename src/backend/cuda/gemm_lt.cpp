// cuBLASLt plans: D[N, M] (column-major) = op(W)[N, K] * X[K, M], i.e. row-major out = x * w^T. Split-K plans
// take a heuristic candidate (or, failing that, a listed algorithm) and force the shape's split count on it.
#include "backend/cuda/gemm_lt.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"

namespace peregrine::cuda {
namespace {

// The split rule, from H200 measurements (docs/benchmarks/cuda.md). Count output tiles of 128 along N. With a
// third of the SMs' worth of tiles or more, splits gain nothing at M = 1 (qkv 6144: slower). Fewer tiles: split
// until ~0.45 x SMs CTAs, but the f32 reduction costs at large M in proportion to S / K (S = 2 took 36% off
// M = 8192 at K = 4096, 12-21% at K = 14336), so shapes filling 1/8 to 1/3 of the SMs split only into parts
// >= 4096 deep (down_proj 2; o_proj none: 1.9x at M = 1 was not worth -36% at M = 8192 and -28% at M = 256),
// and only shapes below 1/8 (k/v_proj, 8 tiles: 2.7x at M = 1, 14x at M = 32) into parts >= 1024 deep.
constexpr int64_t kAssumedTileN = 128;
constexpr int64_t kSplitGranule = 256;          // split points at multiples of this (any tile_k <= 256 divides it)
constexpr int64_t kMinSplitDepth = 1024;        // shapes below 1/8 of the SMs
constexpr int64_t kMinSplitDepthFilled = 4096;  // shapes between 1/8 and 1/3
constexpr int kMaxSplits = 16;
constexpr size_t kSplitPartialsCap = size_t{32} << 20;  // f32 partials per call; larger M runs in row chunks
// PEREGRINE_SPLITK_PARTIALS_MB=N: another cap for comparisons (a row's bits do not depend on its chunk). At 32 MB an
// 8K-token prefill runs down_proj in eight chunks of 1,024 rows, 16 split-K reduces a layer (4.9% of a c 256 prompt
// step under ncu, H100, 2026-12-07).
size_t split_partials_cap() {
  static const size_t cap = [] {
    const char* v = std::getenv("PEREGRINE_SPLITK_PARTIALS_MB");
    const long mb = v ? std::atol(v) : 0;
    return mb > 0 ? static_cast<size_t>(mb) << 20 : kSplitPartialsCap;
  }();
  return cap;
}
constexpr int64_t kChunkRowGranule = 128;
constexpr int kHeuristicCandidates = 32;

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::kInternal, std::string("cublasLt: ") + what + " failed: " + cublasLtGetStatusName(status));
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  for (int a = 256; a > 1; a /= 2)
    if (v % a == 0) return a;
  return 1;
}

template <typename T>
T config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written);
  return value;
}

std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
    return {0};  // "undefined" is the one choice
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, ids.data(), bytes, &bytes);
  return ids.empty() ? std::vector<uint32_t>{0} : ids;
}

}  // namespace

int choose_split_count(int64_t n, int64_t k, int sm_count) {
  const int64_t tiles = (n + kAssumedTileN - 1) / kAssumedTileN;
  if (tiles * 3 >= sm_count) return 1;
  const int64_t min_depth = tiles * 8 <= sm_count ? kMinSplitDepth : kMinSplitDepthFilled;
  int best = 1;
  for (int s = 2; s <= kMaxSplits; ++s) {
    if (k % (s * kSplitGranule) != 0 || k / s < min_depth) continue;
    best = s;
    if (tiles * s * 20 >= static_cast<int64_t>(sm_count) * 9) break;
  }
  return best;
}

size_t LtMatmul::KeyHash::operator()(const Key& k) const {
  size_t h = static_cast<size_t>(k.m) * 0x9E3779B97F4A7C15ull;
  h ^= static_cast<size_t>(k.n) * 0xC2B2AE3D27D4EB4Full + (h << 6);
  h ^= static_cast<size_t>(k.k) * 0x165667B19E3779F9ull + (h >> 2);
  h ^= (static_cast<size_t>(k.dtype) << 3) | (static_cast<size_t>(k.bias) << 1) | (static_cast<size_t>(k.out_dtype) << 9);
  h ^= (static_cast<size_t>(k.policy) << 8) ^ (static_cast<size_t>(k.splits) << 20);
  h ^= static_cast<size_t>(k.alignment) << 12;
  return h;
}

LtMatmul::LtMatmul(int sm_count, size_t base_workspace_bytes)
    : sm_count_(sm_count), base_workspace_(base_workspace_bytes) {
  check_cublas(cublasLtCreate(&handle_), "cublasLtCreate");
}

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
  // Same dtype throughout, or half-precision inputs with an f32 output (the LM head's logits).
  const bool out_ok = p.out_dtype == p.x_dtype || p.out_dtype == DType::kF32;
  return is_float(p.x_dtype) && p.x_dtype == p.w_dtype && out_ok && p.m > 0 && p.n > 0 && p.k > 0;
}

bool LtMatmul::fuses_bias(const GemmLaunch& p) {
  return p.bias != nullptr && p.bias_dtype == p.out_dtype;
}

int LtMatmul::splits_for(int64_t n, int64_t k) const {
  auto it = pinned_splits_.find({n, k});
  return it != pinned_splits_.end() ? it->second : choose_split_count(n, k, sm_count_);
}

void LtMatmul::pin_splits(int64_t n, int64_t k, int splits) {
  if (splits < 0 || splits > 64) throw Error(ErrorCode::kInvalidArgument, "matmul: split count out of range");
  if (splits == 0) {
    pinned_splits_.erase({n, k});
  } else {
    pinned_splits_[{n, k}] = splits;
  }
}

int64_t LtMatmul::rows_per_call(const GemmLaunch& p, LtPolicy policy) const {
  if (policy != LtPolicy::kBatchInvariantSplitK) return p.m;
  const int s = splits_for(p.n, p.k);
  if (s <= 1) return p.m;
  const int64_t fit = static_cast<int64_t>(split_partials_cap() / (static_cast<size_t>(s) * p.n * 4));
  return std::min(p.m, std::max(kChunkRowGranule, fit / kChunkRowGranule * kChunkRowGranule));
}

// Forces `splits` (and the f32 out-of-place reduction when splits > 1) on algo; true when cuBLASLt accepts it.
bool LtMatmul::configure(cublasLtMatmulAlgo_t& algo, const Plan& plan, int splits, size_t workspace_limit,
                         size_t* workspace) const {
  size_t written = 0;
  const uint32_t scheme = splits > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
  if (splits > 1) {
    int32_t support = 0;
    uint32_t schemes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof(support),
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        support == 0)
      return false;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes),
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        (schemes & scheme) == 0)
      return false;
  }
  const int32_t s = splits;
  if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof(s)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)) !=
          CUBLAS_STATUS_SUCCESS)
    return false;
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, &algo, &check) !=
      CUBLAS_STATUS_SUCCESS)
    return false;
  // NOTE: the whole point: the plan must really run with this split count and reduction scheme.
  if (config_value<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) != s ||
      config_value<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) != scheme ||
      check.workspaceSize > workspace_limit)
    return false;
  *workspace = check.workspaceSize;
  return true;
}

bool LtMatmul::choose_from_heuristic(Plan& plan, LtPolicy policy, int splits, size_t workspace_limit, int alignment) {
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const uint64_t ws = workspace_limit;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const uint32_t align = static_cast<uint32_t>(alignment);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align));
  // kBatchInvariantSplitK re-configures every candidate, so with splits > 1 it looks at all of them.
  if (policy == LtPolicy::kBatchInvariant || (policy == LtPolicy::kBatchInvariantSplitK && splits <= 1)) {
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(kHeuristicCandidates);
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref,
                                                               kHeuristicCandidates, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS) return false;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    cublasLtMatmulAlgo_t algo = results[i].algo;
    size_t need = results[i].workspaceSize;
    if (policy == LtPolicy::kFastest) {
      if (need > workspace_limit) continue;
    } else if (policy == LtPolicy::kBatchInvariant) {
      if (config_value<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1 || need > workspace_limit) continue;
    } else if (!configure(algo, plan, splits, workspace_limit, &need)) {
      continue;
    }
    plan.algo = algo;
    plan.workspace = need;
    plan.usable = true;
    return true;
  }
  return false;
}

// Last resort for split-K: every algorithm id, tile and stage count that accepts the split count. Without
// timings, prefer the configuration whose wave count is the smallest at or above one (else the largest).
bool LtMatmul::choose_by_enumeration(Plan& plan, const GemmLaunch& p, int splits, size_t workspace_limit) {
  const cudaDataType_t dt = cuda_type(p.x_dtype), ct = cuda_type(p.out_dtype);
  int ids[256];
  int num_ids = 0;
  if (cublasLtMatmulAlgoGetIds(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, dt, dt, ct, ct, 256, ids, &num_ids) !=
      CUBLAS_STATUS_SUCCESS)
    return false;
  bool have = false;
  float best_waves = 0;
  for (int i = 0; i < num_ids; ++i) {
    cublasLtMatmulAlgo_t base{};
    if (cublasLtMatmulAlgoInit(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, dt, dt, ct, ct, ids[i], &base) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    const std::vector<uint32_t> all_stages = cap_ids(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    const uint32_t stage_choices[] = {0, all_stages.front(), all_stages.back()};  // bounded: plans stay cheap
    for (uint32_t tile : cap_ids(base, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      for (uint32_t stages : stage_choices) {
        cublasLtMatmulAlgo_t algo = base;
        cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
        cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages));
        size_t need = 0;
        if (!configure(algo, plan, splits, workspace_limit, &need)) continue;
        cublasLtMatmulHeuristicResult_t check{};
        cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, &algo, &check);
        const float waves = check.wavesCount;
        const bool better = !have || (waves >= 1.0f && (best_waves < 1.0f || waves < best_waves)) ||
                            (waves < 1.0f && best_waves < 1.0f && waves > best_waves);
        if (!better) continue;
        have = true;
        best_waves = waves;
        plan.algo = algo;
        plan.workspace = need;
      }
    }
  }
  plan.usable = have;
  plan.from_enumeration = have;
  return have;
}

void LtMatmul::build_plan(Plan& plan, const GemmLaunch& p, LtPolicy policy, int splits, size_t workspace_limit) {
  const bool bias = fuses_bias(p);
  const cudaDataType_t dt = cuda_type(p.x_dtype), ct = cuda_type(p.out_dtype);
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
    check_cublas(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ct, sizeof(ct)),
                 "set BIAS_DATA_TYPE");
    const void* bias_ptr = p.bias;  // a valid pointer for the heuristic; reset on every run
    check_cublas(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
        "set BIAS_POINTER");
  }
  const uint64_t m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
  check_cublas(cublasLtMatrixLayoutCreate(&plan.a, dt, k, n, static_cast<int64_t>(k)), "layout A");
  check_cublas(cublasLtMatrixLayoutCreate(&plan.b, dt, k, m, static_cast<int64_t>(k)), "layout B");
  check_cublas(cublasLtMatrixLayoutCreate(&plan.c, ct, n, m, static_cast<int64_t>(n)), "layout C");
  const int alignment = std::min({alignment_of(p.x), alignment_of(p.w), alignment_of(p.out)});
  if (choose_from_heuristic(plan, policy, splits, workspace_limit, alignment)) return;
  if (policy == LtPolicy::kBatchInvariantSplitK && splits > 1) choose_by_enumeration(plan, p, splits, workspace_limit);
}

LtMatmul::Plan& LtMatmul::plan_for(const GemmLaunch& p, LtPolicy policy) {
  const int splits = policy == LtPolicy::kBatchInvariantSplitK ? splits_for(p.n, p.k) : 0;
  const int alignment = std::min({alignment_of(p.x), alignment_of(p.w), alignment_of(p.out)});
  Key key{p.m, p.n, p.k, p.x_dtype, p.out_dtype, fuses_bias(p), policy, splits, alignment};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  size_t limit = base_workspace_;
  if (splits > 1) limit += static_cast<size_t>(splits) * p.m * p.n * 4;
  Plan& plan = plans_.emplace(key, Plan{}).first->second;  // unusable plans are cached too: no repeated queries
  build_plan(plan, p, policy, std::max(splits, 1), limit);
  return plan;
}

GemmLaunch LtMatmul::chunk_of(const GemmLaunch& p, int64_t first_row, int64_t rows) {
  GemmLaunch c = p;
  c.m = std::min(rows, p.m - first_row);
  c.x = static_cast<const char*>(p.x) + dtype_bytes(p.x_dtype, static_cast<size_t>(first_row * p.k));
  c.out = static_cast<char*>(p.out) + dtype_bytes(p.out_dtype, static_cast<size_t>(first_row * p.n));
  return c;
}

size_t LtMatmul::workspace_bytes(const GemmLaunch& p, LtPolicy policy) {
  const int64_t rows = rows_per_call(p, policy);
  size_t need = 0;
  for (int64_t r = 0; r < p.m; r += rows) {
    const Plan& plan = plan_for(chunk_of(p, r, rows), policy);
    if (!plan.usable) return 0;
    need = std::max(need, plan.workspace);
  }
  return need;
}

bool LtMatmul::run(const GemmLaunch& p, LtPolicy policy, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  last_plan_ = nullptr;
  const int64_t rows = rows_per_call(p, policy);
  for (int64_t r = 0; r < p.m; r += rows) {  // every plan first, so that a failure enqueues nothing
    const Plan& plan = plan_for(chunk_of(p, r, rows), policy);
    if (!plan.usable || plan.workspace > workspace_bytes) return false;
  }
  for (int64_t r = 0; r < p.m; r += rows) {
    const GemmLaunch c = chunk_of(p, r, rows);
    Plan& plan = plan_for(c, policy);
    if (fuses_bias(c)) {
      const void* bias_ptr = c.bias;
      check_cublas(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
          "set BIAS_POINTER");
    }
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cublasLtMatmul(handle_, plan.desc, &alpha, c.w, plan.a, c.x, plan.b, &beta, c.out, plan.c, c.out,
                                plan.c, &plan.algo, workspace, workspace_bytes, stream),
                 "cublasLtMatmul");
    last_plan_ = &plan;
  }
  return true;
}

std::string LtMatmul::describe_last_plan() const {
  if (last_plan_ == nullptr) return "none";
  const cublasLtMatmulAlgo_t& a = last_plan_->algo;
  return "algo " + std::to_string(config_value<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID)) + " tile " +
         std::to_string(config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID)) + " stages " +
         std::to_string(config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID)) + " cluster " +
         std::to_string(config_value<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)) + " splits " +
         std::to_string(config_value<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) + " scheme " +
         std::to_string(config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)) + " ws " +
         std::to_string(last_plan_->workspace) + (last_plan_->from_enumeration ? " (listed)" : "");
}

}  // namespace peregrine::cuda
