// Device building blocks of the tensor-core attention kernels: cp.async (zero-filling), ldmatrix, mma.sync
// m16n8k16 (bf16/f16 in, f32 accumulate), XOR-swizzled [rows][D] shared-memory tiles, the paged K/V tile
// loader and per-row online-softmax state. Fragment layouts follow the PTX ISA's m16n8k16 description.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// Loads keys [tile_start, tile_start + kKeys) into swizzled K and V tiles. Keys outside [lo, hi) are
// zero-filled and never read (their block-table entries may be holes).
template <typename T, int D, int kKeys, int kThreads>
__device__ __forceinline__ void load_kv_tile(uint32_t k_smem, uint32_t v_smem, const T* k_cache, const T* v_cache,
                                             const PagedKv& kv, int tile_start, int lo, int hi) {
  constexpr int kChunksPerRow = D / 8;
  constexpr int kChunks = kKeys * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int id = i * kThreads + static_cast<int>(threadIdx.x);
    const int row = id / kChunksPerRow, chunk = id % kChunksPerRow;
    const int key = tile_start + row;
    const bool valid = key >= lo && key < hi;
    int64_t offset = 0;
    if (valid) {
      const int slot_pos = key >= kv.tail_from ? __ldg(kv.tail + (key - kv.tail_from)) : key;
      int block_index, in_block;
      if (kv.block_shift >= 0) {
        block_index = slot_pos >> kv.block_shift;
        in_block = slot_pos & (kv.block_size - 1);
      } else {
        block_index = slot_pos / kv.block_size;
        in_block = slot_pos % kv.block_size;
      }
      const int64_t slot = static_cast<int64_t>(__ldg(kv.table + block_index)) * kv.block_size + in_block;
      offset = slot * kv.row_stride + kv.head_offset + chunk * 8;
    }
    const uint32_t dst = swizzle<D>(row, chunk * 8);
    cp_async16(k_smem + dst, k_cache + offset, valid);
    cp_async16(v_smem + dst, v_cache + offset, valid);
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
  const float alpha = exp2f(m - base);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s[i] = exp2f(s[i] - base);
    sum += s[i];
  }
  l = l * alpha + sum;
  m = mx;
  return alpha;
}

}  // namespace peregrine::cuda::attn
