// Device-side random fill for benchmarks (host RNG over gigabytes would dominate the run).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda_bench {

// Fills n elements of dtype t (f32/bf16/f16) with uniform values in [-scale, scale) from a hash of (seed, i).
void fill_random(void* data, DType t, size_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace peregrine::cuda_bench
