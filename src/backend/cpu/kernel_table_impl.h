// The kernel table of one ISA: every generic kernel instantiated over the TU's `Simd` traits.
// NOTE: include only from a kernels_<isa>.cpp, after its simd_<isa>.h.
#pragma once

#include "backend/cpu/attention_impl.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/elementwise_impl.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/int8_matmul_impl.h"
#include "backend/cpu/quant_matmul_impl.h"
#include "backend/cpu/w4a8_matmul_impl.h"

namespace {

// The table of this TU's kernels.
peregrine::cpu::KernelTable make_kernel_table() {
  peregrine::cpu::KernelTable t;
  t.name = Simd::kName;
  t.lanes = kLanes;
  t.matmul = matmul_kernel;
  t.qmatmul = qmatmul_kernel;
  t.i8matmul = i8matmul_kernel;
  t.i8_name = I8Dot::kName;
  t.w4a8 = w4a8_kernel_info();
  t.attention = attention_kernel;
  t.attention_merge = attention_merge_kernel;
  t.rms_norm_row = rms_norm_row_kernel;
  t.rope_token = rope_token_kernel;
  t.silu_mul = silu_mul_kernel;
  t.to_f32 = to_f32_kernel;
  t.from_f32 = from_f32_kernel;
  return t;
}

}  // namespace
