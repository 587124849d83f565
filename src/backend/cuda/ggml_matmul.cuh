// GGUF block weights on CUDA (llama.cpp's Q4_0 ... Q6_K, core/ggml_quant.h; ops.h WeightQuant::ggml and
// EmbeddingParams::table_ggml): a small-M GEMV that reads every weight block once and dequantizes it in registers,
// a larger-M path that dequantizes the weight into a dense [N, K] scratch in the activation dtype for the cuBLASLt
// GEMM (a first version: no tiles dequantized into shared memory for mma yet), and the embedding gather.
// Activations stay in their dtype (f32 FMAs), unlike the CPU kernels which quantize x to int8.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/ggml_quant.h"

namespace peregrine::cuda {

struct GgmlMatmulLaunch {
  const void* x;  // [M, K] activations (bf16, f16 or f32), 16-byte aligned
  DType x_dtype;
  const uint8_t* w;  // [N, row_bytes] ggml blocks, each row the K values of one output; 2-byte aligned
  GgmlType type;
  int64_t row_bytes;
  const void* bias;  // [N] or null
  DType bias_dtype;
  void* out;  // [M, N]
  DType out_dtype;
  int64_t m, n, k;
};

// M up to this takes the GEMV (each output reduced in an order fixed by K alone: rows do not depend on M).
constexpr int64_t kGgmlGemvMaxM = 8;

void launch_ggml_gemv(const GgmlMatmulLaunch& l, cudaStream_t stream);
// w_out [N, K] in x's dtype: the dequantized weight (as ggml_dequantize_row, rounded to that dtype).
void launch_ggml_dequantize(const GgmlMatmulLaunch& l, void* w_out, cudaStream_t stream);

struct GgmlEmbeddingLaunch {
  const int32_t* token_ids;  // [T]
  const uint8_t* table;      // [vocab, row_bytes]
  GgmlType type;
  int64_t row_bytes;
  void* out;  // [T, hidden]
  DType out_dtype;
  int64_t num_tokens, vocab, hidden;
  int* error_flags;  // kErrEmbeddingTokenId for an id out of range (its row is zeros)
};
void launch_ggml_embedding(const GgmlEmbeddingLaunch& l, cudaStream_t stream);

}  // namespace peregrine::cuda
