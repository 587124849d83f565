// The GGUF block kernels built for AVX-512 F/BW/VL + VNNI: the AVX2 traits with the dot products on vpdpbusd /
// vpdpwssd (same integers, one instruction fewer each), the high-bit spread on a byte mask, and a larger tile
// (32 vector registers).
// NOTE: compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/ggml_simd_avx2.h"

namespace {
struct GVnni : GAvx2 {
  static constexpr const char* kName = "avx512-vnni";
  static constexpr int kGemvNr = 4;
  static constexpr int kMr = 4, kNr = 2;    // 32-value types
  static constexpr int kMrK = 8, kNrK = 1;  // K-quants (measured best on Zen 4)
  static I dot(I acc, I u, I s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static I dot_ss(I acc, I w, I x) { return dot(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }
  static I dot_sc(I acc, I u, I s, I sc16) { return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16); }
  static I bits_to_bytes(uint32_t bits, int value) {
    return _mm256_maskz_mov_epi8(static_cast<__mmask32>(bits), _mm256_set1_epi8(static_cast<char>(value)));
  }
};
using G = GVnni;
}  // namespace
#include "backend/cpu/ggml_kernels_impl.h"

namespace peregrine::cpu {

const GgmlKernelTable* ggml_vnni_kernels() {
  static const GgmlKernelTable table = make_ggml_table();
  return &table;
}

}  // namespace peregrine::cpu
