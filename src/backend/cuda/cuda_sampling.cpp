// cuda_sample: validates the views and launches the sampling kernels with the backend's scratch.
#include "backend/cuda/cuda_sampling.h"

#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/sampling.cuh"
#include "core/status.h"

namespace peregrine::ops {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, "cuda_sample: " + what); }

template <typename T>
const T* optional_array(const TensorView& v, DType want, int64_t n, const char* field) {
  if (v.empty()) return nullptr;
  if (v.dtype != want) fail(std::string(field) + " has dtype " + std::string(dtype_name(v.dtype)));
  if (v.numel() != n) fail(std::string(field) + " must have " + std::to_string(n) + " elements");
  return static_cast<const T*>(v.data);
}

}  // namespace

void cuda_sample(Backend& backend, const CudaSampleParams& p) {
  CudaBackend* cuda = as_cuda_backend(backend);
  if (cuda == nullptr) fail("the backend is not the CUDA backend");
  if (p.logits.ndim != 2 || p.logits.empty()) fail("logits must be [B, V]");
  const int64_t batch = p.logits.dim(0), vocab = p.logits.dim(1);
  if (p.logits.dtype != DType::kF32 && p.logits.dtype != DType::kBF16 && p.logits.dtype != DType::kF16)
    fail("logits must be f32, bf16 or f16");
  cuda::SampleLaunch l{};
  l.logits = p.logits.data;
  l.logits_dtype = p.logits.dtype;
  l.batch = static_cast<int>(batch);
  l.vocab = static_cast<int>(vocab);
  l.temperature = optional_array<float>(p.temperature, DType::kF32, batch, "temperature");
  if (l.temperature == nullptr) fail("temperature is required");
  l.top_k = optional_array<int32_t>(p.top_k, DType::kI32, batch, "top_k");
  l.top_p = optional_array<float>(p.top_p, DType::kF32, batch, "top_p");
  l.min_p = optional_array<float>(p.min_p, DType::kF32, batch, "min_p");
  l.repetition_penalty = optional_array<float>(p.repetition_penalty, DType::kF32, batch, "repetition_penalty");
  l.presence_penalty = optional_array<float>(p.presence_penalty, DType::kF32, batch, "presence_penalty");
  l.frequency_penalty = optional_array<float>(p.frequency_penalty, DType::kF32, batch, "frequency_penalty");
  if (!p.prompt_tokens.empty()) {
    l.prompt_tokens = optional_array<int32_t>(p.prompt_tokens, DType::kI32, p.prompt_tokens.numel(), "prompt_tokens");
    l.prompt_offsets = optional_array<int32_t>(p.prompt_offsets, DType::kI32, batch + 1, "prompt_offsets");
    if (l.prompt_offsets == nullptr) fail("prompt_offsets is required with prompt_tokens");
    l.num_prompt_tokens = p.prompt_tokens.numel();
  }
  if (!p.output_tokens.empty()) {
    l.output_tokens = optional_array<int32_t>(p.output_tokens, DType::kI32, p.output_tokens.numel(), "output_tokens");
    l.output_offsets = optional_array<int32_t>(p.output_offsets, DType::kI32, batch + 1, "output_offsets");
    if (l.output_offsets == nullptr) fail("output_offsets is required with output_tokens");
    l.num_output_tokens = p.output_tokens.numel();
  }
  l.seeds = optional_array<int64_t>(p.seeds, DType::kI64, batch, "seeds");
  l.offsets = optional_array<int64_t>(p.offsets, DType::kI64, batch, "offsets");
  l.out_tokens = const_cast<int32_t*>(optional_array<int32_t>(p.out_tokens, DType::kI32, batch, "out_tokens"));
  if (l.out_tokens == nullptr) fail("out_tokens is required");
  l.out_logprobs = const_cast<float*>(optional_array<float>(p.out_logprobs, DType::kF32, batch, "out_logprobs"));
  l.allowed_index = optional_array<int32_t>(p.allowed_index, DType::kI32, batch, "allowed_index");
  if (l.allowed_index) {
    if (p.allowed_tokens.empty()) fail("allowed_tokens is required with allowed_index");
    if (p.allowed_tokens.dtype != DType::kI32 || p.allowed_tokens.ndim != 2) fail("allowed_tokens must be [M, W] i32");
    l.allowed_rows = p.allowed_tokens.dim(0);
    l.allowed_words = p.allowed_tokens.dim(1);
    if (l.allowed_words * 32 < vocab) fail("allowed_tokens rows must have at least ceil(V / 32) words");
    l.allowed_tokens = static_cast<const uint32_t*>(p.allowed_tokens.data);
  }
  if (batch == 0) return;
  l.scratch_logits = static_cast<float*>(cuda->scratch(cuda::sample_scratch_logits_bytes(l), 1));
  if (cuda::sample_uses_penalties(l))
    l.scratch_counts = static_cast<int32_t*>(cuda->scratch(cuda::sample_scratch_counts_bytes(l), 2));
  l.error_flags = cuda->device_error_word();
  cuda::launch_sample(l, static_cast<cudaStream_t>(cuda->stream_handle()));
}

}  // namespace peregrine::ops
