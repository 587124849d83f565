// The op set: one params struct per op. Every backend (ref, cpu, cuda) implements each op with exactly
// these semantics; src/backend/ref is the oracle. Shapes are given on every field; "act" is the
// activation dtype the caller chose (f32 on CPU backends, bf16 or f32 on CUDA).
#pragma once

#include <span>

#include "core/ggml_quant.h"
#include "core/tensor.h"

namespace peregrine::ops {

// out[t, :] = table[token_ids[t], :]
struct EmbeddingParams {
  TensorView token_ids;  // [T] int32
  TensorView table;      // [vocab, hidden] f32/bf16/f16; or, with table_ggml set, u8 [vocab, row bytes] of
                         // ggml blocks (core/ggml_quant.h) holding `hidden` values per row
  TensorView out;        // [T, hidden] act
  GgmlType table_ggml = GgmlType::kNone;
  int64_t hidden() const { return out.dim(1); }
};

// How a matmul's weight is quantized; `scales` empty means a dense float weight (the default).
// A quantized w holds codes of logical shape [N, K]: kI4 (two unsigned 4-bit codes per byte, the even k in the
// low nibble; bytes N*K/2), kU8 (unsigned 8-bit), kI8 (signed 8-bit) or kF8E4M3 (float8 e4m3fn values).
// With g(k) = g_idx[k] when given, else k / group_size:
//   W[n, k] = (code(n, k) - zero(n, g(k))) * scales[n / block_rows, g(k)]
// where zero(n, g) = zeros[n, g] when given, else 8 for kI4, 128 for kU8 and 0 for kI8 and kF8E4M3.
// With a column permutation `perm` (GPTQ act-order, stored sorted by group): code column k belongs to input
// column perm[k], i.e. the matmul computes out[m, n] = sum_k x[m, perm[k]] * W[n, k].
// The matmul then computes out = x · Wᵀ (+ bias) with W dequantized. Checkpoint formats (GPTQ, AWQ,
// compressed-tensors, FP8) are repacked into this one layout at load (model/quant_weights.h).
//
// W8A8 (act != kNone): the op ALSO quantizes x, dynamically, and every backend (the ref backend included, which
// defines it) computes on the quantized x. Per row m of x and per activation group a (columns [a*G, (a+1)*G) of
// x in its own column order, G = act_group, or the whole row when act_group is 0), in float32 arithmetic on x
// converted to f32, with amax = max |x| over the group:
//   kInt8: s = amax / 127;  q = amax == 0 ? 0 : clamp(rint(x * (127 / amax)), -128, 127)     (vLLM's int8 quant)
//   kFp8:  s = max(amax / 448, 1 / (448 * 512));  q = e4m3(clamp(x / s, -448, 448)), round to nearest even
// (rint = round half to even), and x is replaced by q * s (exactly: the backends sum q·code products and apply
// s and the weight scale afterwards, which is the same value up to the accumulation's rounding).
// W4A8 is this rule on kI4 codes: symmetric (no zeros, midpoint 8), contiguous groups (g_idx and perm empty),
// act = kInt8 with act_group 0: out = s * sum_g scale[n, g] * sum_{k in g} q[k] * (code(n, k) - 8) (+ bias).
enum class ActQuant : uint8_t { kNone, kInt8, kFp8 };

struct WeightQuant {
  TensorView scales;        // [ceil(N / block_rows), num_groups] f32/bf16/f16; empty = not quantized
  TensorView zeros;         // [N, num_groups] f32, zero points in code units; optional
  TensorView g_idx;         // [K] int32 group of each code column; optional
  TensorView perm;          // [K] int32 input column of each code column (act-order); optional
  int64_t group_size = 0;   // input columns per group (K: one group per row)
  int64_t block_rows = 1;   // output rows sharing a row of scales (128 for block-wise FP8)
  ActQuant act = ActQuant::kNone;  // W8A8: x quantized per token (per row of x), see above
  int64_t act_group = 0;    // columns per activation scale (0: one per row; 128 for block-wise FP8)
  // GGUF block quantization (llama.cpp's Q4_0 ... Q6_K, core/ggml_quant.h): w is then u8 [N, row bytes], each row
  // the K values of one output in ggml blocks of this type, dequantized as ggml_dequantize_row defines; scales,
  // zeros, g_idx and perm stay empty (the blocks carry their own scales). K is x's second dim.
  GgmlType ggml = GgmlType::kNone;
  // A backend's own repacked copy of w (Backend::pack_weight, made by that same backend at load); when set, that
  // backend reads it instead of w, and others ignore it. w stays the reference the ref backend reads.
  const void* packed = nullptr;
  bool quantized() const { return !scales.empty(); }
  bool ggml_blocks() const { return ggml != GgmlType::kNone; }
};

// out = x · wᵀ (+ bias). Rows of x are independent: a row's result must not depend on M (determinism). CPU and
// ref hold this for every M; CUDA's small-M kernels (skinny bf16/f16, W4A16, GGUF GEMVs) hold it within their M
// range and the larger-M path within its own, so the range boundary is the one place a row may change (see
// cuda_backend.h MatmulPolicy; VLLM_BATCH_INVARIANT=1 keeps dense matmuls invariant across every M).
struct MatmulParams {
  TensorView x;       // [M, K] act
  TensorView w;       // [N, K] f32/bf16/f16 (the Hugging Face Linear layout), or codes / ggml blocks (WeightQuant)
  TensorView bias;    // [N] optional (empty when none), any float dtype
  TensorView out;     // [M, N] act
  WeightQuant quant;  // not quantized unless scales are set

  MatmulParams() = default;
  MatmulParams(TensorView x_, TensorView w_, TensorView bias_, TensorView out_, WeightQuant quant_ = {})
      : x(x_), w(w_), bias(bias_), out(out_), quant(quant_) {}
};

// A decode-sized matmul group fused with the ops around it (Backend::matmuls_fused, where
// Backend::fuses_matmuls takes it): the RMSNorm before q/k/v and gate/up, the residual add after o_proj and
// down_proj, SiLU·mul after gate/up, so a layer's decode runs without those launches. Rounding to a dtype is
// written round(); "its dtype" is x's for x̂ and each out's for results.
//   norm_weight set (norm before): each matmul's x is the un-normalised residual stream [M, K]; per row,
//     x̂ = round(x ⊙ norm_weight) in x's dtype, inv = 1 / sqrt(mean(x²) + eps) (f32 or wider), and the product is
//     inv · (x̂ · Wᵀ) + bias. (The unfused rms_norm rounds x · inv · weight instead: the two differ in the last bits.)
//   residual set (one matmul; [M, N] in out's dtype): out = round(residual + round(product)); out may alias it.
//   silu_mul (two matmuls, gate then up, of one shape and out dtype): gate.out = round(silu(round(gate)) ·
//     round(up)), the unfused silu_mul of the two rounded products; up.out is not written.
struct MatmulFusion {
  TensorView norm_weight;  // [K] in x's dtype, optional
  float eps = 1e-6f;
  TensorView residual;     // optional
  bool silu_mul = false;
};

// When residual is set: residual += x (in place), then out = rmsnorm(residual) * weight.
// Otherwise out = rmsnorm(x) * weight (out may alias x). Statistics are computed in f32 or wider.
// Per-head q/k norm uses x viewed as [T * heads, head_dim].
// next (optional, here and in SiluMulParams): the matmul, or the group of matmuls over one x (Backend::matmul /
// matmuls), that the caller runs right after this op with `out` as its x, before anything else reads or writes out.
// A backend may then make those matmuls' input as it makes out (CUDA: W8A8's per-token codes and scales, so the
// matmul skips its own pass over out) and leave out itself unwritten: out is then defined only for them. Empty (the
// default): out is written.
struct RmsNormParams {
  TensorView x;         // [R, H] act
  TensorView residual;  // [R, H] act, optional
  TensorView weight;    // [H] f32/bf16/f16
  TensorView out;       // [R, H] act
  float eps = 1e-6f;
  std::span<const MatmulParams> next = {};
};

// Rotary embedding in place, "rotate half" (GPT-NeoX) layout: element i pairs with i + rotary_dim/2.
// angle = float(positions[t]) * inv_freq[i]; cos and sin are multiplied by attention_scaling.
// Every RoPE scaling type (linear, dynamic NTK, llama3, YaRN) is folded into inv_freq/attention_scaling.
struct RopeParams {
  TensorView q;          // [T, num_q_heads, head_dim] act, in place
  TensorView k;          // [T, num_kv_heads, head_dim] act, in place
  TensorView positions;  // [T] int32
  TensorView inv_freq;   // [rotary_dim / 2] f32
  float attention_scaling = 1.0f;
  int rotary_dim = 0;    // <= head_dim; dims past it are left untouched
};

// out = silu(gate) * up
struct SiluMulParams {
  TensorView gate;  // [T, F] act
  TensorView up;    // [T, F] act
  TensorView out;   // [T, F] act; may alias gate
  std::span<const MatmulParams> next = {};  // as RmsNormParams::next
};

// Paged KV write: row t of k/v goes to slot slot_mapping[t] = block * block_size + offset; -1 skips the row.
// Quantized caches (kI8, kF8E4M3 — vLLM's kv_cache_dtype int8 / fp8): each (token, KV head) vector of head_dim
// values is quantized on its own with a dynamic scale kept in k_scales / v_scales at [slot, head], exactly as a
// W8A8 activation group (ops::quantize_act_int8 / quantize_act_fp8 on the f32 values: int8 s = amax / 127, codes
// rint(x * 127 / amax); fp8 s = max(amax / 448, 1 / (448 * 512)), codes e4m3(x / s)); readers use code * s.
struct KvWriteParams {
  TensorView k;             // [T, num_kv_heads, head_dim] act
  TensorView v;             // [T, num_kv_heads, head_dim] act
  TensorView slot_mapping;  // [T] int32
  TensorView k_cache;       // [num_blocks, block_size, num_kv_heads, head_dim] f32/bf16/f16, or int8 / e4m3 codes
  TensorView v_cache;       // [num_blocks, block_size, num_kv_heads, head_dim]
  TensorView k_scales;      // quantized caches: [num_blocks, block_size, num_kv_heads(, 1)] f32; else empty
  TensorView v_scales;

  KvWriteParams() = default;
  KvWriteParams(TensorView k_, TensorView v_, TensorView slots_, TensorView k_cache_, TensorView v_cache_,
                TensorView k_scales_ = {}, TensorView v_scales_ = {})
      : k(k_), v(v_), slot_mapping(slots_), k_cache(k_cache_), v_cache(v_cache_), k_scales(k_scales_), v_scales(v_scales_) {}
};

// Paged causal attention over a ragged batch (prefill chunks and decodes alike).
// Sequence s owns query rows [query_start_loc[s], query_start_loc[s+1]); its context after this step has
// seq_lens[s] tokens, so query row i (0-based within s) sits at position p = seq_lens[s] - q_len + i and
// attends to keys at positions j with j <= p and (sliding_window == 0 or j > p - sliding_window).
// Key j of s lives in block block_tables[s, j / block_size], offset j % block_size.
// GQA: query head h reads KV head h / (num_q_heads / num_kv_heads).
struct AttentionParams {
  TensorView q;                // [T, num_q_heads, head_dim] act
  TensorView k_cache;          // [num_blocks, block_size, num_kv_heads, head_dim] (codes when quantized)
  TensorView v_cache;          // [num_blocks, block_size, num_kv_heads, head_dim]
  TensorView out;              // [T, num_q_heads, head_dim] act
  TensorView query_start_loc;  // [S + 1] int32
  TensorView seq_lens;         // [S] int32
  TensorView block_tables;     // [S, max_blocks_per_seq] int32
  float scale = 1.0f;          // softmax scale
  int sliding_window = 0;
  int max_query_len = 0;       // max over s of q_len (a hint: 1 means pure decode)
  int max_seq_len = 0;         // max over s of seq_lens[s]
  // Token trees (speculative verification), optional: tree_parents[t] is the row (within its sequence) of row t's
  // parent, -1 for the sequence's first row; parents precede children. Row i of sequence s then keeps its KV at
  // sequence slot ctx + i (ctx = seq_lens[s] - q_len, the cached context) and attends to keys [0, ctx) and to the
  // rows on its path from the first row (its ancestors and itself) in depth order: the keys a sequence holding
  // exactly that path would see at positions ctx .. ctx + depth(i). Its RoPE position is the caller's
  // (ctx + depth(i)). Parents i - 1 everywhere is the causal rule above. Not combined with a sliding window.
  TensorView tree_parents;     // [T] int32
  // Sequences as pieces of others (row-exact verification), optional: sequence s reads block-table row
  // block_table_index[s] (several sequences may share a row; block_tables then has any number of rows).
  TensorView block_table_index;  // [S] int32
  // Keys remapped (a token tree's path laid out as a chain, for backends without tree_parents), optional: the key
  // of sequence s at position p, key_tail_from[s] <= p < seq_lens[s], sits at sequence slot
  // key_tail[key_tail_offset[s] + p - key_tail_from[s]] instead of slot p. key_tail_from[s] >= seq_lens[s]: none.
  // A sequence with a remapped key has one query row; not combined with tree_parents or a sliding window.
  TensorView key_tail_from;    // [S] int32
  TensorView key_tail_offset;  // [S] int32
  TensorView key_tail;         // [N] int32
  // Quantized caches (int8 / fp8 e4m3 codes): one f32 scale per (slot, KV head), [num_blocks, block_size,
  // num_kv_heads(, 1)], as KvWriteParams wrote them; empty for float caches. (Last, so positional initializers of
  // the fields above keep working.)
  TensorView k_scales{};  // (default member initializers: positional initializers may leave these out)
  TensorView v_scales{};
};

// out[r, :] = x[indices[r], :]
struct GatherRowsParams {
  TensorView x;        // [T, H] act
  TensorView indices;  // [R] int32
  TensorView out;      // [R, H] act
};

// Token sampling on the backend (Backend::sample, where supports_sampling()): logits stay where the forward left
// them and only token ids (and chosen logprobs) come back. Per request b, in this order:
//   z = logits[b]; repetition penalty r on tokens seen in prompt or output (z > 0 ? z / r : z * r);
//   z -= frequency * count_in_output + presence * (count_in_output > 0)   (OpenAI / vLLM style);
//   temperature <= 1e-5 or top_k == 1: token = argmax z (lowest id on ties), else z /= temperature;
//   top-k keeps the k largest (ties at the k-th value kept too); top-p keeps the smallest top set whose
//   probability (after top-k; masses in 32-bit fixed point, exp(z - max) * 2^32 rounded down) reaches top_p;
//   min-p drops tokens with z < max + log(min_p);
//   token = argmax over kept i of z_i + Gumbel(u_i), u_i = philox_uniform(seed, offset, i) (core/philox.h): an
//   exact draw from softmax(z) over the kept set, reproducible for a (seed, offset) and independent of the batch.
//   Pass offset = the number of tokens the request generated so far.
//   out_logprobs (optional) = log_softmax(raw logits)[token] (before penalties and temperature).
// A token mask (structured outputs; optional) comes first: where allowed_index[b] >= 0, token i of request b keeps its
// logit only when bit i % 32 of allowed_tokens[allowed_index[b], i / 32] is set and is -inf otherwise (so it is never
// drawn nor counted in top-k/top-p masses); allowed_index[b] < 0 leaves request b unconstrained. When a mask allows
// nothing, the token is 0 (lowest id of the all -inf row). A little-endian u64 mask of ceil(V / 64) words per row is
// a valid allowed_tokens row of 2 * ceil(V / 64) words.
// Per-request parameters are [B] arrays of backend memory; empty optional views disable that feature for every
// request. Runs asynchronously; a token id outside [0, V) in the penalty lists is an error (reported at the next
// synchronize() on asynchronous backends).
struct SampleParams {
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
  TensorView allowed_tokens{};    // [M, W] i32 bit masks, W >= ceil(V / 32), optional (with allowed_index)
  TensorView allowed_index{};     // [B] i32, optional: the row of allowed_tokens, or < 0 for none
};

}  // namespace peregrine::ops
