// kv_write kernel: one block per token; 16-byte copies when the dtypes match, converting loads otherwise.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kv_cache.cuh"

namespace peregrine::cuda {
namespace {

__global__ void kv_write_kernel(KvWriteLaunch p, int64_t act_row_bytes, bool vec_copy) {
  const int64_t t = blockIdx.x;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  if (slot >= p.num_slots) {
    if (threadIdx.x == 0) atomicOr(p.error_flags, kErrKvSlot);
    return;
  }
  if (vec_copy) {
    const int64_t n = act_row_bytes / 16;
    const uint4* ks = reinterpret_cast<const uint4*>(static_cast<const char*>(p.k) + t * act_row_bytes);
    const uint4* vs = reinterpret_cast<const uint4*>(static_cast<const char*>(p.v) + t * act_row_bytes);
    uint4* kd = reinterpret_cast<uint4*>(static_cast<char*>(p.k_cache) + slot * act_row_bytes);
    uint4* vd = reinterpret_cast<uint4*>(static_cast<char*>(p.v_cache) + slot * act_row_bytes);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      kd[i] = ks[i];
      vd[i] = vs[i];
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < p.row; i += blockDim.x) {
    store_any(p.k_cache, p.cache, slot * p.row + i, load_any(p.k, p.act, t * p.row + i));
    store_any(p.v_cache, p.cache, slot * p.row + i, load_any(p.v, p.act, t * p.row + i));
  }
}

}  // namespace

void launch_kv_write(const KvWriteLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  int64_t act_row_bytes = static_cast<int64_t>(dtype_bytes(p.act, static_cast<size_t>(p.row)));
  bool vec = p.act == p.cache && act_row_bytes % 16 == 0 && aligned16(p.k) && aligned16(p.v) &&
             aligned16(p.k_cache) && aligned16(p.v_cache);
  kv_write_kernel<<<static_cast<unsigned>(p.num_tokens), 128, 0, stream>>>(p, act_row_bytes, vec);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
