// Device building blocks of the tensor-core attention kernels: cp.async (zero-filling), ldmatrix, mma.sync
// m16n8k16 (bf16/f16 in, f32 accumulate), XOR-swizzled [rows][D] shared-memory tiles, the paged K/V tile
// loader and per-row online-softmax state. Fragment layouts follow the PTX ISA's m16n8k16 description.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_wgmma.cuh"  // wg::sw128, the wgmma kernel's tile layout (convert_kv_codes' kAtoms)

namespace peregrine::cuda::attn {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global->shared; when !valid nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b for one m16n8k16 tile; T is __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Packs two floats into a b16x2 register (lo = first, the lower column).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Byte offset of the 16-byte chunk holding (row, col) in a [rows][D] b16 tile whose chunks are XOR-swizzled
// by row % 8 (so ldmatrix's 8 rows hit 8 different bank groups). col is a multiple of 8; D >= 64.
template <int D> __device__ __forceinline__ uint32_t swizzle(int row, int col) {
  return static_cast<uint32_t>(row * D * 2 + ((((col >> 3) ^ (row & 7))) << 4));
}

// ---- prefill CTAs over packed (token, head) rows: packed row pr is token pr / group, query head kvh * group + pr % group

// Packed rows [r0, r0 + kRows) of q ([tokens, num_q_heads, D]) into shared memory, 16-byte chunk `chunk` of tile row r
// at q_s + at(r, chunk) (the kernel's tile layout); rows past `rows` zero-filled. Threads tid, tid + n, ... copy.
template <typename T, int D, int kRows, typename At>
__device__ __forceinline__ void load_q_rows(uint32_t q_s, const T* q, int num_q_heads, int r0, int rows, int q0,
                                            int group, int kvh, int tid, int n, At&& at) {
  for (int id = tid; id < kRows * (D / 8); id += n) {
    const int r = id / (D / 8), chunk = id % (D / 8);
    const int pr = r0 + r;
    const bool valid = pr < rows;
    const T* src = q;
    if (valid)
      src = q + (static_cast<int64_t>(q0 + pr / group) * num_q_heads + kvh * group + pr % group) * D + chunk * 8;
    cp_async16(q_s + at(r, chunk), src, valid);
  }
}

// A thread's two rows (g and g + 8 of its warp's 16, the m16n8 fragment rows) from the warp's first packed row pr0:
// whether they exist, their positions and their sliding-window starts.
__device__ __forceinline__ void thread_rows(int pr0, int g, int rows, int group, int first_pos, int window,
                                            bool (&ok)[2], int (&pos)[2], int (&lo)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = pr0 + g + 8 * i;
    ok[i] = pr < rows;
    pos[i] = first_pos + pr / group;
    lo[i] = window > 0 ? pos[i] - window + 1 : 0;
  }
}

// Where a KV head's rows live in the paged cache: key j sits in slot table[j / block_size] * block_size +
// j % block_size, at element slot * row_stride + head_offset (shift/mask when block_size is a power of 2).
struct PagedKv {
  const int32_t* table;  // this sequence's block-table row
  int block_size;
  int block_shift;       // log2(block_size), or -1
  int64_t row_stride;    // num_kv_heads * D
  int64_t head_offset;   // kvh * D
  // Remapped keys: positions >= tail_from sit at sequence slots tail[pos - tail_from] (null: none).
  const int32_t* tail = nullptr;
  int tail_from = 0x7fffffff;
};

// The cache slot of key position `key` (a valid key: inside the sequence's visible range).
__device__ __forceinline__ int64_t kv_slot(const PagedKv& kv, int key) {
  const int slot_pos = key >= kv.tail_from ? __ldg(kv.tail + (key - kv.tail_from)) : key;
  int block_index, in_block;
  if (kv.block_shift >= 0) {
    block_index = slot_pos >> kv.block_shift;
    in_block = slot_pos & (kv.block_size - 1);
  } else {
    block_index = slot_pos / kv.block_size;
    in_block = slot_pos % kv.block_size;
  }
  return static_cast<int64_t>(__ldg(kv.table + block_index)) * kv.block_size + in_block;
}

// The 16-byte chunks of a tile's kKeys key rows (kChunksPerRow a row, kChunkElems cache elements each), spread over
// kThreads threads: copy(row, chunk, offset, valid) for each, offset the chunk's first element in the cache (0 for a
// key outside [lo, hi), whose block-table entry may be a hole: copied as zeros, never read).
template <int kKeys, int kChunksPerRow, int kChunkElems, int kThreads, typename Copy>
__device__ __forceinline__ void for_each_kv_chunk(const PagedKv& kv, int tile_start, int lo, int hi, Copy&& copy) {
  constexpr int kChunks = kKeys * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int id = i * kThreads + static_cast<int>(threadIdx.x);
    const int row = id / kChunksPerRow, chunk = id % kChunksPerRow;
    const int key = tile_start + row;
    const bool valid = key >= lo && key < hi;
    int64_t offset = 0;
    if (valid) offset = kv_slot(kv, key) * kv.row_stride + kv.head_offset + chunk * kChunkElems;
    copy(row, chunk, offset, valid);
  }
}

// Loads keys [tile_start, tile_start + kKeys) into swizzled K and V tiles. Keys outside [lo, hi) are
// zero-filled and never read (their block-table entries may be holes).
template <typename T, int D, int kKeys, int kThreads>
__device__ __forceinline__ void load_kv_tile(uint32_t k_smem, uint32_t v_smem, const T* k_cache, const T* v_cache,
                                             const PagedKv& kv, int tile_start, int lo, int hi) {
  auto copy = [&](int row, int chunk, int64_t offset, bool valid) {
    const uint32_t dst = swizzle<D>(row, chunk * 8);
    cp_async16(k_smem + dst, k_cache + offset, valid);
    cp_async16(v_smem + dst, v_cache + offset, valid);
  };
  for_each_kv_chunk<kKeys, D / 8, 8, kThreads>(kv, tile_start, lo, hi, copy);
}

// ---- 8-bit KV caches (int8 / fp8 e4m3 codes with one f32 scale per (slot, KV head)) ----
// A tile's codes stream into a [kKeys][D] byte staging area with its keys' K and V scales. The codes (not the
// scaled values) become the activation type exactly (every int8 and e4m3 value is a bf16 and an f16 value):
// prefill converts the whole tile into the swizzled b16 tiles its mma loops read (convert_kv_codes); decode
// turns each thread's own fragment words in registers (the fragment layout below). The scales are applied in f32
// to the scores (K) and to the probabilities before they are rounded for the PV mma (V).
enum class KvQuant { kNone, kI8, kF8 };

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// The factor on p * v_scale before it is rounded to T for the PV mma: f16's exponent range would flush small
// products (2^8 keeps every f16-range scale, <= 65504 / 448, finite); the row sums l carry it back.
template <typename T, KvQuant Q>
inline constexpr float kVFactor = (Q != KvQuant::kNone && std::is_same_v<T, __half>) ? 256.0f : 1.0f;

// 8-bit caches: V's per-key scales ride on a thread's probabilities of its two rows (l keeps the unscaled ones), times
// kVFactor. Slot i of s0 / s1 is the mma C fragment's key (i / 2) * 8 + 2 c4 + i % 2 of v_scale's keys.
template <typename T, KvQuant Q, int N>
__device__ __forceinline__ void scale_probabilities(float (&s0)[N], float (&s1)[N], const float* v_scale, int c4) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float vs = kVFactor<T, Q> * v_scale[(i / 2) * 8 + c4 * 2 + i % 2];
    s0[i] *= vs;
    s1[i] *= vs;
  }
}

__device__ __forceinline__ void lds128(uint32_t addr, uint32_t (&w)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void lds64(uint32_t addr, uint32_t& w0, uint32_t& w1) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(w0), "=r"(w1) : "r"(addr) : "memory");
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t w;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w) : "r"(addr) : "memory");
  return w;
}

// Byte layout of one staging area: K codes, V codes, K scales, V scales.
template <int D, int kKeys> struct CodeStage {
  static constexpr int kCodeBytes = kKeys * D;
  static constexpr int kKScales = 2 * kCodeBytes;
  static constexpr int kVScales = kKScales + kKeys * 4;
  static constexpr int kBytes = kVScales + kKeys * 4;
};

// Where 16-byte chunk c of a staged row lives (in chunks from the row's start). The plain layout (kFrag false) is
// read by convert_kv_codes; the fragment layout (kFrag true) by the decode kernel, which loads mma fragments straight
// from the codes: K rows as 16-byte loads by (row, chunk c4 + 4h) -- XOR 4 by row parity keeps a quarter-warp's two
// rows in different banks -- and V rows as 4-byte loads of word 8a + g from rows 2c4 (+1, +8, +9) -- XOR 2 * c4 spreads
// the four rows over the banks (at D = 64 two of them still share).
template <int D, bool kFrag> __device__ __forceinline__ int k_code_chunk(int row, int c) {
  if constexpr (!kFrag || D < 128) return c;
  else return c ^ (4 * (row & 1));
}
template <int D, bool kFrag> __device__ __forceinline__ int v_code_chunk(int row, int c) {
  if constexpr (!kFrag) return c;
  else if constexpr (D < 128) return c ^ (2 * ((row >> 1) & 1));
  else return c ^ (2 * ((row >> 1) & 3));
}

template <int D, int kKeys, int kThreads, bool kFrag = false>
__device__ __forceinline__ void load_kv_codes(uint32_t stage, const uint8_t* k_cache, const uint8_t* v_cache,
                                              const float* k_scales, const float* v_scales, const PagedKv& kv,
                                              int tile_start, int lo, int hi) {
  using S = CodeStage<D, kKeys>;
  auto copy = [&](int row, int chunk, int64_t offset, bool valid) {
    cp_async16(stage + row * D + k_code_chunk<D, kFrag>(row, chunk) * 16, k_cache + offset, valid);
    cp_async16(stage + S::kCodeBytes + row * D + v_code_chunk<D, kFrag>(row, chunk) * 16, v_cache + offset, valid);
  };
  for_each_kv_chunk<kKeys, D / 16, 16, kThreads>(kv, tile_start, lo, hi, copy);
  for (int id = threadIdx.x; id < 2 * kKeys; id += kThreads) {
    const bool is_v = id >= kKeys;
    const int row = is_v ? id - kKeys : id;
    const int key = tile_start + row;
    const bool valid = key >= lo && key < hi;
    int64_t index = 0;  // (slot, KV head)
    if (valid) index = (kv_slot(kv, key) * kv.row_stride + kv.head_offset) / D;
    cp_async4(stage + S::kKScales + id * 4, (is_v ? v_scales : k_scales) + index, valid);
  }
}

// Codes 2h and 2h + 1 of w (h = 0 or 1, known at compile time where unrolled) as an f16 pair, the lower code in
// the lower half. f16 holds every e4m3 and int8 value: e4m3 by the hardware's paired conversion (sm_89 on), one
// instruction per two codes; int8 as (1024 + (c + 128)) - 1152.
template <KvQuant Q> __device__ __forceinline__ uint32_t code_pair_f16(uint32_t w, int h) {
  uint32_t r;
  if constexpr (Q == KvQuant::kF8) {
    if (h) {
      asm("{\n.reg .b16 l, u;\nmov.b32 {l, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, u;\n}\n" : "=r"(r) : "r"(w));
    } else {
      asm("{\n.reg .b16 l, u;\nmov.b32 {l, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, l;\n}\n" : "=r"(r) : "r"(w));
    }
  } else {
    const uint32_t a = __byte_perm(w, 0, h ? 0x4342 : 0x4140);  // codes in bits 0..7, 16..23
    const uint32_t pa = (a ^ 0x00800080u) | 0x64006400u;
    const __half2 x = __hsub2(*reinterpret_cast<const __half2*>(&pa),
                              __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)));
    r = *reinterpret_cast<const uint32_t*>(&x);
  }
  return r;
}

// Four codes (byte i = element i) as four b16 values, elements 0,1 in lo and 2,3 in hi.
template <typename T, KvQuant Q>
__device__ __forceinline__ void codes_to_b16(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if constexpr (std::is_same_v<T, __half>) {
    lo = code_pair_f16<Q>(w, 0);
    hi = code_pair_f16<Q>(w, 1);
  } else if constexpr (Q == KvQuant::kF8) {
    // The code's exponent and mantissa bits moved into bf16's fields give the value times 2^-120 (subnormals
    // alike); one exact multiply by a power of two restores it.
    const uint32_t a = __byte_perm(w, 0, 0x1404), b = __byte_perm(w, 0, 0x3424);  // codes in bits 8..15, 24..31
    const uint32_t ra = (a & 0x80008000u) | ((a >> 4) & 0x07f007f0u);
    const uint32_t rb = (b & 0x80008000u) | ((b >> 4) & 0x07f007f0u);
    const __nv_bfloat162 k = __halves2bfloat162(__ushort_as_bfloat16(0x7B80), __ushort_as_bfloat16(0x7B80));  // 2^120
    __nv_bfloat162 x = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&ra), k);
    __nv_bfloat162 y = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&rb), k);
    lo = *reinterpret_cast<uint32_t*>(&x);
    hi = *reinterpret_cast<uint32_t*>(&y);
  } else {
    // bf16 0x4300 | u is 128 + u for u < 128: (128 + (c & 127)) - (128 or 256 by c's sign bit) = c.
    const uint32_t a = __byte_perm(w, 0, 0x4140), b = __byte_perm(w, 0, 0x4342);  // codes in bits 0..7, 16..23
    const uint32_t pa = (a & 0x007f007fu) | 0x43004300u, na = (a & 0x00800080u) | 0x43004300u;
    const uint32_t pb = (b & 0x007f007fu) | 0x43004300u, nb = (b & 0x00800080u) | 0x43004300u;
    __nv_bfloat162 x = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&pa),
                               *reinterpret_cast<const __nv_bfloat162*>(&na));
    __nv_bfloat162 y = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&pb),
                               *reinterpret_cast<const __nv_bfloat162*>(&nb));
    lo = *reinterpret_cast<uint32_t*>(&x);
    hi = *reinterpret_cast<uint32_t*>(&y);
  }
}

// Staged codes -> swizzled K and V tiles of T (what load_kv_tile would have written for a T cache holding the
// codes' values). Call between barriers: after the stage's cp.async group completed, before the mma loops.
// kAtoms: the tiles in the wgmma kernel's layout instead (attention_wgmma.cuh's sw128).
template <typename T, KvQuant Q, int D, int kKeys, int kThreads, bool kAtoms = false>
__device__ __forceinline__ void convert_kv_codes(uint32_t stage, uint32_t k_smem, uint32_t v_smem) {
  using S = CodeStage<D, kKeys>;
  constexpr int kChunksPerRow = D / 16;
  constexpr int kChunks = kKeys * kChunksPerRow;
  static_assert((2 * kChunks) % kThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < 2 * kChunks / kThreads; ++i) {
    const int id = i * kThreads + static_cast<int>(threadIdx.x);
    const bool is_v = id >= kChunks;
    const int c = is_v ? id - kChunks : id;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    uint32_t w[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(stage + (is_v ? S::kCodeBytes : 0) + row * D + chunk * 16)
                 : "memory");
    uint32_t o[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) codes_to_b16<T, Q>(w[j], o[2 * j], o[2 * j + 1]);
    const uint32_t dst = is_v ? v_smem : k_smem;
    auto at = [&](int c8) -> uint32_t {  // the 16-byte chunk c8 (8 values) of row `row`
      if constexpr (kAtoms) return wg::sw128(row, c8, kKeys);
      else return swizzle<D>(row, c8 * 8);
    };
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + at(2 * chunk)), "r"(o[0]),
                 "r"(o[1]), "r"(o[2]), "r"(o[3])
                 : "memory");
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + at(2 * chunk + 1)),
                 "r"(o[4]), "r"(o[5]), "r"(o[6]), "r"(o[7])
                 : "memory");
  }
}

// Multiplies the accumulators by the rows' softmax rescale factors, skipped (bit-identical) when every
// factor in the warp is 1, i.e. no row's running max moved -- the common case once a row has seen keys.
template <int N>
__device__ __forceinline__ void rescale_rows(float (&o)[N][4], float alpha0, float alpha1) {
  if (!__any_sync(0xffffffffu, alpha0 != 1.f || alpha1 != 1.f)) return;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    o[i][0] *= alpha0;
    o[i][1] *= alpha0;
    o[i][2] *= alpha1;
    o[i][3] *= alpha1;
  }
}

// 2^x in one MUFU.EX2: ex2.approx with its input and output flushed to zero, where exp2f (no fast-math build)
// adds a range fix-up around it for subnormal results. Differs from exp2f only where the result is below 2^-126
// (a probability 87 nats under the row's max): 0 here. exp2(-inf) = 0 and exp2(0) = 1 exactly, as before.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online-softmax update of one row fragment: s holds this thread's scores (already scaled to log2 units,
// -inf where masked); the row max is reduced over the 4 threads of a quad. Returns the factor that rescales
// the old accumulators; s is overwritten with the probabilities.
template <int N>
__device__ __forceinline__ float softmax_update(float (&s)[N], float& m, float& l) {
  float mx = m;
#pragma unroll
  for (int i = 0; i < N; ++i) mx = fmaxf(mx, s[i]);
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float base = mx == -INFINITY ? 0.f : mx;  // a row with no visible key yet keeps o = 0, l = 0
  const float alpha = fast_exp2(m - base);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s[i] = fast_exp2(s[i] - base);
    sum += s[i];
  }
  l = l * alpha + sum;
  m = mx;
  return alpha;
}

}  // namespace peregrine::cuda::attn
