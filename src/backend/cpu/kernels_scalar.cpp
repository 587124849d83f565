// The CPU kernels built for portable (no SIMD ISA assumed): the generic kernels instantiated over simd_scalar.h.
// NOTE: this file is compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include "backend/cpu/simd_scalar.h"
// (the generic kernels below use the Simd traits above)
#include "backend/cpu/kernel_table_impl.h"

namespace peregrine::cpu {

const KernelTable& scalar_kernels() {
  static const KernelTable table = make_kernel_table();
  return table;
}

}  // namespace peregrine::cpu
