// The CPU kernels built for AVX-512 F/BW/VL: the generic kernels instantiated over simd_avx512.h.
// NOTE: this file is compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include "backend/cpu/simd_avx512.h"
// (the generic kernels below use the Simd traits above)
#include "backend/cpu/kernel_table_impl.h"

namespace peregrine::cpu {

const KernelTable* avx512_kernels() {
  static const KernelTable table = make_kernel_table();
  return &table;
}

}  // namespace peregrine::cpu
