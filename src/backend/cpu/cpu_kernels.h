// The kernel table of the CPU backend: one instance per ISA (scalar, AVX2, AVX-512), each compiled in its own
// translation unit with its own flags; cpu_backend.cpp picks one at run time and splits work over threads.
// Kernels are single-threaded and work on a range the caller hands them.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cpu {

// out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]).
// NOTE determinism: every output element is reduced in one fixed order (one vector accumulator over k in
// steps of the lane count, a zero-padded tail step, then a fixed horizontal sum, then + bias) whatever
// the tile shape, the row count M or the range split, so a row's result never depends on the batch.
struct MatmulArgs {
  const float* x = nullptr;    // [M, K] f32
  const void* w = nullptr;     // [N, K] f32/bf16/f16
  DType w_dtype = DType::kF32;
  const float* bias = nullptr; // [N] f32, or null
  float* out = nullptr;        // [M, N] f32
  int64_t m = 0, k = 0, n = 0;
};

// Paged attention (semantics in ops/ops.h, AttentionParams), f32 queries and outputs.
struct AttentionArgs {
  const float* q = nullptr;    // [T, hq, hd]
  const void* k_cache = nullptr;  // [num_blocks, block_size, hkv, hd]
  const void* v_cache = nullptr;  // [num_blocks, block_size, hkv, hd]
  DType cache_dtype = DType::kF32;
  float* out = nullptr;        // [T, hq, hd]
  const int32_t* query_start_loc = nullptr;  // [S + 1]
  const int32_t* seq_lens = nullptr;         // [S]
  const int32_t* block_tables = nullptr;     // [S, max_blocks]
  int64_t hq = 0, hkv = 0, hd = 0, block_size = 0, max_blocks = 0;
  float scale = 1.0f;
  int sliding_window = 0;
};

// One unit of attention work: the query rows [row_begin, row_end) (0-based within the sequence) of every
// query head that reads KV head kv_head. K/V tiles are read once per item for all of those heads.
struct AttentionItem {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t row_begin = 0;
  int32_t row_end = 0;
};

// Floats of scratch an attention item needs for `rows` query rows.
inline int64_t attention_scratch_floats(const AttentionArgs& a, int64_t rows) {
  int64_t r = rows * (a.hq / a.hkv);
  return r * (a.hd + 16 + 2) + a.block_size + 16;  // head_dim and block_size padded to the widest lanes
}

struct KernelTable {
  const char* name = "";
  int lanes = 1;
  // Columns [n_begin, n_end) of rows [m_begin, m_end).
  void (*matmul)(const MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end) = nullptr;
  void (*attention)(const AttentionArgs& a, const AttentionItem& item, float* scratch) = nullptr;
  // One row of h: with residual, residual += x first and the sum is normalised. out may alias x.
  void (*rms_norm_row)(const float* x, float* residual, const float* weight, float* out, int64_t h, float eps) = nullptr;
  // Rotate-half RoPE of one token's heads in place: x is [heads, head_dim]; cos/sin are [half].
  void (*rope_token)(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin,
                     int64_t half) = nullptr;
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*to_f32)(DType src_dtype, const void* src, float* dst, int64_t n) = nullptr;    // f32/bf16/f16 → f32
  void (*from_f32)(DType dst_dtype, const float* src, void* dst, int64_t n) = nullptr;  // f32 → f32/bf16/f16
};

const KernelTable& scalar_kernels();
// Null when the build has no such kernels (non-x86 target); callers check the CPU separately.
const KernelTable* avx2_kernels();
const KernelTable* avx512_kernels();

}  // namespace peregrine::cpu
