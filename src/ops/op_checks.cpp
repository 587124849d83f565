// Validation of op params (see op_checks.h).
#include "ops/op_checks.h"

#include <string>

#include "core/status.h"

namespace peregrine::ops {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, std::string(op) + ": " + what);
}

void require(bool cond, const char* op, const std::string& what) {
  if (!cond) fail(op, what);
}

void require_dims(const TensorView& t, int ndim, const char* op, const char* field) {
  if (t.data == nullptr) fail(op, std::string(field) + " is empty");
  if (t.ndim != ndim)
    fail(op, std::string(field) + " must have " + std::to_string(ndim) + " dims, has shape " + t.shape_string());
}

void require_float(const TensorView& t, const char* op, const char* field) {
  if (!is_float_dtype(t.dtype))
    fail(op, std::string(field) + " has dtype " + std::string(dtype_name(t.dtype)) + ", expected a float dtype");
}

void require_dtype(const TensorView& t, DType want, const char* op, const char* field) {
  if (t.dtype != want)
    fail(op, std::string(field) + " has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                 std::string(dtype_name(want)));
}

}  // namespace

bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

void check_embedding(const EmbeddingParams& p) {
  const char* op = "embedding";
  require_dims(p.token_ids, 1, op, "token_ids");
  require_dtype(p.token_ids, DType::kI32, op, "token_ids");
  require_dims(p.table, 2, op, "table");
  require_dims(p.out, 2, op, "out");
  require_float(p.out, op, "out");
  if (p.table_ggml != GgmlType::kNone) {
    require(ggml_is_supported_block_type(p.table_ggml) || p.table_ggml == GgmlType::kF32 ||
                p.table_ggml == GgmlType::kF16 || p.table_ggml == GgmlType::kBF16,
            op, "table_ggml " + ggml_type_name(p.table_ggml) + " is not a supported ggml type");
    require_dtype(p.table, DType::kU8, op, "table (ggml blocks)");
    require(p.out.dim(0) == p.token_ids.dim(0), op, "out must have one row per token id");
    require(p.out.dim(1) % ggml_block_info(p.table_ggml)->block_size == 0 &&
                static_cast<size_t>(p.table.dim(1)) == ggml_row_bytes(p.table_ggml, p.out.dim(1)),
            op, "table " + p.table.shape_string() + " does not hold " + std::to_string(p.out.dim(1)) + " " +
                    ggml_type_name(p.table_ggml) + " values per row");
    return;
  }
  require_float(p.table, op, "table");
  require(p.out.dim(0) == p.token_ids.dim(0) && p.out.dim(1) == p.table.dim(1), op,
          "out shape " + p.out.shape_string() + " does not match token_ids/table");
}

void check_matmul(const MatmulParams& p) {
  const char* op = "matmul";
  require_dims(p.x, 2, op, "x");
  require_dims(p.w, 2, op, "w");
  require_dims(p.out, 2, op, "out");
  require_float(p.x, op, "x");
  require_float(p.out, op, "out");
  if (p.quant.ggml_blocks()) {
    const WeightQuant& q = p.quant;
    require(ggml_is_supported_block_type(q.ggml), op,
            "quant.ggml " + ggml_type_name(q.ggml) + " is not a supported block type");
    require(q.scales.empty() && q.zeros.empty() && q.g_idx.empty() && q.perm.empty(), op,
            "ggml block weights carry their own scales: quant.scales/zeros/g_idx/perm must be empty");
    require_dtype(p.w, DType::kU8, op, "w (ggml blocks)");
    const int64_t k = p.x.dim(1);
    require(k % ggml_block_info(q.ggml)->block_size == 0 &&
                static_cast<size_t>(p.w.dim(1)) == ggml_row_bytes(q.ggml, k),
            op, "w " + p.w.shape_string() + " does not hold K = " + std::to_string(k) + " " + ggml_type_name(q.ggml) +
                    " values per row");
    require(p.out.dim(0) == p.x.dim(0) && p.out.dim(1) == p.w.dim(0), op,
            "out shape " + p.out.shape_string() + " must be [M, N]");
    if (!p.bias.empty()) {
      require(p.bias.numel() == p.w.dim(0), op, "bias must have N elements");
      require_float(p.bias, op, "bias");
    }
    return;
  }
  if (p.quant.quantized()) {
    const WeightQuant& q = p.quant;
    const DType c = p.w.dtype;
    require(c == DType::kI4 || c == DType::kU8 || c == DType::kI8 || c == DType::kF8E4M3, op,
            "quantized w must hold int4, uint8, int8 or float8_e4m3fn codes, got " + std::string(dtype_name(c)));
    const int64_t n = p.w.dim(0), k = p.w.dim(1);
    require(c != DType::kI4 || k % 2 == 0, op, "int4 codes need an even K");
    require(q.group_size > 0 && q.group_size <= k, op, "quant.group_size must be in [1, K]");
    require(q.block_rows >= 1, op, "quant.block_rows must be >= 1");
    const int64_t groups = q.g_idx.empty() ? (k + q.group_size - 1) / q.group_size : q.scales.dim(q.scales.ndim - 1);
    require_dims(q.scales, 2, op, "quant.scales");
    require_float(q.scales, op, "quant.scales");
    require(q.scales.dim(0) == (n + q.block_rows - 1) / q.block_rows && q.scales.dim(1) == groups, op,
            "quant.scales shape " + q.scales.shape_string() + " must be [ceil(N / block_rows), groups]");
    if (!q.zeros.empty()) {
      require(q.zeros.dtype == DType::kF32, op, "quant.zeros must be f32");
      require_dims(q.zeros, 2, op, "quant.zeros");
      require(q.zeros.dim(0) == n && q.zeros.dim(1) == groups, op, "quant.zeros must be [N, groups]");
    }
    if (!q.g_idx.empty()) {
      require(q.g_idx.dtype == DType::kI32 && q.g_idx.numel() == k, op, "quant.g_idx must be [K] int32");
    }
    if (!q.perm.empty()) {
      require(q.perm.dtype == DType::kI32 && q.perm.numel() == k, op, "quant.perm must be [K] int32");
    }
    require(q.act_group >= 0 && q.act_group <= k, op, "quant.act_group must be in [0, K]");
    require(q.act == ActQuant::kNone || (q.perm.empty() && q.g_idx.empty()), op,
            "quantized activations (quant.act) are not combined with quant.perm or quant.g_idx");
  } else {
    require_float(p.w, op, "w");
  }
  require(p.x.dim(1) == p.w.dim(1), op,
          "x " + p.x.shape_string() + " and w " + p.w.shape_string() + " disagree on K");
  require(p.out.dim(0) == p.x.dim(0) && p.out.dim(1) == p.w.dim(0), op,
          "out shape " + p.out.shape_string() + " must be [M, N]");
  if (!p.bias.empty()) {
    require(p.bias.numel() == p.w.dim(0), op, "bias must have N elements");
    require_float(p.bias, op, "bias");
  }
}

void check_matmul_fusion(std::span<const MatmulParams> ps, const MatmulFusion& f) {
  const char* op = "matmuls_fused";
  require(!ps.empty(), op, "needs at least one matmul");
  for (const MatmulParams& p : ps) check_matmul(p);
  const MatmulParams& first = ps.front();
  for (const MatmulParams& p : ps)
    require(p.x.data == first.x.data && p.x.dtype == first.x.dtype && p.x.dim(0) == first.x.dim(0) &&
                p.x.dim(1) == first.x.dim(1),
            op, "every matmul of a group must read the same x");
  if (!f.norm_weight.empty()) {
    require(f.norm_weight.numel() == first.x.dim(1), op, "norm_weight must have K elements");
    require(f.norm_weight.dtype == first.x.dtype, op, "norm_weight dtype must equal x dtype");
  }
  if (!f.residual.empty()) {
    require(ps.size() == 1, op, "a residual add takes one matmul");
    require(f.residual.numel() == first.out.numel() && f.residual.dtype == first.out.dtype, op,
            "residual must have out's shape and dtype");
  }
  if (f.silu_mul) {
    require(ps.size() == 2, op, "silu_mul takes two matmuls (gate, up)");
    require(ps[1].out.dim(1) == first.out.dim(1) && ps[1].out.dtype == first.out.dtype, op,
            "silu_mul: gate and up must have one out shape and dtype");
    require(f.residual.empty(), op, "silu_mul and a residual add do not combine");
  }
}

void check_rms_norm(const RmsNormParams& p) {
  const char* op = "rms_norm";
  require_dims(p.x, 2, op, "x");
  require_dims(p.out, 2, op, "out");
  require_float(p.x, op, "x");
  require_float(p.weight, op, "weight");
  require(p.weight.numel() == p.x.dim(1), op, "weight must have H elements");
  require(p.out.dim(0) == p.x.dim(0) && p.out.dim(1) == p.x.dim(1), op, "out shape must equal x shape");
  if (!p.residual.empty()) {
    require(p.residual.numel() == p.x.numel(), op, "residual must have the shape of x");
    require(p.residual.dtype == p.x.dtype, op, "residual dtype must equal x dtype");
  }
}

void check_rope(const RopeParams& p) {
  const char* op = "rope";
  require_dims(p.q, 3, op, "q");
  require_dims(p.k, 3, op, "k");
  require_dims(p.positions, 1, op, "positions");
  require_dtype(p.positions, DType::kI32, op, "positions");
  require_dtype(p.inv_freq, DType::kF32, op, "inv_freq");
  require(p.q.dim(0) == p.positions.dim(0) && p.k.dim(0) == p.positions.dim(0), op,
          "q, k and positions must have T rows");
  require(p.q.dim(2) == p.k.dim(2), op, "q and k head_dim differ");
  require(p.rotary_dim > 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.q.dim(2), op,
          "rotary_dim must be even and within head_dim");
  require(p.inv_freq.numel() == p.rotary_dim / 2, op, "inv_freq must have rotary_dim/2 elements");
}

void check_silu_mul(const SiluMulParams& p) {
  const char* op = "silu_mul";
  require_dims(p.gate, 2, op, "gate");
  require_dims(p.up, 2, op, "up");
  require_dims(p.out, 2, op, "out");
  require(p.gate.numel() == p.up.numel() && p.out.numel() == p.gate.numel(), op, "gate, up, out shapes differ");
}

bool kv_cache_quantized(DType t) { return t == DType::kI8 || t == DType::kF8E4M3; }

void check_kv_scales(const TensorView& cache, const TensorView& k_scales, const TensorView& v_scales, const char* op) {
  if (!kv_cache_quantized(cache.dtype)) {
    require(cache.dtype == DType::kF32 || cache.dtype == DType::kBF16 || cache.dtype == DType::kF16, op,
            "the KV cache must be f32, bf16, f16, int8 or float8_e4m3fn, got " + std::string(dtype_name(cache.dtype)));
    return;
  }
  const int64_t want = cache.dim(0) * cache.dim(1) * cache.dim(2);
  for (const TensorView* s : {&k_scales, &v_scales}) {
    require(!s->empty() && s->dtype == DType::kF32 && s->numel() == want, op,
            "a " + std::string(dtype_name(cache.dtype)) + " KV cache needs f32 k_scales and v_scales of [num_blocks, "
            "block_size, num_kv_heads]");
  }
}

void check_kv_write(const KvWriteParams& p) {
  const char* op = "kv_write";
  require_dims(p.k, 3, op, "k");
  require_dims(p.v, 3, op, "v");
  require_dims(p.slot_mapping, 1, op, "slot_mapping");
  require_dtype(p.slot_mapping, DType::kI32, op, "slot_mapping");
  require_dims(p.k_cache, 4, op, "k_cache");
  require_dims(p.v_cache, 4, op, "v_cache");
  require(p.k.dim(0) == p.slot_mapping.dim(0) && p.v.dim(0) == p.slot_mapping.dim(0), op,
          "k, v and slot_mapping must have T rows");
  require(p.k_cache.dim(2) == p.k.dim(1) && p.k_cache.dim(3) == p.k.dim(2), op,
          "k " + p.k.shape_string() + " does not fit k_cache " + p.k_cache.shape_string());
  require(p.v_cache.numel() == p.k_cache.numel() && p.v_cache.dtype == p.k_cache.dtype, op,
          "k_cache and v_cache differ");
  check_kv_scales(p.k_cache, p.k_scales, p.v_scales, op);
}

void check_attention(const AttentionParams& p) {
  const char* op = "attention";
  require_dims(p.q, 3, op, "q");
  require_dims(p.out, 3, op, "out");
  require_dims(p.k_cache, 4, op, "k_cache");
  require_dims(p.v_cache, 4, op, "v_cache");
  require_dims(p.query_start_loc, 1, op, "query_start_loc");
  require_dims(p.seq_lens, 1, op, "seq_lens");
  require_dims(p.block_tables, 2, op, "block_tables");
  check_kv_scales(p.k_cache, p.k_scales, p.v_scales, op);
  require_dtype(p.query_start_loc, DType::kI32, op, "query_start_loc");
  require_dtype(p.seq_lens, DType::kI32, op, "seq_lens");
  require_dtype(p.block_tables, DType::kI32, op, "block_tables");
  int64_t num_seqs = p.seq_lens.dim(0);
  require(p.query_start_loc.dim(0) == num_seqs + 1, op, "query_start_loc must have S+1 entries");
  if (p.block_table_index.empty()) {
    require(p.block_tables.dim(0) == num_seqs, op, "block_tables must have S rows");
  } else {
    require_dims(p.block_table_index, 1, op, "block_table_index");
    require_dtype(p.block_table_index, DType::kI32, op, "block_table_index");
    require(p.block_table_index.dim(0) == num_seqs, op, "block_table_index must have S entries");
  }
  if (!p.key_tail_from.empty()) {
    require_dims(p.key_tail_from, 1, op, "key_tail_from");
    require_dims(p.key_tail_offset, 1, op, "key_tail_offset");
    require_dims(p.key_tail, 1, op, "key_tail");
    require_dtype(p.key_tail_from, DType::kI32, op, "key_tail_from");
    require_dtype(p.key_tail_offset, DType::kI32, op, "key_tail_offset");
    require_dtype(p.key_tail, DType::kI32, op, "key_tail");
    require(p.key_tail_from.dim(0) == num_seqs && p.key_tail_offset.dim(0) == num_seqs, op,
            "key_tail_from and key_tail_offset must have S entries");
    require(p.tree_parents.empty(), op, "key tails and tree_parents do not combine");
    require(p.sliding_window == 0, op, "key tails and a sliding window do not combine");
  }
  require(p.q.dim(2) == p.k_cache.dim(3), op, "q head_dim differs from the cache's");
  require(p.q.dim(1) % p.k_cache.dim(2) == 0, op, "num_q_heads must be a multiple of num_kv_heads");
  require(p.out.numel() == p.q.numel(), op, "out must have the shape of q");
  if (!p.tree_parents.empty()) {
    require_dims(p.tree_parents, 1, op, "tree_parents");
    require_dtype(p.tree_parents, DType::kI32, op, "tree_parents");
    require(p.tree_parents.dim(0) == p.q.dim(0), op, "tree_parents must have one entry per query row");
    require(p.sliding_window == 0, op, "tree_parents and a sliding window do not combine");
  }
}

void check_attention_indices(const AttentionParams& p) {
  const char* op = "attention";
  const int64_t num_seqs = p.seq_lens.dim(0);
  const int32_t* qsl = p.query_start_loc.as<const int32_t>();
  const int32_t* lens = p.seq_lens.as<const int32_t>();
  if (!p.block_table_index.empty()) {
    const int32_t* idx = p.block_table_index.as<const int32_t>();
    for (int64_t s = 0; s < num_seqs; ++s)
      require(idx[s] >= 0 && idx[s] < p.block_tables.dim(0), op,
              "block_table_index[" + std::to_string(s) + "] = " + std::to_string(idx[s]) + " is not a block-table row");
  }
  if (p.key_tail_from.empty()) return;
  const int32_t* from = p.key_tail_from.as<const int32_t>();
  const int32_t* off = p.key_tail_offset.as<const int32_t>();
  const int32_t* tail = p.key_tail.as<const int32_t>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    if (from[s] >= lens[s]) continue;
    const std::string where = "attention: sequence " + std::to_string(s) + "'s key tail";
    require(from[s] >= 0 && qsl[s + 1] - qsl[s] == 1, op, where + " needs one query row and key_tail_from >= 0");
    require(off[s] >= 0 && static_cast<int64_t>(off[s]) + (lens[s] - from[s]) <= p.key_tail.dim(0), op,
            where + " runs past key_tail");
    const int64_t slots = p.block_tables.dim(1) * p.k_cache.dim(1);
    for (int32_t j = 0; j < lens[s] - from[s]; ++j)
      require(tail[off[s] + j] >= 0 && tail[off[s] + j] < slots, op, where + " names a slot past the block table");
  }
}

void check_tree_parents(const AttentionParams& p) {
  if (p.tree_parents.empty()) return;
  const int32_t* parents = p.tree_parents.as<const int32_t>();
  const int32_t* qsl = p.query_start_loc.as<const int32_t>();
  for (int64_t s = 0; s < p.seq_lens.dim(0); ++s) {
    for (int32_t i = 0; i < qsl[s + 1] - qsl[s]; ++i) {
      const int32_t par = parents[qsl[s] + i];
      require(i == 0 ? par == -1 : (par >= 0 && par < i), "attention",
              "tree_parents: row " + std::to_string(i) + " of sequence " + std::to_string(s) +
                  " needs a parent among the rows before it (-1 for the first)");
    }
  }
}

void check_gather_rows(const GatherRowsParams& p) {
  const char* op = "gather_rows";
  require_dims(p.x, 2, op, "x");
  require_dims(p.indices, 1, op, "indices");
  require_dtype(p.indices, DType::kI32, op, "indices");
  require_dims(p.out, 2, op, "out");
  require(p.out.dim(0) == p.indices.dim(0) && p.out.dim(1) == p.x.dim(1), op, "out must be [R, H]");
  require(p.out.dtype == p.x.dtype, op, "out dtype must equal x dtype");
}

}  // namespace peregrine::ops
