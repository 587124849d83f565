// RoPE kernel: one block per token; each thread owns (head, i) pairs and rotates x[i], x[i + half].
// Uses the accurate sincosf (full range reduction) since positions reach 10^5 radians.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/rope.cuh"

namespace peregrine::cuda {
namespace {

template <typename T>
__global__ void rope_kernel(RopeLaunch p) {
  const int64_t t = blockIdx.x;
  const int half = p.rotary_dim / 2;
  const float pos = static_cast<float>(p.positions[t]);
  const int heads = p.num_q_heads + p.num_kv_heads;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    T* base = h < p.num_q_heads
                  ? static_cast<T*>(p.q) + (t * p.num_q_heads + h) * p.head_dim
                  : static_cast<T*>(p.k) + (t * p.num_kv_heads + (h - p.num_q_heads)) * p.head_dim;
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    c *= p.attention_scaling;
    s *= p.attention_scaling;
    const float a = to_f32(base[i]), b = to_f32(base[i + half]);
    base[i] = from_f32<T>(a * c - b * s);
    base[i + half] = from_f32<T>(b * c + a * s);
  }
}

}  // namespace

void launch_rope(const RopeLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  int pairs = (p.num_q_heads + p.num_kv_heads) * (p.rotary_dim / 2);
  int threads = pairs >= 256 ? 256 : ((pairs + 31) / 32) * 32;
  dispatch_float(p.act, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<static_cast<unsigned>(p.num_tokens), threads, 0, stream>>>(p);
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
