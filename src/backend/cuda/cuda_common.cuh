// Device helpers shared by the kernels: element conversions (f32/bf16/f16), runtime-dtype loads for the
// generic paths, 8-element vector loads/stores, dtype dispatch on the host, and the device error flags.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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
