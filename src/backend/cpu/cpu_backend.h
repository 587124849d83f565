// The fast CPU backend: multithreaded, runtime-dispatched SIMD kernels (AVX-512 BF16/VNNI, AVX2+FMA, scalar)
// over host memory; f32 activations, f32/bf16/f16 weights used in place (bf16 stays bf16 in memory).
#pragma once

#include <memory>

#include "ops/backend.h"

namespace peregrine::ops {

// num_threads 0 = one per core.
std::unique_ptr<Backend> make_cpu_backend(int num_threads);

}  // namespace peregrine::ops
