// GPU sampling (cuda_sampling.h): greedy ties, penalties against a host model, logprobs, reproducible
// seeds, top-k/top-p/min-p kept sets, and empirical frequencies of many seeded draws against softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "backend/cuda/cuda_sampling.h"
#include "ops/host_sampling.h"
#include "cuda_test_util.h"
#include "sampling_checks.h"

namespace peregrine::cuda_test {
namespace {

HostTensor f32_tensor(const std::vector<float>& v) {
  HostTensor h(DType::kF32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) h.set(static_cast<int64_t>(i), v[i]);
  return h;
}
HostTensor i64_tensor(const std::vector<int64_t>& v) {
  HostTensor h(DType::kI64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) h.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return h;
}

// Draws B tokens from the same logits row repeated, with per-row seeds; returns the tokens.
std::vector<int32_t> draw(const std::vector<float>& logits_row, int batch, float temperature, int top_k,
                          float top_p, float min_p, int64_t offset = 0) {
  const int64_t vocab = static_cast<int64_t>(logits_row.size());
  HostTensor logits(DType::kF32, {batch, vocab});
  for (int b = 0; b < batch; ++b)
    for (int64_t i = 0; i < vocab; ++i) logits.set(b * vocab + i, logits_row[i]);
  std::vector<int64_t> seeds(batch), offsets(batch, offset);
  for (int b = 0; b < batch; ++b) seeds[b] = 1000003LL * b + 17;
  DeviceTensor d_logits(logits), d_t(f32_tensor(std::vector<float>(batch, temperature)));
  DeviceTensor d_k(int_tensor(std::vector<int32_t>(batch, top_k)));
  DeviceTensor d_p(f32_tensor(std::vector<float>(batch, top_p))), d_m(f32_tensor(std::vector<float>(batch, min_p)));
  DeviceTensor d_seeds(i64_tensor(seeds)), d_offsets(i64_tensor(offsets));
  DeviceTensor d_out(HostTensor(DType::kI32, {batch}));
  ops::CudaSampleParams p;
  p.logits = d_logits.view();
  p.temperature = d_t.view();
  p.top_k = d_k.view();
  p.top_p = d_p.view();
  p.min_p = d_m.view();
  p.seeds = d_seeds.view();
  p.offsets = d_offsets.view();
  p.out_tokens = d_out.view();
  ops::cuda_sample(gpu(), p);
  HostTensor out = d_out.to_host();
  std::vector<int32_t> tokens(batch);
  for (int b = 0; b < batch; ++b) tokens[b] = static_cast<int32_t>(out.get(b));
  return tokens;
}

using testing::expect_frequencies;
using testing::softmax;

const std::vector<float> kRow = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f, 0.0f, 2.5f, -3.0f};

TEST(CudaSampling, TemperatureMatchesSoftmax) {
  expect_frequencies(draw(kRow, 20000, 1.0f, 0, 1.0f, 0.0f), softmax(kRow, 1.0f));
  expect_frequencies(draw(kRow, 20000, 0.5f, 0, 1.0f, 0.0f), softmax(kRow, 0.5f));
}

TEST(CudaSampling, TopKTopPMinPKeepTheRightSets) {
  std::vector<double> p = softmax(kRow, 1.0f);
  // top-k 3: tokens 3, 6, 1.
  std::vector<double> k3(p.size(), 0);
  for (int i : {3, 6, 1}) k3[i] = p[i];
  double s = k3[3] + k3[6] + k3[1];
  for (double& v : k3) v /= s;
  expect_frequencies(draw(kRow, 20000, 1.0f, 3, 1.0f, 0.0f), k3);
  // top-p 0.6: sorted probs 3 (0.43), 6 (0.26) reach 0.6 -> {3, 6}.
  std::vector<double> p6(p.size(), 0);
  p6[3] = p[3] / (p[3] + p[6]);
  p6[6] = p[6] / (p[3] + p[6]);
  expect_frequencies(draw(kRow, 20000, 1.0f, 0, 0.6f, 0.0f), p6);
  // min-p 0.3: keep p >= 0.3 * p_max -> logits >= 3 + ln 0.3 = 1.796 -> {3, 6, 1}.
  expect_frequencies(draw(kRow, 20000, 1.0f, 0, 1.0f, 0.3f), k3);
}

TEST(CudaSampling, SeedsAreReproducibleAndOffsetsMatter) {
  std::vector<float> flat(1000, 0.0f);  // uniform: draws spread widely
  auto a = draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 5), b = draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 5);
  auto c = draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(CudaSampling, GreedyPenaltiesAndLogprobs) {
  std::mt19937 rng(71);
  const int batch = 16, vocab = 5000;
  for (DType t : {DType::kF32, DType::kBF16}) {
    HostTensor logits = random_tensor(t, {batch, vocab}, rng, 3.0);
    logits.set(3 * vocab + 10, 20.0);  // a tie at the max in row 3: the lower id wins
    logits.set(3 * vocab + 20, 20.0);
    std::vector<float> temp(batch, 0.0f), rep(batch), pres(batch), freq(batch);
    std::vector<int32_t> prompt, prompt_off{0}, output, output_off{0};
    for (int b = 0; b < batch; ++b) {
      rep[b] = b % 2 ? 1.3f : 1.0f;
      pres[b] = b % 3 == 0 ? 0.5f : 0.0f;
      freq[b] = b % 4 == 1 ? 0.7f : 0.0f;
      for (int i = 0; i < 50; ++i) prompt.push_back(static_cast<int32_t>(rng() % 200));
      prompt_off.push_back(static_cast<int32_t>(prompt.size()));
      for (int i = 0; i < 30; ++i) output.push_back(static_cast<int32_t>(rng() % 100));
      output_off.push_back(static_cast<int32_t>(output.size()));
    }
    DeviceTensor d_logits(logits), d_t(f32_tensor(temp)), d_rep(f32_tensor(rep)), d_pres(f32_tensor(pres));
    DeviceTensor d_freq(f32_tensor(freq)), d_prompt(int_tensor(prompt)), d_poff(int_tensor(prompt_off));
    DeviceTensor d_output(int_tensor(output)), d_ooff(int_tensor(output_off));
    DeviceTensor d_out(HostTensor(DType::kI32, {batch})), d_lp(HostTensor(DType::kF32, {batch}));
    ops::CudaSampleParams p;
    p.logits = d_logits.view();
    p.temperature = d_t.view();
    p.repetition_penalty = d_rep.view();
    p.presence_penalty = d_pres.view();
    p.frequency_penalty = d_freq.view();
    p.prompt_tokens = d_prompt.view();
    p.prompt_offsets = d_poff.view();
    p.output_tokens = d_output.view();
    p.output_offsets = d_ooff.view();
    p.out_tokens = d_out.view();
    p.out_logprobs = d_lp.view();
    ops::cuda_sample(gpu(), p);
    HostTensor tokens = d_out.to_host(), logprobs = d_lp.to_host();
    for (int b = 0; b < batch; ++b) {
      std::map<int, int> out_count;
      std::vector<bool> seen(vocab, false);
      for (int i = prompt_off[b]; i < prompt_off[b + 1]; ++i) seen[prompt[i]] = true;
      for (int i = output_off[b]; i < output_off[b + 1]; ++i) {
        seen[output[i]] = true;
        ++out_count[output[i]];
      }
      int best = -1;
      float best_z = -INFINITY;
      double mx = -INFINITY, sum = 0;
      for (int i = 0; i < vocab; ++i) mx = std::max(mx, logits.get(b * vocab + i));
      for (int i = 0; i < vocab; ++i) {
        const float raw = static_cast<float>(logits.get(b * vocab + i));
        sum += std::exp(raw - mx);
        float z = raw;
        const int n = out_count.count(i) ? out_count[i] : 0;
        if (seen[i] && rep[b] != 1.0f) z = z > 0 ? z / rep[b] : z * rep[b];
        z -= freq[b] * static_cast<float>(n) + (n > 0 ? pres[b] : 0.0f);
        if (z > best_z) {
          best_z = z;
          best = i;
        }
      }
      EXPECT_EQ(static_cast<int>(tokens.get(b)), best) << dtype_name(t) << " row " << b;
      const double want_lp = logits.get(b * vocab + best) - mx - std::log(sum);
      EXPECT_NEAR(logprobs.get(b), want_lp, 1e-4 * std::max(1.0, std::fabs(want_lp))) << "row " << b;
    }
  }
}

TEST(CudaSampling, LargeVocabTopKTopPStayInTheKeptSet) {
  std::mt19937 rng(72);
  const int64_t vocab = 128256;
  HostTensor row = random_tensor(DType::kF32, {vocab}, rng, 2.0);
  std::vector<float> z(vocab);
  for (int64_t i = 0; i < vocab; ++i) z[i] = static_cast<float>(row.get(i));
  std::vector<float> sorted = z;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  // top-k 50 then top-p 0.9 of the renormalised top 50.
  const float kth = sorted[49];
  std::vector<double> p(sorted.begin(), sorted.begin() + 50);
  double total = 0;
  for (double& v : p) total += (v = std::exp(v - sorted[0]));
  double acc = 0;
  float threshold = sorted[49];
  for (int i = 0; i < 50; ++i) {
    acc += p[i];
    if (acc >= 0.9 * total) {
      threshold = sorted[i];
      break;
    }
  }
  auto tokens = draw(z, 256, 1.0f, 50, 0.9f, 0.0f);
  for (int32_t t : tokens) {
    ASSERT_GE(t, 0);
    EXPECT_GE(z[t], threshold) << "token " << t << " outside the top-p set (k-th value " << kth << ")";
  }
  auto greedy = draw(z, 2, 0.0f, 0, 1.0f, 0.0f);
  EXPECT_EQ(z[greedy[0]], sorted[0]);
}

// The kernels against the host reference (ops/host_sampling.h, which the ref backend runs): the same tokens for
// greedy rows, and for sampled rows up to a last-bit difference of expf/logf between libm and the GPU (at most one
// row in 256 here).
TEST(CudaSampling, AgreesWithTheHostReference) {
  std::mt19937 rng(73);
  const int batch = 256, vocab = 3000;
  HostTensor logits = random_tensor(DType::kF32, {batch, vocab}, rng, 3.0);
  std::vector<float> temp(batch), top_p(batch), min_p(batch);
  std::vector<int32_t> top_k(batch);
  std::vector<int64_t> seeds(batch), offsets(batch);
  for (int b = 0; b < batch; ++b) {
    temp[b] = b % 5 == 0 ? 0.0f : 0.3f + 0.1f * static_cast<float>(b % 9);
    top_k[b] = b % 3 == 0 ? 0 : 1 + b % 40;
    top_p[b] = b % 4 == 0 ? 1.0f : 0.5f + 0.05f * static_cast<float>(b % 10);
    min_p[b] = b % 7 == 0 ? 0.05f : 0.0f;
    seeds[b] = static_cast<int64_t>(rng());
    offsets[b] = b;
  }
  DeviceTensor d_logits(logits), d_t(f32_tensor(temp)), d_k(int_tensor(top_k)), d_p(f32_tensor(top_p));
  DeviceTensor d_m(f32_tensor(min_p)), d_seeds(i64_tensor(seeds)), d_offsets(i64_tensor(offsets));
  DeviceTensor d_out(HostTensor(DType::kI32, {batch})), d_lp(HostTensor(DType::kF32, {batch}));
  ops::CudaSampleParams p;
  p.logits = d_logits.view();
  p.temperature = d_t.view();
  p.top_k = d_k.view();
  p.top_p = d_p.view();
  p.min_p = d_m.view();
  p.seeds = d_seeds.view();
  p.offsets = d_offsets.view();
  p.out_tokens = d_out.view();
  p.out_logprobs = d_lp.view();
  ops::cuda_sample(gpu(), p);
  HostTensor tokens = d_out.to_host(), logprobs = d_lp.to_host();

  std::vector<float> h_logits(static_cast<size_t>(batch) * vocab), h_lp(batch);
  for (int64_t i = 0; i < batch * static_cast<int64_t>(vocab); ++i) h_logits[static_cast<size_t>(i)] = static_cast<float>(logits.get(i));
  std::vector<int32_t> h_out(batch);
  ops::SampleParams h;
  h.logits = TensorView(h_logits.data(), DType::kF32, {batch, vocab});
  h.temperature = TensorView(temp.data(), DType::kF32, {batch});
  h.top_k = TensorView(top_k.data(), DType::kI32, {batch});
  h.top_p = TensorView(top_p.data(), DType::kF32, {batch});
  h.min_p = TensorView(min_p.data(), DType::kF32, {batch});
  h.seeds = TensorView(seeds.data(), DType::kI64, {batch});
  h.offsets = TensorView(offsets.data(), DType::kI64, {batch});
  h.out_tokens = TensorView(h_out.data(), DType::kI32, {batch});
  h.out_logprobs = TensorView(h_lp.data(), DType::kF32, {batch});
  ops::host_sample(h);
  int differ = 0;
  for (int b = 0; b < batch; ++b) {
    const int32_t got = static_cast<int32_t>(tokens.get(b));
    if (temp[b] == 0.0f || top_k[b] == 1) {
      EXPECT_EQ(got, h_out[b]) << "greedy row " << b;
    } else if (got != h_out[b]) {
      ++differ;
    }
    if (got == h_out[b]) {
      EXPECT_NEAR(logprobs.get(b), h_lp[b], 1e-4) << "row " << b;
    }
  }
  EXPECT_LE(differ, 1) << "sampled rows that differ from the host reference";
}

// With token masks (and penalties, top-k/top-p/min-p): the kernels against the host reference with the same masks,
// every row's token allowed by its mask, token 0 where the mask allows nothing.
TEST(CudaSampling, TokenMasksAgreeWithTheHostReference) {
  testing::MaskedBatch m(96, 5000, 29);
  std::vector<int32_t> want(96);
  std::vector<float> want_lp(96);
  ops::host_sample(m.host_params(m.logits.data(), want.data(), want_lp.data(), true));
  // The same arrays on the device.
  auto dev = [](const TensorView& v) {
    HostTensor h(v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.ndim));
    std::memcpy(h.bytes.data(), v.data, h.bytes.size());
    return DeviceTensor(h);
  };
  std::vector<int32_t> scratch_out(96);
  std::vector<float> scratch_lp(96);
  ops::SampleParams h = m.host_params(m.logits.data(), scratch_out.data(), scratch_lp.data(), true);
  DeviceTensor logits = dev(h.logits), t = dev(h.temperature), k = dev(h.top_k), tp = dev(h.top_p), mp = dev(h.min_p);
  DeviceTensor rep = dev(h.repetition_penalty), pres = dev(h.presence_penalty), freq = dev(h.frequency_penalty);
  DeviceTensor pt = dev(h.prompt_tokens), po = dev(h.prompt_offsets), ot = dev(h.output_tokens), oo = dev(h.output_offsets);
  DeviceTensor seeds = dev(h.seeds), offsets = dev(h.offsets), allowed = dev(h.allowed_tokens), index = dev(h.allowed_index);
  DeviceTensor out(HostTensor(DType::kI32, {96})), lp(HostTensor(DType::kF32, {96}));
  ops::CudaSampleParams p;
  p.logits = logits.view();
  p.temperature = t.view();
  p.top_k = k.view();
  p.top_p = tp.view();
  p.min_p = mp.view();
  p.repetition_penalty = rep.view();
  p.presence_penalty = pres.view();
  p.frequency_penalty = freq.view();
  p.prompt_tokens = pt.view();
  p.prompt_offsets = po.view();
  p.output_tokens = ot.view();
  p.output_offsets = oo.view();
  p.seeds = seeds.view();
  p.offsets = offsets.view();
  p.allowed_tokens = allowed.view();
  p.allowed_index = index.view();
  p.out_tokens = out.view();
  p.out_logprobs = lp.view();
  ops::cuda_sample(gpu(), p);
  HostTensor got = out.to_host(), got_lp = lp.to_host();
  int differ = 0;
  for (int r = 0; r < 96; ++r) {
    const auto token = static_cast<int32_t>(got.get(r));
    if (r == 2) {
      EXPECT_EQ(token, 0) << "a mask that allows nothing";
    } else {
      EXPECT_TRUE(m.allows(r, token)) << "row " << r << " drew refused token " << token;
    }
    if (m.temperature[static_cast<size_t>(r)] == 0.0f || m.top_k[static_cast<size_t>(r)] == 1) {
      EXPECT_EQ(token, want[static_cast<size_t>(r)]) << "greedy row " << r;
    } else if (token != want[static_cast<size_t>(r)]) {
      ++differ;
    }
    if (token == want[static_cast<size_t>(r)]) {
      EXPECT_NEAR(got_lp.get(r), want_lp[static_cast<size_t>(r)], 1e-4) << "row " << r;
    }
  }
  EXPECT_LE(differ, 1) << "sampled rows that differ from the host reference";
}

}  // namespace
}  // namespace peregrine::cuda_test
