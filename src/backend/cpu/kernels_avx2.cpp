// The CPU kernels built for AVX2 + FMA + F16C: the generic kernels instantiated over simd_avx2.h.
// NOTE: this file is compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include "backend/cpu/simd_avx2.h"
// (the generic kernels below use the Simd traits above)
#include "backend/cpu/kernel_table_impl.h"

namespace peregrine::cpu {

const KernelTable* avx2_kernels() {
  static const KernelTable table = make_kernel_table();
  return &table;
}

}  // namespace peregrine::cpu
