// 8-bit weight matmuls of the CPU backend (int8 and fp8 e4m3 codes, W8A8 activation quantization), kept apart
// from cpu_backend.cpp's dispatch: matmul() hands every such op here.
#pragma once

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace peregrine::ops {

// True when p's weight is 8-bit codes (kI8, kF8E4M3) or asks for quantized activations (W8A8 and W4A8).
bool is_w8_matmul(const MatmulParams& p);

// int8 W8A8 with one scale per output row (or row block) and per-token activations runs the int8 kernel `i8`
// (x quantized once per matmul, exact int32 dot products); every other 8-bit case dequantizes each weight row
// in f32 and dots it with x (quantized and dequantized first when the op asks for it): correct, not fast.
// W4A8 (symmetric kI4 codes, contiguous groups, int8 activations per token) runs the int4 x int8 kernel `w4`
// when its step divides the group (else the portable one when its step does, else the generic path).
void w8_matmul(const MatmulParams& p, const cpu::KernelTable& k, cpu::Int8MatmulFn i8, const cpu::W4A8Kernel& w4,
               ThreadPool& pool);

// int8 W8A8 per channel with per-token activations (int8_fast_path's case) whose K is a multiple of 4: the weights
// pack_w8a8_int8 can pack for `fn` (Int8PackedFn).
bool w8a8_int8_packable(const TensorView& w, const WeightQuant& q);
// The packed copy (header, then cpu::i8_pack_groups' groups), split over `pool`; empty when w is not packable.
DeviceBuffer pack_w8a8_int8(Backend& backend, const TensorView& w, const WeightQuant& q, ThreadPool& pool);
// True when p.quant.packed is pack_w8a8_int8's copy.
bool is_w8a8_int8_packed(const MatmulParams& p);
// p on its packed copy with the packed kernel `fn`: the same bits as w8_matmul on the plain codes (x quantized
// once per matmul as there; M = 1 split over groups of 16 rows taken by the threads as they come free).
void w8a8_packed_matmul(const MatmulParams& p, const cpu::KernelTable& k, cpu::Int8PackedFn fn, ThreadPool& pool);

}  // namespace peregrine::ops
