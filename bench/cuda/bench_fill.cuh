// Device-side helpers for benchmarks: random fill (host RNG over gigabytes would dominate the run) and the
// bandwidth probes (a 16-byte copy kernel, a read-only kernel) that give the memory ceilings.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda_bench {

// Fills n elements of dtype t (f32/bf16/f16) with uniform values in [-scale, scale) from a hash of (seed, i).
void fill_random(void* data, DType t, size_t n, uint64_t seed, float scale, cudaStream_t stream);

// dst = src, bytes a multiple of 16 and both 16-byte aligned; `blocks` CTAs of 512 threads, grid-stride.
void copy_with_kernel(void* dst, const void* src, size_t bytes, int blocks, cudaStream_t stream);
// Reads every byte (XOR-folded into *sink only if an impossible value turns up, so nothing is elided).
void read_with_kernel(const void* src, size_t bytes, uint32_t* sink, int blocks, cudaStream_t stream);

}  // namespace peregrine::cuda_bench
