// The CPU kernels built for portable (no SIMD ISA assumed): the generic kernels instantiated over simd_scalar.h.
// NOTE: this file is compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include "backend/cpu/simd_scalar.h"
// (the order matters: the generic kernels use the Simd traits above)
#include "backend/cpu/simd_common.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/elementwise_impl.h"

namespace peregrine::cpu {

const KernelTable& scalar_kernels() {
  static const KernelTable table = make_kernel_table();
  return table;
}

}  // namespace peregrine::cpu
