// Paged attention launchers (ops.h AttentionParams). Each sequence goes to exactly one kernel, chosen from
// its own shape only (so a query's result never depends on the rest of the batch):
//   decode  (q_len * group <= 16): split-K flash-decoding, a KV head's query heads packed into one
//           16-row tensor-core tile, four warps splitting every 64-key tile, then a combine kernel;
//   prefill (otherwise): on Hopper with b16 caches and head_dim 64 / 128, wgmma (warpgroup MMA) 128-row tiles
//           of packed (token, head) rows over 128-key tiles; elsewhere FlashAttention-2 style 64-row tiles on
//           mma.sync; causal/window masks, a chunk attending to its cached prefix;
//   generic: any other head_dim or dtype mix (f32 activations or cache, int8 / fp8 caches under f32
//           activations): one warp per (query, head), f32.
// The decode and prefill kernels also read int8 / fp8 e4m3 caches (bf16/f16 activations): codes and per-(slot,
// head) scales staged per tile, codes turned exactly into b16 values, scales applied in f32 to scores and
// probabilities.
// Split boundaries are fixed absolute key positions derived from the sequence alone.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/decode_splits.h"
#include "core/dtype.h"

namespace peregrine::cuda {

struct AttentionLaunch {
  const void* q;  // [T, Hq, D] act
  void* out;      // [T, Hq, D] act
  const void* k_cache;  // [num_blocks, block_size, Hkv, D]
  const void* v_cache;
  const int32_t* query_start_loc;  // [S + 1]
  const int32_t* seq_lens;         // [S]
  const int32_t* block_tables;     // [R, max_blocks_per_seq]
  const int32_t* table_index;      // [S] block-table row of each sequence; null: row s
  // Remapped keys (ops.h AttentionParams): keys at positions >= tail_from[s] sit at sequence slots
  // tail[tail_offset[s] + pos - tail_from[s]]; null: none.
  const int32_t* tail_from;
  const int32_t* tail_offset;
  const int32_t* tail;
  DType act, cache;
  // Quantized caches (int8 / fp8 e4m3): one scale per (slot, KV head), [num_blocks * block_size, Hkv]; else null.
  const float* k_scales;
  const float* v_scales;
  int num_seqs, num_q_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq;
  int64_t num_tokens;
  float scale;
  int sliding_window, max_query_len, max_seq_len;
  int block_shift;   // log2(block_size) when a power of two, else -1 (set by launch_attention)
  float* workspace;  // split-K partials, attention_workspace_bytes(...) bytes
  // The fewest KV tiles a decode split takes over b16 caches (0: kDecodeMinTilesPerSplit), twice that over 8-bit
  // ones; a property of the model's cache, never of the batch (decode_min_tiles).
  int decode_split_tiles = 0;
  // The most splits a decode sequence takes (0: kDecodeMaxSplits; at most kDecodeSplitsLimit): a process-wide
  // constant (PEREGRINE_DECODE_MAX_SPLITS, for comparisons), so a sequence's splits still depend on its length alone.
  int decode_max_splits = 0;
  // The CTAs of the decode kernel the device runs at once, for decode_num_splits' wave rule (0: off); set by the
  // decode launcher from the kernel's occupancy (PEREGRINE_DECODE_WAVES=0 turns the rule off: decode_waves false).
  int decode_wave_ctas = 0;
  bool decode_waves = true;
  // The wave rule's fixed cost of a split in quarter tiles (PEREGRINE_DECODE_SPLIT_COST: a process-wide constant,
  // for comparisons).
  int decode_split_cost = kDecodeSplitCostQuarters;
};

// Bytes of device workspace launch_attention needs for these params (0 when none).
size_t attention_workspace_bytes(const AttentionLaunch& p);
void launch_attention(const AttentionLaunch& p, cudaStream_t stream);

// Kernel-family launchers (attention_decode.cu, attention_prefill.cu, attention_generic.cu).
bool attention_uses_tensor_cores(const AttentionLaunch& p);
void launch_attention_decode(const AttentionLaunch& p, int grid_splits, int rows_cap, cudaStream_t stream);
// The split combine of later decode launches: 1 four outputs a thread (16-byte loads), 0 one (the default), -1 back
// to PEREGRINE_DECODE_COMBINE_VEC (1 or unset). The same sums either way; tests compare the two.
void decode_combine_vec_mode(int mode);
void launch_attention_prefill(const AttentionLaunch& p, cudaStream_t stream);
void launch_attention_generic(const AttentionLaunch& p, cudaStream_t stream);
// The wgmma prefill (attention_prefill_wgmma.cu): false, launching nothing, where it does not apply (not an sm_90
// device, head_dim other than 64 / 128, a cache dtype other than the activations' or int8 / fp8 e4m3, or
// PEREGRINE_PREFILL_WGMMA=0).
bool launch_attention_prefill_wgmma(const AttentionLaunch& p, cudaStream_t stream);

// The block-table row of sequence s.
__host__ __device__ inline const int32_t* table_row(const AttentionLaunch& p, int s) {
  return p.block_tables + static_cast<int64_t>(p.table_index ? p.table_index[s] : s) * p.max_blocks_per_seq;
}

// Decode split policy (decode_splits.h), shared by host (grid and workspace sizing) and device (each sequence's own
// split).
constexpr int kDecodeMaxRows = 16;

// The fewest tiles a split takes: 4 over b16 caches; twice that over 8-bit caches, whose tiles hold half the bytes
// (a split's fixed costs -- Q, the pipeline's fill, the warps' merge, its partial -- then weigh the same per byte).
// A property of the model's cache, never of the batch, so a sequence's splits depend on its own length alone.
__host__ __device__ inline int decode_min_tiles(const AttentionLaunch& p) {
  const int base = p.decode_split_tiles > 0 ? p.decode_split_tiles : kDecodeMinTilesPerSplit;
  return p.cache == DType::kI8 || p.cache == DType::kF8E4M3 ? 2 * base : base;
}
__host__ __device__ inline int decode_max_splits(const AttentionLaunch& p) {
  const int m = p.decode_max_splits > 0 ? p.decode_max_splits : kDecodeMaxSplits;
  return m > kDecodeSplitsLimit ? kDecodeSplitsLimit : m;
}

// The rows a prefill CTA takes and the keys they see: packed (token, head) rows [r0, r0 + kRows) of sequence s (row pr
// is token pr / group, query head kvh * group + pr % group), rows in all; the keys of its first and last token's
// view, [kv_lo, kv_hi), and the kKeys-wide tiles holding them, [t_lo, t_hi). ok is false where the CTA has nothing
// to do: a decode-path sequence (at most kDecodeMaxRows rows) or a row tile past the sequence's last row.
struct PrefillRows {
  bool ok;
  int group, q0, rows, r0, first_pos, i_first, i_last, window, kv_lo, kv_hi, t_lo, t_hi;
};
template <int kRows, int kKeys>
__host__ __device__ inline PrefillRows prefill_rows(const AttentionLaunch& p, int s, int tile) {
  PrefillRows r{};
  r.group = p.num_q_heads / p.num_kv_heads;
  r.q0 = p.query_start_loc[s];
  const int q_len = p.query_start_loc[s + 1] - r.q0;
  r.rows = q_len * r.group;
  r.r0 = tile * kRows;
  r.ok = r.rows > kDecodeMaxRows && r.r0 < r.rows;
  if (!r.ok) return r;
  r.first_pos = p.seq_lens[s] - q_len;
  const int last = r.rows - 1 < r.r0 + kRows - 1 ? r.rows - 1 : r.r0 + kRows - 1;
  r.i_first = r.r0 / r.group;
  r.i_last = last / r.group;
  r.window = p.sliding_window;
  r.kv_hi = r.first_pos + r.i_last + 1;
  const int lo = r.first_pos + r.i_first - r.window + 1;
  r.kv_lo = r.window > 0 ? (lo > 0 ? lo : 0) : 0;
  r.t_lo = r.kv_lo / kKeys;
  r.t_hi = (r.kv_hi + kKeys - 1) / kKeys;
  return r;
}
// The prefill grid for CTAs of rows_per_cta packed rows: (row tiles of the longest query, sequences, KV heads).
inline dim3 prefill_grid(const AttentionLaunch& p, int rows_per_cta) {
  const int64_t rows = static_cast<int64_t>(p.max_query_len) * (p.num_q_heads / p.num_kv_heads);
  return dim3(static_cast<unsigned>((rows + rows_per_cta - 1) / rows_per_cta), static_cast<unsigned>(p.num_seqs),
              static_cast<unsigned>(p.num_kv_heads));
}

}  // namespace peregrine::cuda
