#include "ops/host_sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/status.h"

namespace peregrine::ops {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, "sample: " + what); }

template <typename T>
const T* optional_array(const TensorView& v, DType want, int64_t n, const char* field) {
  if (v.empty()) return nullptr;
  if (v.dtype != want) fail(std::string(field) + " has dtype " + std::string(dtype_name(v.dtype)));
  if (n >= 0 && v.numel() != n) fail(std::string(field) + " must have " + std::to_string(n) + " elements");
  return static_cast<const T*>(v.data);
}

uint32_t ordered_key(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

uint64_t fixed_mass(float z, float zmax) {
  const float m = std::exp(z - zmax) * 4294967296.0f;
  return m > 0.0f ? static_cast<uint64_t>(m) : 0;  // positive: truncation rounds down
}

float load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: return static_cast<const float*>(t.data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: fail("logits must be f32, bf16 or f16");
  }
}

// Max of (value, -index): the largest value, the lowest index among equals (NaN never wins).
void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

}  // namespace

void host_sample(const SampleParams& p) {
  if (p.logits.ndim != 2 || p.logits.empty()) fail("logits must be [B, V]");
  const int64_t batch = p.logits.dim(0);
  const int vocab = static_cast<int>(p.logits.dim(1));
  const float* temperature = optional_array<float>(p.temperature, DType::kF32, batch, "temperature");
  if (temperature == nullptr) fail("temperature is required");
  const int32_t* top_k = optional_array<int32_t>(p.top_k, DType::kI32, batch, "top_k");
  const float* top_p = optional_array<float>(p.top_p, DType::kF32, batch, "top_p");
  const float* min_p = optional_array<float>(p.min_p, DType::kF32, batch, "min_p");
  const float* rep = optional_array<float>(p.repetition_penalty, DType::kF32, batch, "repetition_penalty");
  const float* presence = optional_array<float>(p.presence_penalty, DType::kF32, batch, "presence_penalty");
  const float* frequency = optional_array<float>(p.frequency_penalty, DType::kF32, batch, "frequency_penalty");
  const int32_t* prompt = optional_array<int32_t>(p.prompt_tokens, DType::kI32, -1, "prompt_tokens");
  const int32_t* prompt_off = optional_array<int32_t>(p.prompt_offsets, DType::kI32, batch + 1, "prompt_offsets");
  const int32_t* output = optional_array<int32_t>(p.output_tokens, DType::kI32, -1, "output_tokens");
  const int32_t* output_off = optional_array<int32_t>(p.output_offsets, DType::kI32, batch + 1, "output_offsets");
  if (prompt && !prompt_off) fail("prompt_offsets is required with prompt_tokens");
  if (output && !output_off) fail("output_offsets is required with output_tokens");
  const int64_t* seeds = optional_array<int64_t>(p.seeds, DType::kI64, batch, "seeds");
  const int64_t* offsets = optional_array<int64_t>(p.offsets, DType::kI64, batch, "offsets");
  auto* out_tokens = const_cast<int32_t*>(optional_array<int32_t>(p.out_tokens, DType::kI32, batch, "out_tokens"));
  if (out_tokens == nullptr) fail("out_tokens is required");
  auto* out_logprobs = const_cast<float*>(optional_array<float>(p.out_logprobs, DType::kF32, batch, "out_logprobs"));
  const bool penalties = rep || presence || frequency;
  const int32_t* allowed_index = optional_array<int32_t>(p.allowed_index, DType::kI32, batch, "allowed_index");
  const uint32_t* allowed = nullptr;
  int64_t allowed_rows = 0, allowed_words = 0;
  if (allowed_index) {
    if (p.allowed_tokens.empty()) fail("allowed_tokens is required with allowed_index");
    if (p.allowed_tokens.dtype != DType::kI32 || p.allowed_tokens.ndim != 2) fail("allowed_tokens must be [M, W] i32");
    allowed_rows = p.allowed_tokens.dim(0);
    allowed_words = p.allowed_tokens.dim(1);
    if (allowed_words * 32 < vocab) fail("allowed_tokens rows must have at least ceil(V / 32) words");
    allowed = static_cast<const uint32_t*>(p.allowed_tokens.data);
  }

  std::vector<float> z(static_cast<size_t>(vocab));
  std::vector<uint32_t> counts;  // bit 30: seen in the prompt; low bits: times in the output
  std::vector<std::pair<uint32_t, float>> kept;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t row = b * vocab;
    if (penalties) {
      counts.assign(static_cast<size_t>(vocab), 0);
      auto count = [&](const int32_t* tokens, const int32_t* off, bool is_prompt) {
        if (!tokens) return;
        for (int32_t i = off[b]; i < off[b + 1]; ++i) {
          const int32_t t = tokens[i];
          if (t < 0 || t >= vocab) fail("penalty token id " + std::to_string(t) + " is outside the vocabulary");
          if (is_prompt) counts[static_cast<size_t>(t)] |= 1u << 30; else ++counts[static_cast<size_t>(t)];
        }
      };
      count(prompt, prompt_off, true);
      count(output, output_off, false);
    }
    const float t = temperature[b];
    int k = top_k ? top_k[b] : 0;
    if (k <= 0 || k >= vocab) k = 0;
    const bool greedy = !(t > 1e-5f) || k == 1;
    const float inv_t = greedy ? 1.0f : 1.0f / t;
    const uint32_t* mask = nullptr;
    if (allowed_index && allowed_index[b] >= 0) {
      if (allowed_index[b] >= allowed_rows) fail("allowed_index " + std::to_string(allowed_index[b]) + " is outside allowed_tokens");
      mask = allowed + allowed_index[b] * allowed_words;
    }
    const float r = rep ? rep[b] : 1.0f, pres = presence ? presence[b] : 0.0f, freq = frequency ? frequency[b] : 0.0f;
    float raw_max = -INFINITY, best = -INFINITY;
    int best_idx = vocab;
    for (int i = 0; i < vocab; ++i) {
      const float raw = load(p.logits, row + i);
      raw_max = std::fmax(raw_max, raw);
      float v = raw;
      if (penalties) {
        const uint32_t c = counts[static_cast<size_t>(i)];
        const uint32_t n = c & ((1u << 30) - 1);
        if (c != 0 && r != 1.0f) v = v > 0.f ? v / r : v * r;
        v -= freq * static_cast<float>(n) + (n > 0 ? pres : 0.f);
      }
      v *= inv_t;
      if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) v = -INFINITY;
      z[static_cast<size_t>(i)] = v;
      better(best, best_idx, v, i);
    }
    const float zmax = best;
    int token = best_idx;
    if (!greedy) {
      uint32_t floor = 0;
      if (k > 0) {  // the k-th largest key: the largest t with #{key >= t} >= k
        std::vector<uint32_t> keys(static_cast<size_t>(vocab));
        for (int i = 0; i < vocab; ++i) keys[static_cast<size_t>(i)] = ordered_key(z[static_cast<size_t>(i)]);
        std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<uint32_t>());
        floor = keys[static_cast<size_t>(k - 1)];
      }
      const float tp = top_p ? top_p[b] : 1.0f;
      if (tp < 1.0f) {
        kept.clear();
        uint64_t mass = 0;
        for (int i = 0; i < vocab; ++i) {
          const float zi = z[static_cast<size_t>(i)];
          const uint32_t key = ordered_key(zi);
          if (key < floor) continue;
          kept.emplace_back(key, zi);
          mass += fixed_mass(zi, zmax);
        }
        uint64_t target = static_cast<uint64_t>(std::ceil(static_cast<double>(tp) * static_cast<double>(mass)));
        if (target < 1) target = 1;
        std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& c) { return a.first > c.first; });
        uint64_t acc = 0;
        for (const auto& [key, zi] : kept) {
          acc += fixed_mass(zi, zmax);
          if (acc >= target) {
            floor = std::max(floor, key);
            break;
          }
        }
      }
      float mp = min_p ? min_p[b] : 0.0f;
      if (mp > 0.f) {
        mp = std::fmin(mp, 1.0f);
        floor = std::max(floor, ordered_key(zmax + std::log(mp)));
      }
      const uint64_t seed = seeds ? static_cast<uint64_t>(seeds[b]) : 0;
      const uint64_t offset = offsets ? static_cast<uint64_t>(offsets[b]) : 0;
      float best_score = -INFINITY;
      int best_draw = vocab;
      for (int i = 0; i < vocab; ++i) {
        const float zi = z[static_cast<size_t>(i)];
        if (ordered_key(zi) < floor) continue;
        better(best_score, best_draw, zi + -std::log(-std::log(philox_uniform(seed, offset, i))), i);
      }
      token = best_draw < vocab ? best_draw : best_idx;
    }
    if (token >= vocab) token = 0;
    out_tokens[b] = token;
    if (out_logprobs) {
      float sum = 0.f;
      for (int i = 0; i < vocab; ++i) sum += std::exp(load(p.logits, row + i) - raw_max);
      out_logprobs[b] = load(p.logits, row + token) - raw_max - std::log(sum);
    }
  }
}

}  // namespace peregrine::ops
