// Shape and dtype validation of op params, shared by every backend so that all reject the same mistakes
// with the same message. Each check throws Error(kInvalidArgument) naming the op and the field.
#pragma once

#include <span>

#include "ops/ops.h"

namespace peregrine::ops {

void check_embedding(const EmbeddingParams& p);
void check_matmul(const MatmulParams& p);
void check_rms_norm(const RmsNormParams& p);
// Each matmul as check_matmul, and the fusion's fields (ops.h MatmulFusion) against them.
void check_matmul_fusion(std::span<const MatmulParams> ps, const MatmulFusion& f);
void check_rope(const RopeParams& p);
void check_silu_mul(const SiluMulParams& p);
// True for the quantized KV cache dtypes (int8, float8_e4m3fn: codes with per-token-head scales, ops.h).
bool kv_cache_quantized(DType t);
void check_kv_scales(const TensorView& cache, const TensorView& k_scales, const TensorView& v_scales, const char* op);
void check_kv_write(const KvWriteParams& p);
void check_attention(const AttentionParams& p);
// Host backends: tree_parents form a tree per sequence (read from host memory).
void check_tree_parents(const AttentionParams& p);
// Host-side values of block_table_index and the key tails (backends whose inputs are on the host).
void check_attention_indices(const AttentionParams& p);
void check_gather_rows(const GatherRowsParams& p);

bool is_float_dtype(DType t);  // f32, bf16, f16

}  // namespace peregrine::ops
