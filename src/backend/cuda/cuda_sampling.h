// GPU token sampling for the engine, until the op interface gains a sampling op. Plain C++ (no CUDA
// headers). Every view is device memory of the CUDA backend; per-request parameters are [B] arrays so that
// one host->device copy per step fills them. Empty optional views disable that feature for every request.
//
// Semantics, per request b (in this order):
//   z = logits[b]; repetition penalty r on tokens seen in prompt or output (z > 0 ? z / r : z * r);
//   z -= frequency * count_in_output + presence * (count_in_output > 0)   (OpenAI / vLLM style);
//   temperature <= 1e-5 or top_k == 1: token = argmax z (lowest id on ties), else z /= temperature;
//   top-k keeps the k largest (ties at the k-th value kept too); top-p keeps the smallest top set whose
//   probability (after top-k) reaches top_p; min-p drops tokens with p < min_p * p_max;
//   token = argmax over kept i of z_i + Gumbel(u_i), u_i = Philox4x32-10(key = seed, counter = (i, offset)):
//   an exact draw from softmax(z) over the kept set, reproducible for a (seed, offset) and independent
//   of the batch. Pass offset = the number of tokens the request generated so far.
//   out_logprobs (optional) = log_softmax(raw logits)[token] (before penalties and temperature).
// Runs asynchronously on the backend's stream; throws Error(kInvalidArgument) on bad shapes, and a token
// id outside [0, V) in the penalty lists surfaces at the next synchronize().
#pragma once

#include "core/tensor.h"
#include "ops/backend.h"

namespace peregrine::ops {

struct CudaSampleParams {
  TensorView logits;              // [B, V] f32/bf16/f16
  TensorView temperature;         // [B] f32
  TensorView top_k;               // [B] i32, optional; <= 0 or >= V disables
  TensorView top_p;               // [B] f32, optional; >= 1 disables
  TensorView min_p;               // [B] f32, optional; <= 0 disables
  TensorView repetition_penalty;  // [B] f32, optional; 1 disables
  TensorView presence_penalty;    // [B] f32, optional; 0 disables
  TensorView frequency_penalty;   // [B] f32, optional; 0 disables
  TensorView prompt_tokens;       // [P] i32: every request's prompt, concatenated (for repetition)
  TensorView prompt_offsets;      // [B + 1] i32: request b owns prompt_tokens[off[b], off[b + 1])
  TensorView output_tokens;       // [O] i32: every request's generated tokens, concatenated
  TensorView output_offsets;      // [B + 1] i32
  TensorView seeds;               // [B] i64, optional (seed 0)
  TensorView offsets;             // [B] i64, optional (offset 0)
  TensorView out_tokens;          // [B] i32
  TensorView out_logprobs;        // [B] f32, optional
};

// backend must be the CUDA backend (as_cuda_backend); scratch is the backend's (B * V * 8 bytes at most).
void cuda_sample(Backend& backend, const CudaSampleParams& p);

}  // namespace peregrine::ops
