// llama.cpp's (ggml's) tensor types as GGUF files store them: type ids, block geometry, and the reference
// dequantization of every block-quantized type we read (the block layouts of ggml-common.h, dequantized as
// gguf-py's quants.py / ggml's dequantize_row_* define them). Backends compute on these blocks directly; this
// scalar code is the oracle their kernels are tested against and what the ref backend uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace peregrine {

// The numeric ids are ggml's (they are what a GGUF tensor info stores).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kIQ4_XS = 23,
  kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
  kNone = 0xffffffffu,  // not a ggml type: "no block quantization" in ops::WeightQuant
};

// "Q4_K", "F16", ... (ggml's names); "type 31" for ids we do not know.
std::string ggml_type_name(GgmlType t);
// Known id -> type (every id above); nullopt for others.
std::optional<GgmlType> ggml_type_from_id(uint32_t id);

struct GgmlBlockInfo {
  int64_t block_size;  // values per block (1 for plain types)
  int64_t type_size;   // bytes per block
};
// Geometry of a type; nullopt for types whose layout we do not know (the IQ family, TQ, MXFP4).
std::optional<GgmlBlockInfo> ggml_block_info(GgmlType t);

// True for the block-quantized types Peregrine computes on (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K).
bool ggml_is_supported_block_type(GgmlType t);

// Bytes of one row of `n` values (n must be a multiple of the block size; throws otherwise).
size_t ggml_row_bytes(GgmlType t, int64_t n);

// Dequantizes `n` values (a multiple of the block size) of a supported block type, or F32/F16/BF16, into dst.
// Throws Error(kUnsupported) naming the type for anything else.
void ggml_dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace peregrine
