// Sampling kernels. Per request (one block): processed logits z = penalties(l) / T go to scratch; greedy
// takes argmax z; otherwise top-k and top-p thresholds come from exact radix selects over order-preserving
// keys of z (counts, then fixed-point probability mass: integer atomics, so deterministic), min-p is a
// threshold relative to the max, and the token is argmax(z + Gumbel noise) over the kept set -- an exact
// categorical draw whose noise depends only on (seed, offset, token id), never on the batch.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/sampling.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kPromptBit = 1u << 30;
constexpr uint32_t kCountMask = kPromptBit - 1;

__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t bits = __float_as_uint(f);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ uint64_t fixed_mass(float z, float zmax) {
  return static_cast<uint64_t>(__float2ull_rd(expf(z - zmax) * 4294967296.0f));
}

struct Shared {
  float f[kWarps];
  int i[kWarps];
  unsigned long long u[kWarps];
  unsigned long long hist[256];
  int digit;
  unsigned long long above;
};

__device__ float block_max(float v, Shared& sh) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = v;
  __syncthreads();
  v = sh.f[0];
  for (int w = 1; w < kWarps; ++w) v = fmaxf(v, sh.f[w]);
  __syncthreads();
  return v;
}

__device__ float block_sum(float v, Shared& sh) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.f;
  for (int w = 0; w < kWarps; ++w) v += sh.f[w];
  __syncthreads();
  return v;
}

__device__ unsigned long long block_sum_u64(unsigned long long v, Shared& sh) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) sh.u[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < kWarps; ++w) v += sh.u[w];
  __syncthreads();
  return v;
}

// Max of (value, -index): the largest value, the lowest index among equals.
__device__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}
__device__ int block_argmax(float v, int idx, Shared& sh, float* best_value) {
  for (int off = 16; off > 0; off >>= 1) better(v, idx, __shfl_xor_sync(0xffffffffu, v, off),
                                                __shfl_xor_sync(0xffffffffu, idx, off));
  if (threadIdx.x % 32 == 0) {
    sh.f[threadIdx.x / 32] = v;
    sh.i[threadIdx.x / 32] = idx;
  }
  __syncthreads();
  v = sh.f[0];
  idx = sh.i[0];
  for (int w = 1; w < kWarps; ++w) better(v, idx, sh.f[w], sh.i[w]);
  __syncthreads();
  *best_value = v;
  return idx;
}

// The largest key t such that the weight (count, or mass when by_mass) of {i : key_i >= t, key_i >= floor}
// reaches target; 8 bits per round from the top. Returns floor when the target is out of reach.
__device__ uint32_t radix_select(const float* z, int vocab, uint32_t floor, unsigned long long target, bool by_mass,
                                 float zmax, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0;
  const int lane = threadIdx.x % 32;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float zi = z[i];
      const uint32_t key = ordered_key(zi);
      if (key < floor || (key & mask) != prefix) continue;
      const unsigned long long w = by_mass ? fixed_mass(zi, zmax) : 1ull;
      if (w) atomicAdd(&sh.hist[(key >> shift) & 255u], w);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      unsigned long long local[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        local[j] = sh.hist[255 - 8 * lane - j];
        sum += local[j];
      }
      unsigned long long incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned long long v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, above + incl >= target);
      if (ballot == 0) {
        if (lane == 0) sh.digit = -1;
      } else if (lane == __ffs(ballot) - 1) {
        unsigned long long acc = above + incl - sum;
        int digit = 255 - 8 * lane - 7;
        for (int j = 0; j < 8; ++j) {
          if (acc + local[j] >= target) {
            digit = 255 - 8 * lane - j;
            break;
          }
          acc += local[j];
        }
        sh.digit = digit;
        sh.above = acc;
      }
    }
    __syncthreads();
    const int digit = sh.digit;
    above = sh.above;
    __syncthreads();
    if (digit < 0) return floor;
    prefix |= static_cast<uint32_t>(digit) << shift;
    mask |= 255u << shift;
  }
  return prefix > floor ? prefix : floor;
}

__device__ __forceinline__ float gumbel(uint64_t seed, uint64_t offset, int index) {
  const float u = philox_uniform(seed, offset, index);  // in (0, 1)
  return -logf(-logf(u));
}

__device__ int find_request(const int32_t* offsets, int batch, int64_t i) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void count_tokens_kernel(SampleLaunch p, const int32_t* tokens, const int32_t* offsets, int64_t n,
                                    bool prompt) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int b = find_request(offsets, p.batch, i);
    const int32_t tok = tokens[i];
    if (tok < 0 || tok >= p.vocab) {
      atomicOr(p.error_flags, kErrSampleToken);
      continue;
    }
    int32_t* c = p.scratch_counts + static_cast<int64_t>(b) * p.vocab + tok;
    if (prompt) atomicOr(c, static_cast<int32_t>(kPromptBit)); else atomicAdd(c, 1);
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleLaunch p) {
  pdl_wait();
  pdl_trigger();
  __shared__ Shared sh;
  const int b = blockIdx.x, vocab = p.vocab;
  const int64_t row = static_cast<int64_t>(b) * vocab;
  const float temperature = p.temperature[b];
  int top_k = p.top_k ? p.top_k[b] : 0;
  if (top_k <= 0 || top_k >= vocab) top_k = 0;
  const bool greedy = !(temperature > 1e-5f) || top_k == 1;
  const float inv_t = greedy ? 1.0f : 1.0f / temperature;
  const float rep = p.repetition_penalty ? p.repetition_penalty[b] : 1.0f;
  const float presence = p.presence_penalty ? p.presence_penalty[b] : 0.0f;
  const float frequency = p.frequency_penalty ? p.frequency_penalty[b] : 0.0f;
  const int32_t* counts = p.scratch_counts ? p.scratch_counts + row : nullptr;
  float* z = p.scratch_logits + row;
  const uint32_t* mask = nullptr;
  if (p.allowed_index) {
    const int32_t a = p.allowed_index[b];
    if (a >= p.allowed_rows) {
      if (threadIdx.x == 0) atomicOr(p.error_flags, kErrSampleToken);
    } else if (a >= 0) {
      mask = p.allowed_tokens + a * p.allowed_words;
    }
  }

  float raw_max = -INFINITY, best = -INFINITY;
  int best_idx = vocab;
  // Four of a thread's logits loaded before any is processed (the stores to z would otherwise hold each load back
  // behind the last store); the thread still takes its tokens in increasing order.
  constexpr int kAhead = 4;
  for (int i0 = threadIdx.x; i0 < vocab; i0 += kAhead * kThreads) {
    float raws[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int i = i0 + u * kThreads;
      raws[u] = i < vocab ? load_any(p.logits, p.logits_dtype, row + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= vocab) break;
      const float raw = raws[u];
      raw_max = fmaxf(raw_max, raw);
      float v = raw;
      if (counts) {
        const uint32_t c = static_cast<uint32_t>(counts[i]);
        const uint32_t n = c & kCountMask;
        if (c != 0 && rep != 1.0f) v = v > 0.f ? v / rep : v * rep;
        v -= frequency * static_cast<float>(n) + (n > 0 ? presence : 0.f);
      }
      v *= inv_t;
      if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) v = -INFINITY;
      z[i] = v;
      better(best, best_idx, v, i);
    }
  }
  raw_max = block_max(raw_max, sh);
  float zmax;
  int token = block_argmax(best, best_idx, sh, &zmax);

  if (!greedy) {
    uint32_t floor = 0;
    if (top_k > 0) floor = radix_select(z, vocab, 0, static_cast<unsigned long long>(top_k), false, zmax, sh);
    const float top_p = p.top_p ? p.top_p[b] : 1.0f;
    if (top_p < 1.0f) {
      unsigned long long mass = 0;
      for (int i = threadIdx.x; i < vocab; i += kThreads)
        if (ordered_key(z[i]) >= floor) mass += fixed_mass(z[i], zmax);
      mass = block_sum_u64(mass, sh);
      unsigned long long target = static_cast<unsigned long long>(ceil(static_cast<double>(top_p) * mass));
      if (target < 1) target = 1;
      floor = radix_select(z, vocab, floor, target, true, zmax, sh);
    }
    float min_p = p.min_p ? p.min_p[b] : 0.0f;
    if (min_p > 0.f) {
      min_p = fminf(min_p, 1.0f);
      const uint32_t key = ordered_key(zmax + logf(min_p));
      if (key > floor) floor = key;
    }
    const uint64_t seed = p.seeds ? static_cast<uint64_t>(p.seeds[b]) : 0;
    const uint64_t offset = p.offsets ? static_cast<uint64_t>(p.offsets[b]) : 0;
    float best_score = -INFINITY;
    int best_draw = vocab;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float zi = z[i];
      if (ordered_key(zi) < floor) continue;
      better(best_score, best_draw, zi + gumbel(seed, offset, i), i);
    }
    float unused;
    token = block_argmax(best_score, best_draw, sh, &unused);
    if (token >= vocab) token = block_argmax(best, best_idx, sh, &unused);  // every score was NaN/-inf
  }

  float raw_sum = 0.f;
  if (p.out_logprobs) {
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      raw_sum += expf(load_any(p.logits, p.logits_dtype, row + i) - raw_max);
    raw_sum = block_sum(raw_sum, sh);
  }
  if (threadIdx.x == 0) {
    if (token >= vocab) token = 0;
    p.out_tokens[b] = token;
    if (p.out_logprobs)
      p.out_logprobs[b] = load_any(p.logits, p.logits_dtype, row + token) - raw_max - logf(raw_sum);
  }
}

}  // namespace

size_t sample_scratch_logits_bytes(const SampleLaunch& p) {
  return static_cast<size_t>(p.batch) * p.vocab * sizeof(float);
}
size_t sample_scratch_counts_bytes(const SampleLaunch& p) {
  return sample_uses_penalties(p) ? static_cast<size_t>(p.batch) * p.vocab * sizeof(int32_t) : 0;
}

void launch_sample(const SampleLaunch& p, cudaStream_t stream) {
  if (p.batch == 0) return;
  if (sample_uses_penalties(p)) {
    PEREGRINE_CUDA_CHECK(cudaMemsetAsync(p.scratch_counts, 0, sample_scratch_counts_bytes(p), stream));
    if (p.prompt_tokens && p.num_prompt_tokens > 0) {
      count_tokens_kernel<<<static_cast<unsigned>(ceil_div(p.num_prompt_tokens, 256) > 4096 ? 4096 : ceil_div(p.num_prompt_tokens, 256)),
                            256, 0, stream>>>(p, p.prompt_tokens, p.prompt_offsets, p.num_prompt_tokens, true);
      PEREGRINE_CUDA_CHECK_LAUNCH();
    }
    if (p.output_tokens && p.num_output_tokens > 0) {
      count_tokens_kernel<<<static_cast<unsigned>(ceil_div(p.num_output_tokens, 256) > 4096 ? 4096 : ceil_div(p.num_output_tokens, 256)),
                            256, 0, stream>>>(p, p.output_tokens, p.output_offsets, p.num_output_tokens, false);
      PEREGRINE_CUDA_CHECK_LAUNCH();
    }
  }
  SampleLaunch q = p;
  if (!sample_uses_penalties(p)) q.scratch_counts = nullptr;
  launch_pdl(sample_kernel, static_cast<unsigned>(p.batch), kThreads, 0, stream, p.batch, q);
}

}  // namespace peregrine::cuda
