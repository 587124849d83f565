// The fast CPU backend: multithreaded, runtime-dispatched SIMD kernels (AVX-512, AVX2+FMA, scalar)
// over host memory; f32 activations, f32/bf16/f16 weights used in place (bf16 stays bf16 in memory).
#pragma once

#include <memory>

#include "ops/backend.h"

namespace peregrine::ops {

// Which kernel set runs. kAuto picks the widest the CPU supports (AVX-512 with VNNI → AVX-512 → AVX2+FMA+F16C →
// scalar). kAvx512Vnni is kAvx512 whose int8 W8A8 matmul uses vpdpbusd (kAvx512 then uses maddubs).
enum class CpuIsa { kAuto, kScalar, kAvx2, kAvx512, kAvx512Vnni };

// True when this build has the kernels of `isa` and this CPU can run them.
bool cpu_isa_available(CpuIsa isa);

// num_threads 0 = one per core. Throws Error(kUnsupported) when `isa` is not available (see above).
std::unique_ptr<Backend> make_cpu_backend(int num_threads, CpuIsa isa = CpuIsa::kAuto);

}  // namespace peregrine::ops
