// Elementwise activation ops: SiLU-mul (ops.h SiluMulParams) and a bias add used after GEMMs whose
// bias dtype cuBLASLt's epilogue cannot take.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ggml_matmul.cuh"
#include "core/dtype.h"

namespace peregrine::cuda {

struct SiluMulLaunch {
  const void* gate;  // [n]
  const void* up;    // [n]
  void* out;         // [n], may alias gate
  DType gate_dtype, up_dtype, out_dtype;
  int64_t numel;
  int64_t rows = 0;  // tokens, for launch_pdl's bound (0: unknown, launched plainly)
};
void launch_silu_mul(const SiluMulLaunch& p, cudaStream_t stream);

// SiLU-mul with the product quantized per token for a W8A8 matmul that reads it next (ops.h SiluMulParams::next):
// a block a row holds the row's rounded products in registers, takes their amax and writes the codes [rows, cols]
// and one scale a row (act 1 int8, 2 FP8), exactly what launch_act_quant makes from the product; p.out is not
// written. Rows of cols = numel / rows values.
bool silu_mul_quant_takes(const SiluMulLaunch& p);
void launch_silu_mul_quant(const SiluMulLaunch& p, int act, uint8_t* xq, float* xs, cudaStream_t stream);
// The same, the product made into the int8 blocks the packed GGUF kernels read (ggml_xq.cuh: launch_ggml_quantize_x's
// bits on the product); cols a multiple of 128.
bool silu_mul_ggml_takes(const SiluMulLaunch& p);
void launch_silu_mul_ggml(const SiluMulLaunch& p, const GgmlXq& xq, cudaStream_t stream);
// Its later launches: 1 a grid over each row's pieces, 0 a block a row (the default), -1 back to
// PEREGRINE_SILU_GGML_GRID (1 or unset). The same bits either way; tests compare the two.
void silu_mul_ggml_grid_mode(int mode);

struct AddBiasLaunch {
  void* out;         // [M, N], out[m, n] += bias[n]
  const void* bias;  // [N]
  DType out_dtype, bias_dtype;
  int64_t m, n;
};
void launch_add_bias(const AddBiasLaunch& p, cudaStream_t stream);

}  // namespace peregrine::cuda
