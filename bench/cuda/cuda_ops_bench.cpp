// cuda_ops_bench: measures the two ceilings first (HBM copy bandwidth, cuBLASLt bf16 matmul at 8192^3),
// then, in the same run and against them: decode attention (Llama-3-8B heads) at 8K/32K/128K for bs 1 and 8,
// causal prefill attention at 8K, and Llama-3-8B GEMM shapes at M=1 (weight GB/s) and M=8192 (TFLOP/s) under
// each matmul policy, plus a sweep of pinned split-K counts. Inputs rotate through buffer sets larger than L2;
// timings are medians of CUDA-graph replays.
// --ggml-only: the HBM ceilings, then GGUF block matmuls (Q8_0/Q4_0/Q4_K/Q6_K, 8B shapes, M = 1/8/32) only.
// --skinny-only: the HBM ceilings, then the skinny bf16 kernel against split-K cuBLASLt at M = 1..16 only.
// --kv-cache-only: the HBM ceilings, then decode and prefill attention over bf16, fp8 and int8 KV caches only.
// Usage: cuda_ops_bench [--gemm-only | --ggml-only | --skinny-only | --kv-cache-only] [output.md]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "bench_fill.cuh"
#include "core/ggml_quant.h"
#include "core/status.h"

using namespace peregrine;
using peregrine::ops::DeviceBuffer;

namespace {

constexpr size_t kRotateBytes = size_t{512} << 20;  // distinct input bytes per timing loop (> 8x L2)

struct Row {
  std::string what, value, versus;
};

class Bench {
 public:
  Bench() : backend_(ops::make_cuda_backend(0)), cuda_(*ops::as_cuda_backend(*backend_)) {
    stream_ = static_cast<cudaStream_t>(cuda_.stream_handle());
  }

  ops::Backend& be() { return *backend_; }

  DeviceBuffer random_buffer(DType t, size_t n, float scale = 1.0f) {
    DeviceBuffer b(*backend_, dtype_bytes(t, n));
    cuda_bench::fill_random(b.data(), t, n, seed_++, scale, stream_);
    return b;
  }

  // Median milliseconds per call of body(i), i = 0..calls-1, replayed as one CUDA graph.
  double time_calls(int calls, const std::function<void(int)>& body, int replays = 7) {
    for (int i = 0; i < calls; ++i) body(i);  // eager warm-up: plans, workspaces, module loads
    backend_->synchronize();
    const int64_t graph = cuda_.capture_graph([&] {
      for (int i = 0; i < calls; ++i) body(i);
    });
    cuda_.replay_graph(graph);
    backend_->synchronize();
    cudaEvent_t start, stop;
    PEREGRINE_CUDA_CHECK(cudaEventCreate(&start));
    PEREGRINE_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> ms;
    for (int r = 0; r < replays; ++r) {
      PEREGRINE_CUDA_CHECK(cudaEventRecord(start, stream_));
      cuda_.replay_graph(graph);
      PEREGRINE_CUDA_CHECK(cudaEventRecord(stop, stream_));
      PEREGRINE_CUDA_CHECK(cudaEventSynchronize(stop));
      float t = 0;
      PEREGRINE_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t / calls);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cuda_.destroy_graph(graph);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  ops::CudaBackend& cuda() { return cuda_; }

 private:
  std::unique_ptr<ops::Backend> backend_;
  ops::CudaBackend& cuda_;
  cudaStream_t stream_ = nullptr;
  uint64_t seed_ = 1;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int sets_for(size_t bytes_per_set) {
  return static_cast<int>(std::clamp<size_t>((kRotateBytes + bytes_per_set - 1) / bytes_per_set, 1, 16));
}

struct Bandwidth {
  double memcpy_tbps, copy_tbps, read_tbps;  // copies count bytes read + written
};

Bandwidth measure_bandwidth(Bench& b) {
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer src = b.random_buffer(DType::kF32, bytes / 4), dst(b.be(), bytes), sink(b.be(), 64);
  cudaStream_t stream = static_cast<cudaStream_t>(b.cuda().stream_handle());
  const int blocks = b.cuda().multiprocessor_count() * 4;
  Bandwidth bw{};
  double ms = b.time_calls(4, [&](int) { b.be().copy_on_device(dst.data(), src.data(), bytes); });
  bw.memcpy_tbps = 2.0 * bytes / (ms * 1e-3) / 1e12;
  ms = b.time_calls(4, [&](int) { cuda_bench::copy_with_kernel(dst.data(), src.data(), bytes, blocks, stream); });
  bw.copy_tbps = 2.0 * bytes / (ms * 1e-3) / 1e12;
  ms = b.time_calls(4, [&](int) {
    cuda_bench::read_with_kernel(src.data(), bytes, static_cast<uint32_t*>(sink.data()), blocks, stream);
  });
  bw.read_tbps = bytes / (ms * 1e-3) / 1e12;
  return bw;
}

constexpr ops::MatmulPolicy kDefaultPolicy = ops::MatmulPolicy::kSkinnySmallM;

// Milliseconds per x[m, K] * w[N, K]^T. Small m rotates through weight copies to defeat L2. rows > 0 issues it
// as ceil(m / rows) matmuls of `rows` rows (what the backend's own chunking of split-K partials does).
double time_matmul(Bench& b, int64_t m, int64_t n, int64_t k, ops::MatmulPolicy policy, std::string* plan = nullptr,
                   int64_t rows = 0) {
  b.cuda().set_matmul_policy(policy);
  const size_t wbytes = static_cast<size_t>(n * k * 2);
  const int sets = m <= 256 ? sets_for(wbytes) : 1;
  std::vector<DeviceBuffer> ws;
  for (int s = 0; s < sets; ++s) ws.push_back(b.random_buffer(DType::kBF16, n * k, 0.02f));
  DeviceBuffer x = b.random_buffer(DType::kBF16, m * k), out(b.be(), m * n * 2);
  if (rows <= 0) rows = m;
  const int calls = sets > 1 ? sets * std::max(1, 24 / sets) : 5;
  const double ms = b.time_calls(calls, [&](int i) {
    for (int64_t r = 0; r < m; r += rows) {
      const int64_t c = std::min(rows, m - r);
      b.be().matmul({x.view(DType::kBF16, {m, k}).slice_rows(r, c), ws[i % sets].view(DType::kBF16, {n, k}),
                     TensorView(), out.view(DType::kBF16, {m, n}).slice_rows(r, c)});
    }
  });
  if (plan) *plan = b.cuda().describe_last_matmul();
  b.cuda().set_matmul_policy(kDefaultPolicy);
  return ms;
}

double tflops_of(int64_t m, int64_t n, int64_t k, double ms) { return 2.0 * m * n * k / (ms * 1e-3) / 1e12; }

double measure_matmul_tflops(Bench& b, int64_t m, int64_t n, int64_t k, ops::MatmulPolicy policy) {
  return tflops_of(m, n, k, time_matmul(b, m, n, k, policy));
}

// FP8 W8A8 through the backend's matmul (per-token activation quantization + cuBLASLt FP8 GEMM with per-token and
// per-channel scales): milliseconds per call. The codes are random bytes (timing does not depend on their values).
double time_fp8_matmul(Bench& b, int64_t m, int64_t n, int64_t k) {
  DeviceBuffer w = b.random_buffer(DType::kBF16, n * k / 2, 0.02f), x = b.random_buffer(DType::kBF16, m * k),
               out(b.be(), m * n * 2), scales = b.random_buffer(DType::kF32, n, 0.01f);
  ops::WeightQuant q;
  q.scales = scales.view(DType::kF32, {n, 1});
  q.group_size = k;
  q.act = ops::ActQuant::kFp8;
  return b.time_calls(5, [&](int) {
    b.be().matmul({x.view(DType::kBF16, {m, k}), w.view(DType::kF8E4M3, {n, k}), TensorView(),
                   out.view(DType::kBF16, {m, n}), q});
  });
}

struct AttnSetup {
  DeviceBuffer k_pool, v_pool, q, out, qsl, lens;
  DeviceBuffer k_scales, v_scales;  // 8-bit caches: one f32 per (slot, KV head)
  std::vector<DeviceBuffer> tables;
  int num_seqs = 0, q_len = 0, ctx = 0, blocks_per_seq = 0;
  DType cache = DType::kBF16;
};

constexpr int kHq = 32, kHkv = 8, kHd = 128, kBlock = 16;

// cache: bf16, or int8 / fp8 e4m3 codes (random bytes: timing does not depend on their values) with random scales.
AttnSetup make_attention(Bench& b, int num_seqs, int q_len, int ctx, int sets, std::mt19937& rng,
                         DType cache = DType::kBF16) {
  AttnSetup a;
  a.num_seqs = num_seqs;
  a.q_len = q_len;
  a.ctx = ctx;
  a.cache = cache;
  a.blocks_per_seq = ctx / kBlock;
  const int64_t set_blocks = static_cast<int64_t>(num_seqs) * a.blocks_per_seq;
  const int64_t pool_elems = sets * set_blocks * kBlock * kHkv * kHd;
  if (cache == DType::kBF16) {
    a.k_pool = b.random_buffer(DType::kBF16, pool_elems);
    a.v_pool = b.random_buffer(DType::kBF16, pool_elems);
  } else {
    a.k_pool = b.random_buffer(DType::kBF16, pool_elems / 2);
    a.v_pool = b.random_buffer(DType::kBF16, pool_elems / 2);
    a.k_scales = b.random_buffer(DType::kF32, pool_elems / kHd, 0.01f);
    a.v_scales = b.random_buffer(DType::kF32, pool_elems / kHd, 0.01f);
  }
  a.q = b.random_buffer(DType::kBF16, static_cast<size_t>(num_seqs) * q_len * kHq * kHd);
  a.out = DeviceBuffer(b.be(), static_cast<size_t>(num_seqs) * q_len * kHq * kHd * 2);
  std::vector<int32_t> qsl(num_seqs + 1), lens(num_seqs, ctx);
  for (int s = 0; s <= num_seqs; ++s) qsl[s] = s * q_len;
  a.qsl = DeviceBuffer(b.be(), qsl.size() * 4);
  a.lens = DeviceBuffer(b.be(), lens.size() * 4);
  b.be().copy_from_host(a.qsl.data(), qsl.data(), qsl.size() * 4);
  b.be().copy_from_host(a.lens.data(), lens.data(), lens.size() * 4);
  for (int s = 0; s < sets; ++s) {  // each set: a shuffled (paged) slice of the pool
    std::vector<int32_t> table(set_blocks);
    std::iota(table.begin(), table.end(), static_cast<int32_t>(s * set_blocks));
    std::shuffle(table.begin(), table.end(), rng);
    a.tables.emplace_back(b.be(), table.size() * 4);
    b.be().copy_from_host(a.tables.back().data(), table.data(), table.size() * 4);
  }
  return a;
}

ops::AttentionParams attention_params(AttnSetup& a, int set) {
  const int64_t pool_blocks = static_cast<int64_t>(a.k_pool.bytes() / dtype_bytes(a.cache, kBlock * kHkv * kHd));
  const int64_t tokens = static_cast<int64_t>(a.num_seqs) * a.q_len;
  ops::AttentionParams p{
          a.q.view(DType::kBF16, {tokens, kHq, kHd}),
          a.k_pool.view(a.cache, {pool_blocks, kBlock, kHkv, kHd}),
          a.v_pool.view(a.cache, {pool_blocks, kBlock, kHkv, kHd}),
          a.out.view(DType::kBF16, {tokens, kHq, kHd}),
          a.qsl.view(DType::kI32, {a.num_seqs + 1}),
          a.lens.view(DType::kI32, {a.num_seqs}),
          a.tables[set].view(DType::kI32, {a.num_seqs, a.blocks_per_seq}),
          1.0f / std::sqrt(static_cast<float>(kHd)),
          0,
          a.q_len,
          a.ctx, {}, {}, {}, {}, {}};
  if (a.cache != DType::kBF16) {
    p.k_scales = a.k_scales.view(DType::kF32, {pool_blocks, kBlock, kHkv});
    p.v_scales = a.v_scales.view(DType::kF32, {pool_blocks, kBlock, kHkv});
  }
  return p;
}

// Decode (bs 1 / 8 / 64 at 2K..32K) and 8K causal prefill attention over bf16, fp8 e4m3 and int8 caches, each
// 8-bit figure beside the bf16 cache's in the same run (issue 12's goal: fp8 at 32K, bs 8 >= 1.8x bf16).
void add_kv_cache_rows(Bench& b, std::vector<Row>& rows, double copy_tbps, std::mt19937& rng) {
  struct Shape { int ctx, bs; };
  for (Shape sh : {Shape{2048, 64}, Shape{8192, 8}, Shape{32768, 1}, Shape{32768, 8}}) {
    double bf16_ms = 0;
    for (DType cache : {DType::kBF16, DType::kF8E4M3, DType::kI8}) {
      const size_t kv_bytes = static_cast<size_t>(sh.bs) * sh.ctx * kHkv * (dtype_bytes(cache, kHd) + (cache == DType::kBF16 ? 0 : 4)) * 2;
      const int sets = sets_for(kv_bytes);
      AttnSetup a = make_attention(b, sh.bs, 1, sh.ctx, sets, rng, cache);
      std::vector<ops::AttentionParams> params;
      for (int s = 0; s < sets; ++s) params.push_back(attention_params(a, s));
      const int calls = sets * std::max(1, 16 / sets);
      const double ms = b.time_calls(calls, [&](int i) { b.be().attention(params[i % sets]); });
      if (cache == DType::kBF16) bf16_ms = ms;
      const double tbps = kv_bytes / (ms * 1e-3) / 1e12;
      rows.push_back({"decode attention ctx " + std::to_string(sh.ctx / 1024) + "K bs " + std::to_string(sh.bs) + " " +
                          std::string(dtype_name(cache)) + " cache (32q/8kv, d128): " + fmt("%.1f us", ms * 1e3),
                      fmt("%.2f TB/s of cache read", tbps),
                      fmt("%.0f%% of copy BW; ", 100 * tbps / copy_tbps) + fmt("%.2fx the bf16 cache", bf16_ms / ms)});
      std::fflush(stdout);
    }
  }
  double bf16_ms = 0;
  for (DType cache : {DType::kBF16, DType::kF8E4M3, DType::kI8}) {
    const int s = 8192;
    AttnSetup a = make_attention(b, 1, s, s, 1, rng, cache);
    ops::AttentionParams p = attention_params(a, 0);
    const double ms = b.time_calls(3, [&](int) { b.be().attention(p); });
    if (cache == DType::kBF16) bf16_ms = ms;
    const double flops = 4.0 * kHq * kHd * (static_cast<double>(s) * (s + 1) / 2);
    rows.push_back({std::string("prefill attention 8K causal ") + std::string(dtype_name(cache)) + " cache: " + fmt("%.2f ms", ms),
                    fmt("%.0f TFLOP/s", flops / (ms * 1e-3) / 1e12), fmt("%.2fx the bf16 cache", bf16_ms / ms)});
    std::fflush(stdout);
  }
}

// The split count in a describe_last_matmul() string.
std::string split_count(const std::string& plan) {
  const size_t at = plan.find(" splits ");
  return at == std::string::npos ? "?" : plan.substr(at + 8, plan.find(' ', at + 8) - at - 8);
}

// Llama-3-8B GEMM shapes (as the model runs them: q, k, v, o, gate, up, down, lm_head) under the three policies
// at M = 1, 32 (weight GB/s vs the read ceiling), 256 and 8192 (TFLOP/s vs the matmul peak); then a sweep of
// pinned split counts, with M = 8192 also issued in row chunks of 512, 1024 and 2048.
void add_gemm_rows(Bench& b, std::vector<Row>& rows, double read_tbps, double peak) {
  struct Shape { const char* name; int64_t n, k; };
  const Shape shapes[] = {{"q_proj/o_proj", 4096, 4096}, {"k_proj/v_proj", 1024, 4096},
                          {"gate/up_proj", 14336, 4096}, {"down_proj", 4096, 14336},
                          {"lm_head", 128256, 4096},     {"qkv fused", 6144, 4096}};
  const ops::MatmulPolicy policies[] = {ops::MatmulPolicy::kBatchInvariantSplitK,
                                        ops::MatmulPolicy::kBatchInvariant, ops::MatmulPolicy::kFastest};
  for (const Shape& sh : shapes) {
    const std::string dims = std::string(sh.name) + " [" + std::to_string(sh.n) + "x" + std::to_string(sh.k) + "]";
    std::string plan1, plan_big, splits;
    for (int64_t m : {1, 32, 256, 8192}) {
      double v[3];
      for (int i = 0; i < 3; ++i) {
        std::string* plan = i > 0 ? nullptr : m == 1 ? &plan1 : m == 8192 ? &plan_big : nullptr;
        const double ms = time_matmul(b, m, sh.n, sh.k, policies[i], plan);
        v[i] = m <= 32 ? static_cast<double>(sh.n) * sh.k * 2 / (ms * 1e-3) / 1e9 : tflops_of(m, sh.n, sh.k, ms);
      }
      if (m == 1) splits = split_count(plan1);
      const bool bw = m <= 32;
      const double ceiling = bw ? read_tbps * 1e3 : peak;
      rows.push_back({"GEMM M=" + std::to_string(m) + " " + dims + " (S=" + splits +
                          "): split-K invariant / invariant / fastest",
                      fmt("%.0f", v[0]) + fmt(" / %.0f", v[1]) + fmt(bw ? " / %.0f GB/s" : " / %.0f TFLOP/s", v[2]),
                      fmt("%.0f%%", 100 * v[0] / ceiling) + fmt(" / %.0f%%", 100 * v[1] / ceiling) +
                          fmt(bw ? " / %.0f%% of read BW" : " / %.0f%% of peak", 100 * v[2] / ceiling)});
    }
    std::printf("  %s default plans: M=1 %s; M=8192 %s\n", dims.c_str(), plan1.c_str(), plan_big.c_str());
    std::fflush(stdout);
  }
  struct Sweep { const char* name; int64_t n, k; std::vector<int> splits; };
  const Sweep sweeps[] = {{"q_proj/o_proj", 4096, 4096, {1, 2, 4}},
                          {"k_proj/v_proj", 1024, 4096, {1, 2, 4, 8}},
                          {"down_proj", 4096, 14336, {1, 2, 4}}};
  for (const Sweep& sw : sweeps) {
    for (int splits : sw.splits) {
      b.cuda().set_matmul_splits(sw.n, sw.k, splits);
      std::string plan;
      const double ms1 = time_matmul(b, 1, sw.n, sw.k, ops::MatmulPolicy::kBatchInvariantSplitK, &plan);
      const double gbps = static_cast<double>(sw.n) * sw.k * 2 / (ms1 * 1e-3) / 1e9;
      std::string chunked;
      for (int64_t r : {0, 512, 1024, 2048}) {
        const double ms = time_matmul(b, 8192, sw.n, sw.k, ops::MatmulPolicy::kBatchInvariantSplitK, nullptr, r);
        chunked += fmt(r ? " / %.0f" : "%.0f", tflops_of(8192, sw.n, sw.k, ms));
      }
      std::printf("  sweep %s S=%d: M=1 %s\n", sw.name, splits, plan.c_str());
      rows.push_back({std::string("sweep ") + sw.name + " [" + std::to_string(sw.n) + "x" + std::to_string(sw.k) +
                          "] S=" + std::to_string(splits) + ": M=1 GB/s; M=8192 TFLOP/s in one call (backend chunks) / "
                          "in 512 / 1024 / 2048-row calls",
                      fmt("%.0f GB/s; ", gbps) + chunked + " TFLOP/s",
                      fmt("%.0f%% of read BW", 100 * gbps / 1e3 / read_tbps)});
      std::fflush(stdout);
    }
    b.cuda().set_matmul_splits(sw.n, sw.k, 0);
  }
}

// Milliseconds per group of matmuls over one x[m, K] (Backend::matmuls: q/k/v or gate/up), weights rotated
// through copies to defeat L2. Under kSkinnySmallM with m <= 16 the group is one launch; otherwise one per matmul.
double time_group(Bench& b, int64_t m, const std::vector<int64_t>& ns, int64_t k, ops::MatmulPolicy policy) {
  b.cuda().set_matmul_policy(policy);
  size_t wbytes = 0;
  for (int64_t n : ns) wbytes += static_cast<size_t>(n * k * 2);
  const int sets = sets_for(wbytes);
  std::vector<std::vector<DeviceBuffer>> ws(static_cast<size_t>(sets));
  std::vector<DeviceBuffer> outs;
  for (auto& set : ws)
    for (int64_t n : ns) set.push_back(b.random_buffer(DType::kBF16, n * k, 0.02f));
  for (int64_t n : ns) outs.emplace_back(b.be(), static_cast<size_t>(m * n * 2));
  DeviceBuffer x = b.random_buffer(DType::kBF16, m * k);
  std::vector<std::vector<ops::MatmulParams>> params(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s)
    for (size_t i = 0; i < ns.size(); ++i)
      params[s].push_back({x.view(DType::kBF16, {m, k}), ws[s][i].view(DType::kBF16, {ns[i], k}), TensorView(),
                           outs[i].view(DType::kBF16, {m, ns[i]})});
  const int calls = sets * std::max(1, 24 / sets);
  const double ms = b.time_calls(calls, [&](int i) { b.be().matmuls(params[i % sets]); });
  b.cuda().set_matmul_policy(kDefaultPolicy);
  return ms;
}

// The skinny tensor-core kernel (the default policy at M <= 16) against cuBLASLt's batch-invariant split-K at the
// same M, on the Llama-3-8B shapes as the model issues them (q/k/v and gate/up grouped), in weight GB/s against
// the read ceiling; then one decode layer's matmuls both ways.
void add_skinny_rows(Bench& b, std::vector<Row>& rows, double read_tbps) {
  struct Group { const char* name; std::vector<int64_t> ns; int64_t k; };
  const Group groups[] = {{"q/k/v (grouped)", {4096, 1024, 1024}, 4096}, {"o_proj", {4096}, 4096},
                          {"gate/up (grouped)", {14336, 14336}, 4096}, {"down_proj", {4096}, 14336},
                          {"lm_head", {128256}, 4096}, {"k_proj alone", {1024}, 4096}};
  std::printf("\n| matmul | M | skinny us | skinny GB/s (of read) | split-K us | split-K GB/s | skinny speed-up |\n"
              "| --- | --- | --- | --- | --- | --- | --- |\n");
  double layer_skinny = 0, layer_splitk = 0;
  for (const Group& g : groups) {
    double bytes = 0;
    for (int64_t n : g.ns) bytes += static_cast<double>(n) * g.k * 2;
    for (int64_t m : {1, 2, 4, 8, 12, 16}) {
      const double sk = time_group(b, m, g.ns, g.k, ops::MatmulPolicy::kSkinnySmallM);
      const double lt = time_group(b, m, g.ns, g.k, ops::MatmulPolicy::kBatchInvariantSplitK);
      const double sk_gbs = bytes / (sk * 1e-3) / 1e9, lt_gbs = bytes / (lt * 1e-3) / 1e9;
      std::printf("| %s | %ld | %.1f | %.0f (%.0f%%) | %.1f | %.0f | %.2fx |\n", g.name, static_cast<long>(m), sk * 1e3,
                  sk_gbs, 100 * sk_gbs / 1e3 / read_tbps, lt * 1e3, lt_gbs, lt / sk);
      std::fflush(stdout);
      if (m == 1 || m == 8 || m == 16)
        rows.push_back({std::string("skinny GEMM M=") + std::to_string(m) + " " + g.name + ": skinny / split-K",
                        fmt("%.0f", sk_gbs) + fmt(" / %.0f GB/s", lt_gbs),
                        fmt("%.0f%% of read BW, ", 100 * sk_gbs / 1e3 / read_tbps) + fmt("%.2fx", lt / sk)});
      if (m == 1 && std::string(g.name) != "lm_head" && std::string(g.name) != "k_proj alone") {
        layer_skinny += sk;
        layer_splitk += lt;
      }
    }
  }
  const double layer_bytes = (6144.0 + 4096 + 28672) * 4096 * 2 + 4096.0 * 14336 * 2;
  rows.push_back({"one 8B decode layer's matmuls at M=1: skinny / split-K",
                  fmt("%.1f", layer_skinny * 1e3) + fmt(" / %.1f us", layer_splitk * 1e3),
                  fmt("%.0f%% / ", 100 * layer_bytes / (layer_skinny * 1e-3) / 1e12 / read_tbps) +
                      fmt("%.0f%% of read BW", 100 * layer_bytes / (layer_splitk * 1e-3) / 1e12 / read_tbps)});
}

// GGUF block weights (ggml_matmul.cuh) at Llama-3-8B shapes: M = 1 and 8 (GEMV: block bytes read per second
// against the HBM ceilings) and M = 32 (dequantize + cuBLASLt). Random codes, fixed small f16 scales.
void add_ggml_rows(Bench& b, std::vector<Row>& rows, double copy_tbps, double read_tbps) {
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  std::printf("\n| ggml type | N x K | M | us | GB/s of blocks | vs copy BW | vs read BW |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (const Shape& sh : shapes) {
      const size_t row_bytes = ggml_row_bytes(t, sh.k), bytes = row_bytes * static_cast<size_t>(sh.n);
      std::vector<uint8_t> host(bytes);
      uint64_t st = 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(t) + 1);
      for (auto& v : host) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        v = static_cast<uint8_t>(st);
      }
      const GgmlBlockInfo bi = *ggml_block_info(t);
      const uint16_t h = 0x1400;  // 2^-10
      const size_t d_at = t == GgmlType::kQ6_K ? 208 : 0;
      for (size_t blk = 0; blk < bytes / static_cast<size_t>(bi.type_size); ++blk) {
        std::memcpy(host.data() + blk * static_cast<size_t>(bi.type_size) + d_at, &h, 2);
        if (t == GgmlType::kQ4_K) std::memcpy(host.data() + blk * static_cast<size_t>(bi.type_size) + 2, &h, 2);
      }
      const int sets = sets_for(bytes);
      std::vector<DeviceBuffer> ws;
      for (int si = 0; si < sets; ++si) {
        ws.emplace_back(b.be(), bytes);
        b.be().copy_from_host(ws.back().data(), host.data(), bytes);
      }
      for (int64_t m : {1, 8, 32}) {
        DeviceBuffer x = b.random_buffer(DType::kBF16, m * sh.k), out(b.be(), m * sh.n * 2);
        ops::WeightQuant q;
        q.ggml = t;
        const int calls = sets * std::max(1, 24 / sets);
        const double ms = b.time_calls(calls, [&](int i) {
          b.be().matmul({x.view(DType::kBF16, {m, sh.k}),
                         TensorView(ws[i % sets].data(), DType::kU8, {sh.n, static_cast<int64_t>(row_bytes)}),
                         TensorView(), out.view(DType::kBF16, {m, sh.n}), q});
        });
        const double gbps = bytes / (ms * 1e-3) / 1e9;
        std::printf("| %s | %lldx%lld | %lld | %.1f | %.0f | %.0f%% | %.0f%% |\n", ggml_type_name(t).c_str(),
                    static_cast<long long>(sh.n), static_cast<long long>(sh.k), static_cast<long long>(m), ms * 1e3,
                    gbps, 100 * gbps / 1e3 / copy_tbps, 100 * gbps / 1e3 / read_tbps);
        std::fflush(stdout);
        rows.push_back({"ggml " + ggml_type_name(t) + " " + std::to_string(sh.n) + "x" + std::to_string(sh.k) +
                            " M " + std::to_string(m) + ": " + fmt("%.1f us", ms * 1e3),
                        fmt("%.0f GB/s of blocks", gbps),
                        fmt("%.0f%% of copy BW, ", 100 * gbps / 1e3 / copy_tbps) +
                            fmt("%.0f%% of read BW", 100 * gbps / 1e3 / read_tbps)});
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (ops::cuda_device_count() == 0) {
      std::printf("cuda_ops_bench: no CUDA device\n");
      return 0;
    }
    bool gemm_only = false, ggml_only = false, fp8 = false, fp8_only = false, skinny_only = false, kv_only = false;
    const char* out_path = nullptr;
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--gemm-only") {
        gemm_only = true;
      } else if (std::string(argv[i]) == "--skinny-only") {
        skinny_only = true;
      } else if (std::string(argv[i]) == "--kv-cache-only") {
        kv_only = true;
      } else if (std::string(argv[i]) == "--ggml-only") {
        ggml_only = true;
      } else if (std::string(argv[i]) == "--fp8") {
        fp8 = true;
      } else if (std::string(argv[i]) == "--fp8-only") {
        fp8 = fp8_only = true;
      } else {
        out_path = argv[i];
      }
    }
    Bench b;
    std::mt19937 rng(7);
    std::vector<Row> rows;
    std::printf("device: %s, %d SMs\n", b.be().name().c_str(), b.cuda().multiprocessor_count());

    const Bandwidth bw = measure_bandwidth(b);
    const double copy_tbps = std::max(bw.copy_tbps, bw.memcpy_tbps), read_tbps = bw.read_tbps;
    rows.push_back({"HBM copy, 16-byte kernel (2 GiB, read+write)", fmt("%.2f TB/s", bw.copy_tbps), "ceiling"});
    rows.push_back({"HBM copy, cudaMemcpyAsync D2D in a graph", fmt("%.2f TB/s", bw.memcpy_tbps), "(copy engine)"});
    rows.push_back({"HBM read-only kernel (2 GiB)", fmt("%.2f TB/s", read_tbps), "ceiling for reads"});
    if (ggml_only || skinny_only || kv_only) {
      if (ggml_only) add_ggml_rows(b, rows, copy_tbps, read_tbps);
      if (skinny_only) add_skinny_rows(b, rows, read_tbps);
      if (kv_only) add_kv_cache_rows(b, rows, copy_tbps, rng);
      std::string table = "| measurement | figure | versus |\n| --- | --- | --- |\n";
      for (const Row& r : rows) table += "| " + r.what + " | " + r.value + " | " + r.versus + " |\n";
      std::printf("\n%s", table.c_str());
      return 0;
    }
    const double peak = measure_matmul_tflops(b, 8192, 8192, 8192, ops::MatmulPolicy::kFastest);
    rows.push_back({"cuBLASLt bf16 matmul 8192^3", fmt("%.0f TFLOP/s", peak), "ceiling"});
    if (fp8) {
      const double ms = time_fp8_matmul(b, 8192, 8192, 8192);
      const double t = tflops_of(8192, 8192, 8192, ms);
      rows.push_back({"FP8 W8A8 matmul 8192^3 (act quant + cuBLASLt FP8): " + fmt("%.2f ms", ms), fmt("%.0f TFLOP/s", t),
                      fmt("%.2fx the bf16 peak", t / peak)});
      for (int64_t m : {1, 16}) {
        const double mm = time_fp8_matmul(b, m, 14336, 4096);
        rows.push_back({"FP8 W8A8 matmul M=" + std::to_string(m) + " [14336, 4096] (warp kernel): " + fmt("%.1f us", mm * 1e3),
                        fmt("%.0f GB/s of weights", 14336.0 * 4096 / (mm * 1e-3) / 1e9), "vs the read ceiling above"});
      }
    }
    std::fflush(stdout);
    if (fp8_only) gemm_only = true;

    for (int ctx : {8192, 32768, 131072}) {
      if (gemm_only) break;
      for (int bs : {1, 8}) {
        const size_t kv_bytes = static_cast<size_t>(bs) * ctx * kHkv * kHd * 2 * 2;
        const int sets = sets_for(kv_bytes);
        AttnSetup a = make_attention(b, bs, 1, ctx, sets, rng);
        std::vector<ops::AttentionParams> params;
        for (int s = 0; s < sets; ++s) params.push_back(attention_params(a, s));
        const int calls = sets * std::max(1, 16 / sets);
        const double ms = b.time_calls(calls, [&](int i) { b.be().attention(params[i % sets]); });
        const double tbps = kv_bytes / (ms * 1e-3) / 1e12;
        rows.push_back({"decode attention ctx " + std::to_string(ctx / 1024) + "K bs " + std::to_string(bs) +
                            " (32q/8kv, d128): " + fmt("%.1f us", ms * 1e3),
                        fmt("%.2f TB/s KV", tbps),
                        fmt("%.0f%% of copy BW (goal 80%%), ", 100 * tbps / copy_tbps) +
                            fmt("%.0f%% of read BW", 100 * tbps / read_tbps)});
        std::fflush(stdout);
      }
    }

    if (!gemm_only) {
      const int s = 8192;
      AttnSetup a = make_attention(b, 1, s, s, 1, rng);
      ops::AttentionParams p = attention_params(a, 0);
      const double ms = b.time_calls(3, [&](int) { b.be().attention(p); });
      const double flops = 4.0 * kHq * kHd * (static_cast<double>(s) * (s + 1) / 2);
      const double tflops = flops / (ms * 1e-3) / 1e12;
      rows.push_back({"prefill attention 8K causal (32q/8kv, d128): " + fmt("%.2f ms", ms),
                      fmt("%.0f TFLOP/s", tflops),
                      fmt("%.0f%% of matmul peak; ", 100 * tflops / peak) + fmt("%.0f%% of cuDNN's 579", 100 * tflops / 579)});
    }

    if (!fp8_only) add_gemm_rows(b, rows, read_tbps, peak);
    if (!fp8_only) add_skinny_rows(b, rows, read_tbps);

    std::string table = "| measurement | figure | versus |\n| --- | --- | --- |\n";
    for (const Row& r : rows) table += "| " + r.what + " | " + r.value + " | " + r.versus + " |\n";
    std::printf("\n%s", table.c_str());
    if (out_path) {
      if (FILE* f = std::fopen(out_path, "w")) {
        std::fprintf(f, "device: %s\n\n%s", b.be().name().c_str(), table.c_str());
        std::fclose(f);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
