// The GGUF block kernels built for AVX2 + FMA + F16C (ggml_kernels_impl.h over ggml_simd_avx2.h).
// NOTE: compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include "backend/cpu/ggml_simd_avx2.h"

namespace {
using G = GAvx2;
}
#include "backend/cpu/ggml_kernels_impl.h"

namespace peregrine::cpu {

const GgmlKernelTable* ggml_avx2_kernels() {
  static const GgmlKernelTable table = make_ggml_table();
  return &table;
}

}  // namespace peregrine::cpu
