// Attention dispatch: picks tensor-core kernels (bf16/f16 activations with a matching cache or an int8 / fp8
// e4m3 one, head_dim 64/128/256) or the generic one, sizes the split-K workspace, and launches the decode and prefill families.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace peregrine::cuda {
namespace {

struct DecodeGeometry {
  bool launch = false;
  int grid_splits = 1;
  int rows_cap = 0;
};

DecodeGeometry decode_geometry(const AttentionLaunch& p) {
  DecodeGeometry g;
  const int group = p.num_q_heads / p.num_kv_heads;
  if (group > kDecodeMaxRows) return g;  // no sequence can take the decode path
  const int64_t rows = static_cast<int64_t>(p.max_query_len) * group;
  g.launch = true;
  g.rows_cap = static_cast<int>(rows < kDecodeMaxRows ? rows : kDecodeMaxRows);
  g.grid_splits = decode_split_bound(static_cast<int>(ceil_div(p.max_seq_len, kDecodeTileKeys)), decode_min_tiles(p),
                                     decode_max_splits(p));
  return g;
}

}  // namespace

bool attention_uses_tensor_cores(const AttentionLaunch& p) {
  const bool b16 = p.act == DType::kBF16 || p.act == DType::kF16;
  const bool codes = (p.cache == DType::kI8 || p.cache == DType::kF8E4M3) && p.k_scales && p.v_scales;
  const bool dtype_ok = b16 && (p.act == p.cache || codes);
  const bool dim_ok = p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256;
  return dtype_ok && dim_ok && aligned16(p.q) && aligned16(p.out) && aligned16(p.k_cache) && aligned16(p.v_cache);
}

size_t attention_workspace_bytes(const AttentionLaunch& p) {
  if (!attention_uses_tensor_cores(p)) return 0;
  const DecodeGeometry g = decode_geometry(p);
  if (!g.launch || g.grid_splits <= 1) return 0;
  return static_cast<size_t>(p.num_seqs) * p.num_kv_heads * g.grid_splits * g.rows_cap * (p.head_dim + 1) *
         sizeof(float);
}

void launch_attention(const AttentionLaunch& params, cudaStream_t stream) {
  if (params.num_tokens == 0 || params.num_seqs == 0) return;
  AttentionLaunch p = params;
  p.block_shift = -1;
  for (int s = 0; s < 31; ++s)
    if ((1 << s) == p.block_size) p.block_shift = s;
  if (!attention_uses_tensor_cores(p)) {
    launch_attention_generic(p, stream);
    return;
  }
  const DecodeGeometry g = decode_geometry(p);
  const int group = p.num_q_heads / p.num_kv_heads;
  if (g.launch) launch_attention_decode(p, g.grid_splits, g.rows_cap, stream);
  if (static_cast<int64_t>(p.max_query_len) * group > kDecodeMaxRows) launch_attention_prefill(p, stream);
}

}  // namespace peregrine::cuda
