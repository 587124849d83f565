// The int8 W8A8 matmul on AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
// w + 128 (one xor per 64 weights, shared by every row of the tile) and 128 * sum(x) comes off at the end.
// NOTE: compiled with -mavx512vnni (src/backend/cpu/CMakeLists.txt); the backend calls it only when the CPU has it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/i4dot_avx512.h"

namespace {

struct I8Dot {
  static constexpr int64_t kBytes = 64;
  static constexpr int32_t kBias = 128;
  static constexpr int kGemvNr = 4, kGemmMr = 4, kGemmNr = 4;
  static constexpr const char* kName = "avx512 vnni";
  using Acc = __m512i;
  using W = __m512i;
  using X = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static W load_w(const int8_t* p) { return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(static_cast<char>(0x80))); }
  static X load_x(const int8_t* p) { return _mm512_loadu_si512(p); }
  static Acc dot(Acc acc, W w, X x) { return _mm512_dpbusd_epi32(acc, w, x); }
  static int32_t hsum(Acc v) { return _mm512_reduce_add_epi32(v); }
};

// W4A8: the unpacked codes (0..15) are vpdpbusd's unsigned operand as they are; x the signed one.
struct I4Dot : I4DotAvx512Base {
  static constexpr const char* kName = "avx512 vnni";
  static Acc dot2(Acc acc, W lo, X xe, W hi, X xo) { return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, lo, xe), hi, xo); }
};

}  // namespace

#include "backend/cpu/int8_matmul_impl.h"
#include "backend/cpu/w4a8_matmul_impl.h"

namespace peregrine::cpu {

Int8MatmulFn avx512vnni_i8matmul() { return i8matmul_kernel; }
W4A8Kernel avx512vnni_w4a8() { return w4a8_kernel_info(); }

}  // namespace peregrine::cpu
