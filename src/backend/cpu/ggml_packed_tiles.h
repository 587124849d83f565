// The dispatch shared by the packed GGUF kernels (ggml_packed_<isa>.cpp): a runtime tile shape (mr rows of x, n
// units of weight rows: groups of 16 on VNNI, slabs of 8 on AVX2) to the TU's compile-time tile, and a block type
// to the TU's typed matmul. K, the TU's kernels (a type local to it, so every instantiation here is the TU's own
// and compiled with its ISA flags), provides
//   template <GgmlType T, int MR, int N> static void tile(const GgmlPackedArgs&, int64_t i0, int64_t u0);
//   template <GgmlType T> static void matmul(const GgmlPackedArgs&, int64_t m0, int64_t m1, int64_t g0, int64_t g1);
// NOTE: include only from a ggml_packed_<isa>.cpp.
#pragma once

#include <cstdint>

#include "backend/cpu/ggml_packed.h"

namespace peregrine::cpu::packed {

// tile<T, MR, n> for a runtime n in [1, N].
template <class K, GgmlType T, int MR, int N>
void tile_n(int n, const GgmlPackedArgs& a, int64_t i0, int64_t u0) {
  if (n == N) return K::template tile<T, MR, N>(a, i0, u0);
  if constexpr (N > 1) return tile_n<K, T, MR, N - 1>(n, a, i0, u0);
}
// tile<T, mr, n> for a runtime mr in [1, MR] and n in [1, N].
template <class K, GgmlType T, int MR, int N>
void tile_mn(int mr, int n, const GgmlPackedArgs& a, int64_t i0, int64_t u0) {
  if (mr == MR) return tile_n<K, T, MR, N>(n, a, i0, u0);
  if constexpr (MR > 1) return tile_mn<K, T, MR - 1, N>(mr, n, a, i0, u0);
}

// The GgmlPackedMatmulFn of a TU: rows [m0, m1) of x against groups [g0, g1), by block type.
template <class K>
void matmul_by_type(const GgmlPackedArgs& a, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  if (m0 >= m1 || g0 >= g1) return;
  switch (a.type) {
    case GgmlType::kQ4_0: return K::template matmul<GgmlType::kQ4_0>(a, m0, m1, g0, g1);
    case GgmlType::kQ8_0: return K::template matmul<GgmlType::kQ8_0>(a, m0, m1, g0, g1);
    case GgmlType::kQ4_1: return K::template matmul<GgmlType::kQ4_1>(a, m0, m1, g0, g1);
    case GgmlType::kQ5_0: return K::template matmul<GgmlType::kQ5_0>(a, m0, m1, g0, g1);
    case GgmlType::kQ5_1: return K::template matmul<GgmlType::kQ5_1>(a, m0, m1, g0, g1);
    case GgmlType::kQ4_K: return K::template matmul<GgmlType::kQ4_K>(a, m0, m1, g0, g1);
    case GgmlType::kQ5_K: return K::template matmul<GgmlType::kQ5_K>(a, m0, m1, g0, g1);
    case GgmlType::kQ6_K: return K::template matmul<GgmlType::kQ6_K>(a, m0, m1, g0, g1);
    default: return;  // validated by the caller
  }
}

}  // namespace peregrine::cpu::packed
