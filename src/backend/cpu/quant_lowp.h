// W4A16 / W8A16 weights on the packed GGUF kernels, with int8 activations (the CPU backend's default for them).
//
// On a CPU without bf16 dot products the float path (quant_matmul_impl.h: codes widened to f32, one FMA per weight)
// is bound by arithmetic, not by memory: on a 2-core AVX2 machine it runs W4A16 at a third of the bandwidth its
// bytes allow. The integer kernels of GGUF blocks (ggml_packed.h: vpmaddubsw / vpdpbusd on int8 x, 16 rows a vector)
// do 32 weights per instruction pair. So at load the CPU backend rewrites each W4A16 / W8A16 weight whose layout
// allows it as GGUF blocks of 32 values and packs those; the matmul then quantizes x per block of 32 to int8
// (scale amax / 127, as llama.cpp's CPU matmuls do, and as vLLM's CPU backend does for AWQ / GPTQ through IPEX's
// int8 "lowp" mode). The weights convert exactly except for the scale, which a block stores as f16:
//   symmetric int4 (zero 8, or every zero point 8)        -> Q4_0: d = f16(scale), q = code
//   int4 with other zero points                            -> Q4_1: d = f16(scale), m = f16(-scale * zero), q = code
//   uint8 with zero 128 (symmetric W8A16)                  -> Q8_0: d = f16(scale), q = code - 128
// With act-order (`perm`: code columns sorted by group) the blocks hold the code columns and x is gathered into
// code-column order before it is rounded, so x's blocks of 32 are taken in that order.
// A weight converts only when: no irregular g_idx, one row of scales per output (block_rows 1),
// groups and K multiples of 32, and every scale (and Q4_1 min) a normal f16 or zero — a scale outside f16's
// normal range would lose bits, so that weight keeps the float path. W8A8 / W4A8 (act != kNone) never convert:
// their activation rule is the op's own.
// PEREGRINE_CPU_INT8_ACT=0 keeps every W4A16 / W8A16 weight on the float path (exact to the op definition).
#pragma once

#include <cstdint>

#include "core/ggml_quant.h"
#include "ops/ops.h"

namespace peregrine::cpu {

// The block type w converts to, or kNone when it keeps the float path (see above).
GgmlType lowp_block_type(const TensorView& w, const ops::WeightQuant& q);

// Rows [r0, r1) of w as GGUF blocks of type t (lowp_block_type's answer), each row ggml_row_bytes(t, K) bytes,
// written to out (row r0 first).
void lowp_rows_to_ggml(GgmlType t, const TensorView& w, const ops::WeightQuant& q, int64_t r0, int64_t r1,
                       uint8_t* out);

// The packed copy's header (Backend::pack_weight's buffer starts with it; the packed groups follow at
// kLowpHeaderBytes, keeping their 64-byte alignment).
struct LowpHeader {
  uint32_t magic = 0;
  GgmlType type = GgmlType::kNone;
};
constexpr uint32_t kLowpMagic = 0x70774c34;  // "4Lwp"
constexpr size_t kLowpHeaderBytes = 64;

}  // namespace peregrine::cpu
