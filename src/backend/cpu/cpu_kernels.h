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
  const float* x = nullptr;  // [M, K] f32
  const void* w = nullptr;   // [N, K] f32/bf16/f16
  DType w_dtype = DType::kF32;
  const float* bias = nullptr;  // [N] f32, or null
  float* out = nullptr;         // [M, N] f32
  int64_t m = 0, k = 0, n = 0;
};

// Quantized-weight matmul (quant_matmul_impl.h): out[m, n] = sum_g scale[n, g] * sum_{k in g} (code(n, k) -
// zero[n, g]) * x[m, k] (+ bias[n]). Groups are contiguous runs of group_size columns; group_size is a multiple
// of 2 * lanes (kI4) or lanes (kU8). The caller prepares x: kI4 rows are laid out per block of 2 * lanes columns
// as [the even columns, the odd columns]; xsum[m, g, lane] is the lane-wise sum of the prepared row over group g
// (for kI4 the even and odd halves of each block both added into the lane).
struct QuantMatmulArgs {
  const float* x = nullptr;       // [M, K] prepared f32
  const float* xsum = nullptr;    // [M, groups, lanes]
  const uint8_t* codes = nullptr; // [N, K] kI4 (low nibble = even k) or kU8
  DType codes_dtype = DType::kI4;
  const float* scales = nullptr;  // [N, groups]
  const float* zeros = nullptr;   // [N, groups] or null (8 for kI4, 128 for kU8)
  const float* bias = nullptr;    // [N] or null
  float* out = nullptr;           // [M, N]
  int64_t m = 0, k = 0, n = 0, groups = 0, group_size = 0;
};

// int8 W8A8 matmul (int8_matmul_impl.h): out[m, n] = float(sum_k x[m, k] * w[n, k]) * x_scale[m] *
// w_scale[n / block_rows] (+ bias[n]), the sum exact in int32. x is quantized by the caller (ops::quantize_act_int8)
// and x_sum[m] = sum_k x[m, k].
struct Int8MatmulArgs {
  const int8_t* x = nullptr;        // [M, K]
  const float* x_scale = nullptr;   // [M]
  const int32_t* x_sum = nullptr;   // [M]
  const int8_t* w = nullptr;        // [N, K]
  const float* w_scale = nullptr;   // [ceil(N / block_rows)]
  int64_t block_rows = 1;
  const float* bias = nullptr;      // [N] or null
  float* out = nullptr;             // [M, N]
  int64_t m = 0, k = 0, n = 0;
};

// W4A8 matmul (w4a8_matmul_impl.h): symmetric int4 codes (kI4, midpoint 8) times int8 activations quantized per
// row by the caller (ops::quantize_act_int8), integer dot products per group:
//   out[m, n] = x_scale[m] * sum_g scales[n, g] * (sum_{k in g} x[m, k] * code(n, k) - 8 * sum_{k in g} x[m, k])
// (+ bias[n]); the sum inside is exact in int32 (kept per accumulator lane), each group is scaled once in f32.
// The caller prepares x per block of 2 * step columns as [the even columns, the odd columns] (code byte b of the
// block holds columns 2b and 2b + 1), and x_corr[m, g, lane] = 8 * the sum of the prepared row over group g of
// the bytes b with lane(b) = b * lanes / step of both halves. Groups are contiguous runs of group_size columns,
// group_size a multiple of 2 * step and K = groups * group_size.
struct W4A8MatmulArgs {
  const int8_t* x = nullptr;        // [M, K] prepared int8
  const int32_t* x_corr = nullptr;  // [M, groups, lanes]
  const float* x_scale = nullptr;   // [M]
  const uint8_t* codes = nullptr;   // [N, K / 2] (low nibble = even k)
  const float* scales = nullptr;    // [N, groups]
  const float* bias = nullptr;      // [N] or null
  float* out = nullptr;             // [M, N]
  int64_t m = 0, k = 0, n = 0, groups = 0, group_size = 0;
};
using W4A8MatmulFn = void (*)(const W4A8MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end);
struct W4A8Kernel {
  W4A8MatmulFn fn = nullptr;
  int step = 0;   // code bytes per dot product (int8 columns per half block)
  int lanes = 1;  // int32 accumulator lanes
  const char* name = "";
};

// Paged attention (semantics in ops/ops.h, AttentionParams), f32 queries and outputs.
struct AttentionArgs {
  const float* q = nullptr;       // [T, hq, hd]
  const void* k_cache = nullptr;  // [num_blocks, block_size, hkv, hd]
  const void* v_cache = nullptr;  // [num_blocks, block_size, hkv, hd]
  DType cache_dtype = DType::kF32;          // f32/bf16/f16, or int8 / fp8 e4m3 codes with the scales below
  const float* k_scales = nullptr;           // quantized caches: [num_blocks * block_size, hkv] (ops.h)
  const float* v_scales = nullptr;
  float* out = nullptr;                      // [T, hq, hd]
  const int32_t* query_start_loc = nullptr;  // [S + 1]
  const int32_t* seq_lens = nullptr;         // [S]
  const int32_t* block_tables = nullptr;     // [R, max_blocks]
  const int32_t* table_index = nullptr;      // [S] the block-table row of each sequence; null: row s
  int64_t hq = 0, hkv = 0, hd = 0, block_size = 0, max_blocks = 0;
  float scale = 1.0f;
  int sliding_window = 0;
};

// Keys are visited in tiles of whole blocks (about kAttentionTileKeys, one online-softmax step each) and tiles
// are grouped in segments (about kAttentionSegmentKeys); both are aligned to positions.
// NOTE determinism: a query's softmax state is built per segment (online over its tiles) and the segments'
// states are merged left to right, always; so a long decode may be split over threads by segment (partial
// states merged afterwards) and give the same bits as the same query inside a prefill chunk.
constexpr int64_t kAttentionTileKeys = 64;
constexpr int64_t kAttentionSegmentKeys = 256;
// NOTE: static (internal linkage): these are also used inside the ISA-flagged kernel TUs.
static inline int64_t attention_tile_keys(int64_t block_size) {
  return block_size >= kAttentionTileKeys ? block_size : kAttentionTileKeys / block_size * block_size;
}
static inline int64_t attention_segment_keys(int64_t block_size) {
  const int64_t tile = attention_tile_keys(block_size);
  return tile >= kAttentionSegmentKeys ? tile : kAttentionSegmentKeys / tile * tile;
}

// One unit of attention work: query rows [row_begin, row_end) (0-based within the sequence) of every query
// head, over key segments [seg_begin, seg_end). Each K/V tile is read once per item for all heads.
struct AttentionItem {
  int32_t seq = 0;
  int32_t row_begin = 0;
  int32_t row_end = 0;
  int32_t seg_begin = 0;
  int32_t seg_end = 0;
  // A token-tree row (one row per item): its keys at positions >= tail_from live at sequence slots tail[pos -
  // tail_from] (its path), and the row sits at position tail_from + tail_len - 1. Null for causal rows.
  const int32_t* tail = nullptr;
  int32_t tail_from = 0;
  int32_t tail_len = 0;
};

// Floats of one softmax state (m, l, acc) for `rows` query rows of every head; head_dim padded to 16.
static inline int64_t attention_state_floats(const AttentionArgs& a, int64_t rows) {
  return rows * a.hq * ((a.hd + 15) / 16 * 16 + 2);
}
// Floats of scratch one attention item (or merge) needs for `rows` query rows.
static inline int64_t attention_scratch_floats(const AttentionArgs& a, int64_t rows) {
  const int64_t hd_pad = (a.hd + 15) / 16 * 16;
  const int64_t tile = attention_tile_keys(a.block_size);
  return 2 * attention_state_floats(a, rows) + rows * a.hq * hd_pad + 2 * a.hkv * tile * hd_pad + tile + 16;
}

struct KernelTable {
  const char* name = "";
  int lanes = 1;
  // Columns [n_begin, n_end) of rows [m_begin, m_end).
  void (*matmul)(const MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end) = nullptr;
  void (*qmatmul)(const QuantMatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end) = nullptr;
  void (*i8matmul)(const Int8MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end) = nullptr;
  const char* i8_name = "";  // which int8 dot product i8matmul uses
  W4A8Kernel w4a8;           // int4 x int8 dot products (W4A8)
  // Attention of one item. With partial null the item covers every segment its rows see and writes out;
  // otherwise the item has exactly one segment and stores that segment's state (attention_state_floats) there.
  void (*attention)(const AttentionArgs& a, const AttentionItem& item, float* scratch, float* partial) = nullptr;
  // Merges the per-segment states of rows [row_begin, row_end) of item.seq, stored one after another for
  // segments [seg_begin, seg_end), left to right, and writes out.
  void (*attention_merge)(const AttentionArgs& a, const AttentionItem& item, const float* partials,
                          float* scratch) = nullptr;
  // One row of h: with residual, residual += x first and the sum is normalised. out may alias x.
  void (*rms_norm_row)(const float* x, float* residual, const float* weight, float* out, int64_t h,
                       float eps) = nullptr;
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
// The AVX-512 VNNI int8 matmul (vpdpbusd; int8_avx512vnni.cpp), null on non-x86 builds; callers check the CPU.
using Int8MatmulFn = void (*)(const Int8MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end);
Int8MatmulFn avx512vnni_i8matmul();
// int8 W8A8 per channel on weights packed "lanes as outputs" (Backend::pack_weight, as ggml_packed.h does for GGUF
// blocks): rows in groups of kI8PackRows (the last padded with zero codes), a group's K / 4 chunks contiguous, chunk
// c = 16 rows x 4 bytes, byte 4r + i = (code[16g + r][4c + i] + 128) as u8; one vpdpbusd adds 4 columns to 16
// outputs, x broadcast 4 codes at a time, no horizontal sum. Int8MatmulArgs as for i8matmul with w the first group;
// groups [g_begin, g_end) of rows [m_begin, m_end). The int32 sums are exact and the float expression after them
// is i8matmul's, so every output is i8matmul's bits.
constexpr int64_t kI8PackRows = 16;
// The packed copy starts with kI8PackHeaderBytes (the magic first), the groups after it (64-byte aligned).
constexpr uint32_t kI8PackMagic = 0x38693850;  // "P8i8"
constexpr size_t kI8PackHeaderBytes = 64;
using Int8PackedFn = void (*)(const Int8MatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t g_begin, int64_t g_end);
Int8PackedFn avx512vnni_i8packed();
// Groups [g0, g1) of w [n, k] (k % 4 == 0) into out (the whole packed weight, n rounded up to 16 rows x k bytes).
void i8_pack_groups(const int8_t* w, int64_t n, int64_t k, uint8_t* out, int64_t g0, int64_t g1);
// The AVX-512 VNNI W4A8 matmul (vpdpbusd on the unsigned codes), fn null on non-x86 builds.
W4A8Kernel avx512vnni_w4a8();

}  // namespace peregrine::cpu
