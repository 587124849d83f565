// cuda_ops_bench: measures the two ceilings first (HBM copy bandwidth, cuBLASLt bf16 matmul at 8192^3),
// then, in the same run and against them: decode attention (Llama-3-8B heads) at 8K/32K/128K for bs 1 and 8,
// causal prefill attention at 8K, and Llama-3-8B GEMM shapes at M=1 (weight GB/s) and M=8192 (TFLOP/s).
// Inputs rotate through buffer sets larger than L2; timings are medians of CUDA-graph replays.
// Usage: cuda_ops_bench [output.md]
#include <cuda_runtime_api.h>

#include <algorithm>
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

double measure_matmul_tflops(Bench& b, int64_t m, int64_t n, int64_t k, ops::MatmulPolicy policy) {
  b.cuda().set_matmul_policy(policy);
  DeviceBuffer x = b.random_buffer(DType::kBF16, m * k), w = b.random_buffer(DType::kBF16, n * k, 0.02f);
  DeviceBuffer out(b.be(), m * n * 2);
  const double ms = b.time_calls(5, [&](int) {
    b.be().matmul({x.view(DType::kBF16, {m, k}), w.view(DType::kBF16, {n, k}), TensorView(),
                   out.view(DType::kBF16, {m, n})});
  });
  b.cuda().set_matmul_policy(ops::MatmulPolicy::kBatchInvariant);
  return 2.0 * m * n * k / (ms * 1e-3) / 1e12;
}

// Weight GB/s of x[1, K] * w[N, K]^T, rotating through enough weight copies to defeat L2.
double measure_gemv_gbps(Bench& b, int64_t n, int64_t k, ops::MatmulPolicy policy) {
  b.cuda().set_matmul_policy(policy);
  const size_t wbytes = static_cast<size_t>(n * k * 2);
  const int sets = sets_for(wbytes);
  std::vector<DeviceBuffer> ws;
  for (int s = 0; s < sets; ++s) ws.push_back(b.random_buffer(DType::kBF16, n * k, 0.02f));
  DeviceBuffer x = b.random_buffer(DType::kBF16, k), out(b.be(), n * 2);
  const int calls = sets * std::max(1, 24 / sets);
  const double ms = b.time_calls(calls, [&](int i) {
    b.be().matmul({x.view(DType::kBF16, {1, k}), ws[i % sets].view(DType::kBF16, {n, k}), TensorView(),
                   out.view(DType::kBF16, {1, n})});
  });
  b.cuda().set_matmul_policy(ops::MatmulPolicy::kBatchInvariant);
  return wbytes / (ms * 1e-3) / 1e9;
}

struct AttnSetup {
  DeviceBuffer k_pool, v_pool, q, out, qsl, lens;
  std::vector<DeviceBuffer> tables;
  int num_seqs = 0, q_len = 0, ctx = 0, blocks_per_seq = 0;
};

constexpr int kHq = 32, kHkv = 8, kHd = 128, kBlock = 16;

AttnSetup make_attention(Bench& b, int num_seqs, int q_len, int ctx, int sets, std::mt19937& rng) {
  AttnSetup a;
  a.num_seqs = num_seqs;
  a.q_len = q_len;
  a.ctx = ctx;
  a.blocks_per_seq = ctx / kBlock;
  const int64_t set_blocks = static_cast<int64_t>(num_seqs) * a.blocks_per_seq;
  const int64_t pool_elems = sets * set_blocks * kBlock * kHkv * kHd;
  a.k_pool = b.random_buffer(DType::kBF16, pool_elems);
  a.v_pool = b.random_buffer(DType::kBF16, pool_elems);
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
  const int64_t pool_blocks = static_cast<int64_t>(a.k_pool.bytes() / (kBlock * kHkv * kHd * 2));
  const int64_t tokens = static_cast<int64_t>(a.num_seqs) * a.q_len;
  return {a.q.view(DType::kBF16, {tokens, kHq, kHd}),
          a.k_pool.view(DType::kBF16, {pool_blocks, kBlock, kHkv, kHd}),
          a.v_pool.view(DType::kBF16, {pool_blocks, kBlock, kHkv, kHd}),
          a.out.view(DType::kBF16, {tokens, kHq, kHd}),
          a.qsl.view(DType::kI32, {a.num_seqs + 1}),
          a.lens.view(DType::kI32, {a.num_seqs}),
          a.tables[set].view(DType::kI32, {a.num_seqs, a.blocks_per_seq}),
          1.0f / std::sqrt(static_cast<float>(kHd)),
          0,
          a.q_len,
          a.ctx};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (ops::cuda_device_count() == 0) {
      std::printf("cuda_ops_bench: no CUDA device\n");
      return 0;
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
    const double peak = measure_matmul_tflops(b, 8192, 8192, 8192, ops::MatmulPolicy::kFastest);
    rows.push_back({"cuBLASLt bf16 matmul 8192^3", fmt("%.0f TFLOP/s", peak), "ceiling"});
    std::fflush(stdout);

    for (int ctx : {8192, 32768, 131072})
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

    {
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

    struct Shape { const char* name; int64_t n, k; };
    const Shape shapes[] = {{"qkv_proj", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate_up_proj", 28672, 4096},
                            {"down_proj", 4096, 14336}, {"lm_head", 128256, 4096}};
    for (const Shape& sh : shapes) {
      const double inv = measure_gemv_gbps(b, sh.n, sh.k, ops::MatmulPolicy::kBatchInvariant);
      const double fast = measure_gemv_gbps(b, sh.n, sh.k, ops::MatmulPolicy::kFastest);
      rows.push_back({std::string("GEMM M=1 ") + sh.name + " [" + std::to_string(sh.n) + "x" + std::to_string(sh.k) +
                          "] invariant / fastest",
                      fmt("%.0f", inv) + fmt(" / %.0f GB/s", fast),
                      fmt("%.0f%%", 100 * inv / 1e3 / read_tbps) + fmt(" / %.0f%% of read BW", 100 * fast / 1e3 / read_tbps)});
      const double big_inv = measure_matmul_tflops(b, 8192, sh.n, sh.k, ops::MatmulPolicy::kBatchInvariant);
      const double big_fast = measure_matmul_tflops(b, 8192, sh.n, sh.k, ops::MatmulPolicy::kFastest);
      rows.push_back({std::string("GEMM M=8192 ") + sh.name + " invariant / fastest",
                      fmt("%.0f", big_inv) + fmt(" / %.0f TFLOP/s", big_fast),
                      fmt("%.0f%%", 100 * big_inv / peak) + fmt(" / %.0f%% of peak", 100 * big_fast / peak)});
      std::fflush(stdout);
    }

    std::string table = "| measurement | figure | versus |\n| --- | --- | --- |\n";
    for (const Row& r : rows) table += "| " + r.what + " | " + r.value + " | " + r.versus + " |\n";
    std::printf("\n%s", table.c_str());
    if (argc > 1) {
      if (FILE* f = std::fopen(argv[1], "w")) {
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
