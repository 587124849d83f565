// Device helpers shared by the kernels: element conversions (f32/bf16/f16), runtime-dtype loads for the
// generic paths, 8-element vector loads/stores, dtype dispatch on the host, and the device error flags.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "core/dtype.h"

namespace peregrine::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(f16 x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 from_f32<f16>(float x) { return __float2half_rn(x); }

// Runtime-dtype element access for generic (non-templated) kernels; the switch is warp-uniform.
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16: return __bfloat162float(static_cast<const bf16*>(p)[i]);
    case DType::kF16: return __half2float(static_cast<const f16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<bf16*>(p)[i] = __float2bfloat16_rn(v); return;
    case DType::kF16: static_cast<f16*>(p)[i] = __float2half_rn(v); return;
    default: static_cast<float*>(p)[i] = v; return;
  }
}

// 8 consecutive elements through 16-byte accesses (p must be 16-byte aligned; f32 uses two).
template <typename T> __device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if constexpr (sizeof(T) == 4) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_f32(e[i]);
  }
}
template <typename T> __device__ __forceinline__ void store8(T* p, const float (&v)[8]) {
  if constexpr (sizeof(T) == 4) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = from_f32<T>(v[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
}

// Programmatic dependent launch (Hopper's griddepcontrol). A kernel launched with launch_pdl may start while the
// kernel before it on the stream is still running: it must call pdl_wait() before it reads or writes anything that
// kernel (or one before it) touches, since that returns only once the kernel before has finished and its writes are
// visible; what no kernel writes (weights) may be read before. pdl_trigger() lets the next kernel on the stream
// start before this one ends (it changes when, never what, the next one sees); the kernels call it right after
// their wait, so at most one kernel waits behind the running one (its blocks resident, a matmul's first weights
// loaded). Kernels launched plainly may call both (no-ops there). The decode path's kernels are launched so when
// their step has at most kPdlMaxRows rows (tokens or sequences): on the H200 (8B shape, 2026-12-04,
// docs/BENCHMARKS.md) it made batch 1 faster (bf16 +5%, W4A16 +6%) and batches 8 and 16 slower (-17%, -10%).
// PEREGRINE_PDL=0 launches them plainly; PEREGRINE_PDL_MAX_ROWS=N moves the bound (comparisons).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

constexpr int64_t kPdlMaxRows = 1;

// Whether launch_pdl asks for the overlap for a launch of this many rows: the current device is Hopper or later,
// PEREGRINE_PDL is not "0" and rows is within the bound.
inline bool pdl_enabled(int64_t rows) {
  static const int64_t max_rows = [] {
    const char* v = std::getenv("PEREGRINE_PDL");
    if (v && std::string_view(v) == "0") return int64_t{0};
    const char* m = std::getenv("PEREGRINE_PDL_MAX_ROWS");
    return m ? static_cast<int64_t>(std::atoll(m)) : kPdlMaxRows;
  }();
  if (rows > max_rows) return false;
  static std::atomic<int> major[64] = {};  // per device, 0 until read
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  int m = major[dev % 64].load(std::memory_order_relaxed);
  if (m == 0) {
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    major[dev % 64].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization where pdl_enabled(rows)
// (rows: the launch's tokens or sequences): the kernel must call pdl_wait() as above.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int64_t rows,
                Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled(rows) ? 1 : 0;
  PEREGRINE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T> struct TypeTag { using type = T; };

// Calls fn(TypeTag<T>{}) with T the device type of a float dtype (f32, bf16, f16).
template <typename Fn> void dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(TypeTag<float>{}); return;
    case DType::kBF16: fn(TypeTag<bf16>{}); return;
    case DType::kF16: fn(TypeTag<f16>{}); return;
    default: throw Error(ErrorCode::kUnsupported, "cuda: unsupported dtype " + std::string(dtype_name(t)));
  }
}

}  // namespace peregrine::cuda
