// TEMPORARY scaffold: forwards to the reference backend until the SIMD kernels land (same session).
#include "backend/cpu/cpu_backend.h"

#include "backend/ref/ref_backend.h"

namespace peregrine::ops {

std::unique_ptr<Backend> make_cpu_backend(int) { return make_ref_backend(); }

}  // namespace peregrine::ops
