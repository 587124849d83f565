// Non-x86 builds: no AVX2 or AVX-512 kernels exist; the backend falls back to the portable kernels.
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/ggml_kernels.h"

namespace peregrine::cpu {

const KernelTable* avx2_kernels() {
  return nullptr;
}
const KernelTable* avx512_kernels() {
  return nullptr;
}
const GgmlKernelTable* ggml_avx2_kernels() {
  return nullptr;
}
const GgmlKernelTable* ggml_vnni_kernels() {
  return nullptr;
}
Int8MatmulFn avx512vnni_i8matmul() {
  return nullptr;
}
Int8PackedFn avx512vnni_i8packed() {
  return nullptr;
}
W4A8Kernel avx512vnni_w4a8() {
  return {};
}

}  // namespace peregrine::cpu
