// The CPU kernels built for AVX2 + FMA + F16C: the generic kernels instantiated over simd_avx2.h.
// NOTE: this file is compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include "backend/cpu/simd_avx2.h"
// (the order matters: the generic kernels use the Simd traits above)
#include "backend/cpu/simd_common.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/elementwise_impl.h"

namespace peregrine::cpu {

const KernelTable* avx2_kernels() {
  static const KernelTable table = make_kernel_table();
  return &table;
}

}  // namespace peregrine::cpu
