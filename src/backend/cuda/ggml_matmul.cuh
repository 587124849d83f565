// GGUF block weights on CUDA (llama.cpp's Q4_0 ... Q6_K, core/ggml_quant.h; ops.h WeightQuant::ggml and
// EmbeddingParams::table_ggml): a small-M GEMV that reads every weight block once and dequantizes it in registers,
// a larger-M path that dequantizes the weight into a dense [N, K] scratch in the activation dtype for the cuBLASLt
// GEMM (a first version: no tiles dequantized into shared memory for mma yet), and the embedding gather; those
// keep activations in their dtype (f32 FMAs). Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K / Q6_K weights repacked at load (the
// packed layout below) take the int8 tensor-core kernel instead (skinny_gemm.cuh, x quantized to int8 per 32 values)
// at M <= kSkinnyGgmlMaxM, and the packed layout dequantized + cuBLASLt above it.
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

// The packed layout of Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K (Backend::pack_weight) read by the int8 tensor-core
// kernel (skinny_gemm.cuh, M <= kSkinnyGgmlMaxM). The same bytes as the file's blocks, regrouped in two regions:
//   codes [N, K (Q8_0) or K / 2]: each row in 128-value chunks (four 32-value blocks; Q4_K's sub-blocks), lane t
//     (0..3) of a chunk owning 32 bytes (Q8_0) or 16 (4-bit) that hold, for each block s, the values 4t..4t+3 and
//     16+4t..16+4t+3 — mma m16n8k32's fragment of that lane. Q8_0: 8 code bytes per block; 4-bit: 4 bytes per
//     block, byte i holding value 4t+i in its low nibble and 16+4t+i in its high one (Q4_0's own pairing; Q4_K's
//     sub-blocks are re-paired to it).
//   meta [N, K / 16 bytes] after the codes: Q8_0 / Q4_0 / Q5_0 the f16 scale of every block; Q4_K / Q5_K each
//     super-block's first 16 bytes as the file has them (d, dmin, the 12 packed 6-bit scales and mins).
//   Q5_0 / Q5_K: codes [N, 5K / 8] in 80-byte chunks: the four lanes' 16 bytes of low nibbles as the 4-bit types
//     pair them, then the four lanes' 4-byte words of fifth bits (lane t's word, byte i: bit s the fifth bit of
//     value 4t+i of block s, bit 4 + s that of value 16+4t+i); the meta region as above.
//   Q6_K: codes [N, 3K / 4] in 96-byte chunks: first the four lanes' 16 bytes of low nibbles (paired as the 4-bit
//     types pair them), then the four lanes' 8 bytes of high bits (word h of lane t, byte e: bits 0-1 and 2-3 the
//     high bits of values 4t+e and 16+4t+e of block 2h, bits 4-7 the same of block 2h + 1); then the int8 scale of
//     every 16 values [N, K / 16], then each super-block's f16 d [N, K / 256]. Codes stay 0..63 (the -32 is taken
//     through the sums of x).
// K must be a multiple of 128 (256 for the K-quants).
bool ggml_packable(GgmlType t, int64_t k);
// Bytes of the codes region of n packed rows (the meta region starts there).
__host__ __device__ constexpr int64_t ggml_packed_code_bytes(GgmlType t, int64_t n, int64_t k) {
  return t == GgmlType::kQ8_0                             ? n * k
         : t == GgmlType::kQ6_K                           ? n * (k / 4 * 3)
         : t == GgmlType::kQ5_0 || t == GgmlType::kQ5_K ? n * (k / 128 * 80)
                                                          : n * (k / 2);
}
void launch_ggml_pack(const uint8_t* w, GgmlType t, int64_t n, int64_t k, uint8_t* packed, cudaStream_t stream);
// w_out [N, K] in x's dtype from the packed layout (l.w = packed), the same values launch_ggml_dequantize gives.
void launch_ggml_dequantize_packed(const GgmlMatmulLaunch& l, void* w_out, cudaStream_t stream);

// x [M, K] (bf16, f16 or f32) quantized for the packed kernel by the CPU kernels' rule, in blocks of 32 for every
// type (the CPU takes 256 for the K-quants): per row and block of 32, d = amax / 127, q = round-half-even(x * 127 /
// amax) clamped to +-127 (0 when amax is 0). q [M, K] in the codes' lane order (see above); d and the sum of each
// block's q [M, K / 32], and of each 16 values [M, K / 16]. K a multiple of 128.
struct GgmlXq {
  int8_t* q;
  float* d;
  int32_t* sum;
  int32_t* sum16;  // [M, K / 16]: the sums of each half block (Q6_K's 16-value scales)
};
void launch_ggml_quantize_x(const void* x, DType x_dtype, int64_t m, int64_t k, const GgmlXq& out, cudaStream_t stream);

}  // namespace peregrine::cuda
