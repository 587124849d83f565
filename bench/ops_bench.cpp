// ops_bench: the CPU backend's matmul (decode GEMV and prefill GEMM) and paged decode attention on
// Llama-3.2-1B shapes with bf16 weights, each reported against the DRAM bandwidth measured in the same run.
// Weights are random; every benchmark cycles through enough copies that nothing is served from the L3 cache.
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/cpu_features.h"
#include "core/ggml_quant.h"
#include "core/memory_bandwidth.h"

namespace {

using namespace peregrine;

constexpr size_t kColdBytes = size_t{512} << 20;  // what each benchmark streams through, past any cache
MemoryBandwidth g_bandwidth;             // read_gbs: the best of a one-stream and an eight-stream read per thread
int g_threads = 0;                       // --threads=N (0: one per core)
ops::CpuIsa g_isa = ops::CpuIsa::kAuto;  // --isa=scalar|avx2|avx512
bool g_hot = false;                      // --hot: GGUF benchmarks reuse one weight copy (cache-resident: compute)

ops::Backend& backend() {
  static std::unique_ptr<ops::Backend> b = ops::make_cpu_backend(g_threads, g_isa);
  return *b;
}

// Host buffer from the backend (huge-page aligned when large) filled with small random bf16 values.
struct Bf16Buffer {
  ops::DeviceBuffer buf;
  explicit Bf16Buffer(size_t count, uint64_t seed) : buf(backend(), count * 2) {
    auto* p = static_cast<uint16_t*>(buf.data());
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < count; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      p[i] = static_cast<uint16_t>((s & 0x8000) | (0x3c00u + (s & 0x7f)));  // ±[2^-7, 2^-6)
    }
  }
};

std::vector<float> random_f32(size_t count, uint64_t seed) {
  std::vector<float> v(count);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
  for (float& f : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    f = static_cast<float>(static_cast<int64_t>(s % 2001) - 1000) * 1e-3f;
  }
  return v;
}

// Read bandwidth with eight concurrent streams per thread (as the GEMV reads eight weight rows at once): a
// one-stream sum can leave DRAM bandwidth unused. 1 GiB, best of 5, SSE2 loads (baseline x86-64).
double measure_multistream_read_gbs(int threads) {
  const size_t bytes = size_t{1} << 30, per_thread = bytes / static_cast<size_t>(threads) / 128 * 128;
  ops::DeviceBuffer buf(backend(), bytes);
  std::memset(buf.data(), 1, bytes);
  std::vector<uint64_t> sink(static_cast<size_t>(threads) * 8);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const char* base = static_cast<const char*>(buf.data()) + per_thread * static_cast<size_t>(t);
        const size_t stream = per_thread / 8;
        __m128i acc[8];
        for (auto& a : acc) a = _mm_setzero_si128();
        for (size_t off = 0; off < stream; off += 64)
          for (int s = 0; s < 8; ++s) {
            const auto* p = reinterpret_cast<const __m128i*>(base + s * stream + off);
            acc[s] = _mm_add_epi64(acc[s], _mm_add_epi64(_mm_add_epi64(_mm_load_si128(p), _mm_load_si128(p + 1)),
                                                         _mm_add_epi64(_mm_load_si128(p + 2), _mm_load_si128(p + 3))));
          }
        for (int s = 0; s < 8; ++s)
          sink[static_cast<size_t>(t) * 8] += static_cast<uint64_t>(_mm_cvtsi128_si64(acc[s]));
      });
    for (auto& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  benchmark::DoNotOptimize(sink.data());
  return static_cast<double>(per_thread) * threads / best / 1e9;
}

// Wall time of the benchmark loop (the counters below are per second of it).
struct LoopTimer {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

// GB/s of bytes streamed and its ratio to the measured DRAM read and copy bandwidths.
void report_bandwidth(benchmark::State& state, double bytes_per_iter, const LoopTimer& timer) {
  const double gbs = bytes_per_iter * static_cast<double>(state.iterations()) / timer.seconds() / 1e9;
  state.counters["GB/s"] = gbs;
  state.counters["x_read_bw"] = gbs / g_bandwidth.read_gbs;
  state.counters["x_copy_bw"] = gbs / g_bandwidth.copy_gbs;
}

// out[1, N] = x[1, K] · w[N, K]ᵀ with bf16 w: bytes of weights streamed per second.
void BM_Gemv(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1);
  const size_t w_bytes = static_cast<size_t>(n * k) * 2;
  const size_t copies = std::max<size_t>(1, (kColdBytes + w_bytes - 1) / w_bytes);
  std::vector<std::unique_ptr<Bf16Buffer>> w;
  for (size_t c = 0; c < copies; ++c) w.push_back(std::make_unique<Bf16Buffer>(static_cast<size_t>(n * k), c + 1));
  std::vector<float> x = random_f32(static_cast<size_t>(k), 3), out(static_cast<size_t>(n));
  size_t c = 0;
  LoopTimer timer;
  for (auto _ : state) {
    backend().matmul({TensorView(x.data(), DType::kF32, {1, k}),
                      TensorView(w[c]->buf.data(), DType::kBF16, {n, k}),
                      {},
                      TensorView(out.data(), DType::kF32, {1, n})});
    c = (c + 1) % copies;
    benchmark::DoNotOptimize(out.data());
  }
  report_bandwidth(state, static_cast<double>(w_bytes), timer);
}

// `copies` distinct weights for the cold benchmarks: code_bytes of xorshift bytes (seeded per copy from `seed`)
// and `scale_count` f32 scales of 1e-3 each.
void make_cold_codes(size_t copies, size_t code_bytes, int64_t scale_count, uint64_t seed,
                     std::vector<std::unique_ptr<ops::DeviceBuffer>>& codes,
                     std::vector<std::unique_ptr<ops::DeviceBuffer>>& scales) {
  for (size_t c = 0; c < copies; ++c) {
    codes.push_back(std::make_unique<ops::DeviceBuffer>(backend(), code_bytes));
    scales.push_back(std::make_unique<ops::DeviceBuffer>(backend(), static_cast<size_t>(scale_count) * 4));
    uint64_t st = c * 0x9e3779b97f4a7c15ull + seed;
    auto* p = static_cast<uint8_t*>(codes.back()->data());
    for (size_t i = 0; i < code_bytes; ++i) {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      p[i] = static_cast<uint8_t>(st);
    }
    auto* sp = static_cast<float*>(scales.back()->data());
    for (int64_t i = 0; i < scale_count; ++i) sp[i] = 1e-3f;
  }
}

// out[1, N] = x[1, K] · Wᵀ with W4A16 (range 4: int4 codes) or W8A16 (8: uint8 codes), group 128, f32 scales:
// bytes of codes + scales streamed per second.
void BM_QuantGemv(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), bits = state.range(2), groups = k / 128;
  const size_t code_bytes = static_cast<size_t>(n * k * bits / 8), scale_bytes = static_cast<size_t>(n * groups) * 4;
  const size_t bytes = code_bytes + scale_bytes;
  const size_t copies = std::max<size_t>(1, (kColdBytes + bytes - 1) / bytes);
  std::vector<std::unique_ptr<ops::DeviceBuffer>> codes, scales;
  make_cold_codes(copies, code_bytes, n * groups, 5, codes, scales);
  std::vector<float> x = random_f32(static_cast<size_t>(k), 3), out(static_cast<size_t>(n));
  size_t c = 0;
  LoopTimer timer;
  for (auto _ : state) {
    ops::WeightQuant q;
    q.scales = TensorView(scales[c]->data(), DType::kF32, {n, groups});
    q.group_size = 128;
    backend().matmul({TensorView(x.data(), DType::kF32, {1, k}),
                      TensorView(codes[c]->data(), bits == 4 ? DType::kI4 : DType::kU8, {n, k}), {},
                      TensorView(out.data(), DType::kF32, {1, n}), q});
    c = (c + 1) % copies;
    benchmark::DoNotOptimize(out.data());
  }
  report_bandwidth(state, static_cast<double>(bytes), timer);
}

// out[1, N] = x[1, K] · Wᵀ with int8 W8A8 (int8 codes, a scale per row; x quantized per token by the backend), on
// the plain codes or (packed 1) the backend's packed copy: bytes of codes streamed per second.
void BM_W8A8Gemv(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1);
  const bool packed = state.range(2) != 0;
  const size_t code_bytes = static_cast<size_t>(n * k);
  const size_t copies = std::max<size_t>(1, (kColdBytes + code_bytes - 1) / code_bytes);
  std::vector<std::unique_ptr<ops::DeviceBuffer>> codes, scales;
  make_cold_codes(copies, code_bytes, n, 7, codes, scales);
  auto quant = [&](size_t i) {
    ops::WeightQuant q;
    q.scales = TensorView(scales[i]->data(), DType::kF32, {n, 1});
    q.group_size = k;
    q.act = ops::ActQuant::kInt8;
    return q;
  };
  std::vector<ops::DeviceBuffer> packs;
  if (packed) {
    for (size_t i = 0; i < copies; ++i) {
      packs.push_back(backend().pack_weight(TensorView(codes[i]->data(), DType::kI8, {n, k}), quant(i)));
      if (!packs.back().data()) {
        state.SkipWithError("this backend does not pack int8 W8A8 weights");
        return;
      }
    }
  }
  std::vector<float> x = random_f32(static_cast<size_t>(k), 3), out(static_cast<size_t>(n));
  size_t c = 0;
  LoopTimer timer;
  for (auto _ : state) {
    ops::WeightQuant q = quant(c);
    if (packed) q.packed = packs[c].data();
    backend().matmul({TensorView(x.data(), DType::kF32, {1, k}), TensorView(codes[c]->data(), DType::kI8, {n, k}), {},
                      TensorView(out.data(), DType::kF32, {1, n}), q});
    c = (c + 1) % copies;
    benchmark::DoNotOptimize(out.data());
  }
  report_bandwidth(state, static_cast<double>(code_bytes), timer);
}

// One bs=1 decode step's matmuls of Llama-3.2-1B: 16 layers × (q, k, v, o, gate, up, down) + the tied lm_head,
// 2.47 GB of bf16 weights, each distinct. tok/s is the rate this alone would allow.
void BM_DecodeStepMatmuls(benchmark::State& state) {
  struct Linear {
    int64_t n, k;
  };
  const Linear layer[] = {{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                          {8192, 2048}, {8192, 2048}, {2048, 8192}};
  std::vector<std::unique_ptr<Bf16Buffer>> w;
  std::vector<Linear> shapes;
  for (int l = 0; l < 16; ++l)
    for (const Linear& s : layer) {
      shapes.push_back(s);
      w.push_back(std::make_unique<Bf16Buffer>(static_cast<size_t>(s.n * s.k), shapes.size()));
    }
  shapes.push_back({128256, 2048});
  w.push_back(std::make_unique<Bf16Buffer>(size_t{128256} * 2048, 999));
  double bytes = 0;
  for (const Linear& s : shapes) bytes += static_cast<double>(s.n * s.k) * 2;
  std::vector<float> x = random_f32(8192, 5), out(128256);
  LoopTimer timer;
  for (auto _ : state) {
    for (size_t i = 0; i < shapes.size(); ++i)
      backend().matmul({TensorView(x.data(), DType::kF32, {1, shapes[i].k}),
                        TensorView(w[i]->buf.data(), DType::kBF16, {shapes[i].n, shapes[i].k}),
                        {},
                        TensorView(out.data(), DType::kF32, {1, shapes[i].n})});
    benchmark::DoNotOptimize(out.data());
  }
  report_bandwidth(state, bytes, timer);
  state.counters["tok/s"] = static_cast<double>(state.iterations()) / timer.seconds();
}

// Prefill GEMM, M tokens × bf16 weights: GFLOP/s.
void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Bf16Buffer w(static_cast<size_t>(n * k), 11);
  std::vector<float> x = random_f32(static_cast<size_t>(m * k), 13), out(static_cast<size_t>(m * n));
  LoopTimer timer;
  for (auto _ : state) {
    backend().matmul({TensorView(x.data(), DType::kF32, {m, k}),
                      TensorView(w.buf.data(), DType::kBF16, {n, k}),
                      {},
                      TensorView(out.data(), DType::kF32, {m, n})});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / timer.seconds() / 1e9;
}

// Decode attention of one sequence at context L (32 query heads, 8 KV heads, head_dim 64, bf16 paged cache with
// block 16), cycling over 16 layers' caches: K/V bytes read per second.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t ctx = state.range(0), hq = 32, hkv = 8, hd = 64, bs = 16, layers = 16;
  const bool f32_cache = state.range(1) != 0;  // the CPU engine's default KV dtype is f32; --dtype bfloat16 gives bf16
  const int64_t elem = f32_cache ? 4 : 2;
  const int64_t blocks = (ctx + bs - 1) / bs;
  const size_t count = static_cast<size_t>(blocks * bs * hkv * hd);
  std::vector<std::unique_ptr<Bf16Buffer>> kc, vc;
  for (int64_t l = 0; l < layers; ++l) {
    // An f32 cache takes two bf16 buffers' bytes, refilled with small f32 values.
    kc.push_back(std::make_unique<Bf16Buffer>(count * static_cast<size_t>(elem / 2), 2 * l + 1));
    vc.push_back(std::make_unique<Bf16Buffer>(count * static_cast<size_t>(elem / 2), 2 * l + 2));
    if (f32_cache) {
      for (auto* b : {kc.back().get(), vc.back().get()}) {
        auto* f = static_cast<float*>(b->buf.data());
        for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-4f - 0.05f;
      }
    }
  }
  const DType cache_dtype = f32_cache ? DType::kF32 : DType::kBF16;
  std::vector<int32_t> table(static_cast<size_t>(blocks));  // non-contiguous: blocks in reverse order
  for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(blocks - 1 - b);
  std::vector<int32_t> qsl{0, 1}, lens{static_cast<int32_t>(ctx)};
  std::vector<float> q = random_f32(static_cast<size_t>(hq * hd), 17), out(static_cast<size_t>(hq * hd));
  int64_t l = 0;
  LoopTimer timer;
  for (auto _ : state) {
    ops::AttentionParams p;
    p.q = TensorView(q.data(), DType::kF32, {1, hq, hd});
    p.k_cache = TensorView(kc[static_cast<size_t>(l)]->buf.data(), cache_dtype, {blocks, bs, hkv, hd});
    p.v_cache = TensorView(vc[static_cast<size_t>(l)]->buf.data(), cache_dtype, {blocks, bs, hkv, hd});
    p.out = TensorView(out.data(), DType::kF32, {1, hq, hd});
    p.query_start_loc = TensorView(qsl.data(), DType::kI32, {2});
    p.seq_lens = TensorView(lens.data(), DType::kI32, {1});
    p.block_tables = TensorView(table.data(), DType::kI32, {1, blocks});
    p.scale = 0.125f;
    p.max_query_len = 1;
    p.max_seq_len = static_cast<int>(ctx);
    backend().attention(p);
    l = (l + 1) % layers;
    benchmark::DoNotOptimize(out.data());
  }
  report_bandwidth(state, static_cast<double>(ctx * hkv * hd * 2 * elem), timer);
}

// GGUF block weights (llama.cpp's types), random codes with fixed small f16 scales (no subnormal products).
struct GgmlWeights {
  std::unique_ptr<ops::DeviceBuffer> buf;
  GgmlType type;
  int64_t n, k;
  size_t bytes() const { return ggml_row_bytes(type, k) * static_cast<size_t>(n); }
  GgmlWeights(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) : type(t), n(rows), k(cols) {
    buf = std::make_unique<ops::DeviceBuffer>(backend(), bytes());
    auto* p = static_cast<uint8_t*>(buf->data());
    uint64_t st = seed * 0x9e3779b97f4a7c15ull + 5;
    for (size_t i = 0; i < bytes(); ++i) {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      p[i] = static_cast<uint8_t>(st);
    }
    const GgmlBlockInfo b = *ggml_block_info(t);
    const uint16_t h = 0x1400;  // f16 2^-10
    const bool two = t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1 || t == GgmlType::kQ4_K || t == GgmlType::kQ5_K;
    const size_t d_at = t == GgmlType::kQ6_K ? 208 : 0;
    for (size_t blk = 0; blk < bytes() / static_cast<size_t>(b.type_size); ++blk) {
      std::memcpy(p + blk * static_cast<size_t>(b.type_size) + d_at, &h, 2);
      if (two) std::memcpy(p + blk * static_cast<size_t>(b.type_size) + 2, &h, 2);
    }
  }
  TensorView view() const {
    return TensorView(buf->data(), DType::kU8, {n, static_cast<int64_t>(ggml_row_bytes(type, k))});
  }
  // The quantization of a matmul on these blocks; with `pack`, the backend's packed copy (as the model loader
  // makes it) where it has one.
  ops::DeviceBuffer packed;
  ops::WeightQuant quant(bool pack) {
    ops::WeightQuant q;
    q.ggml = type;
    if (pack && !packed.data()) packed = backend().pack_weight(view(), q);
    q.packed = pack ? packed.data() : nullptr;
    return q;
  }
};

// out[M, N] = x[M, K] · Wᵀ with W in ggml blocks (range 0: the ggml type id): block bytes streamed per second
// (against the measured read bandwidth), and GFLOP/s for the prefill shapes.
void BM_GgmlMatmul(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  const bool pack = state.range(4) != 0;
  const size_t bytes = ggml_row_bytes(type, k) * static_cast<size_t>(n);
  const size_t copies = m == 1 && !g_hot ? std::max<size_t>(1, (kColdBytes + bytes - 1) / bytes) : 1;
  std::vector<std::unique_ptr<GgmlWeights>> w;
  for (size_t c = 0; c < copies; ++c) w.push_back(std::make_unique<GgmlWeights>(type, n, k, c + 1));
  std::vector<float> x = random_f32(static_cast<size_t>(m * k), 3), out(static_cast<size_t>(m * n));
  std::vector<ops::WeightQuant> q;
  for (auto& wi : w) q.push_back(wi->quant(pack));
  size_t c = 0;
  LoopTimer timer;
  for (auto _ : state) {
    backend().matmul({TensorView(x.data(), DType::kF32, {m, k}), w[c]->view(), {},
                      TensorView(out.data(), DType::kF32, {m, n}), q[c]});
    c = (c + 1) % copies;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(ggml_type_name(type));
  report_bandwidth(state, static_cast<double>(bytes), timer);
  if (m > 1)
    state.counters["GFLOP/s"] =
        2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / timer.seconds() / 1e9;
}

// One bs=1 decode step's matmuls of Llama-3.2-1B with every weight in one ggml type (range 0), the lm_head
// included (as make_random_gguf.py writes a pure file), on the blocks or (range 1) packed: tok/s this alone allows.
// Type 0: the Q4_K_M mix llama.cpp's quantizer writes for this shape (bench/gguf_mix_q4_k_m.py): Q6_K for the
// lm_head and for v_proj / down_proj in the layers use_more_bits picks (0, 1, 4, 7, 10, 13, 14, 15), Q4_K elsewhere.
void BM_GgmlDecodeStep(benchmark::State& state) {
  const bool mix = state.range(0) == 0;
  const auto type = mix ? GgmlType::kQ4_K : static_cast<GgmlType>(state.range(0));
  auto more_bits = [](int i) { return i < 2 || i >= 14 || (i - 2) % 3 == 2; };
  struct Linear {
    int64_t n, k;
  };
  const Linear layer[] = {{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                          {8192, 2048}, {8192, 2048}, {2048, 8192}};
  std::vector<std::unique_ptr<GgmlWeights>> w;
  for (int l = 0; l < 16; ++l)
    for (int p = 0; p < 7; ++p) {
      const bool q6 = mix && (p == 2 || p == 6) && more_bits(l);
      w.push_back(std::make_unique<GgmlWeights>(q6 ? GgmlType::kQ6_K : type, layer[p].n, layer[p].k, w.size() + 1));
    }
  w.push_back(std::make_unique<GgmlWeights>(mix ? GgmlType::kQ6_K : type, 128256, 2048, 999));
  double bytes = 0;
  for (const auto& x : w) bytes += static_cast<double>(x->bytes());
  std::vector<float> x = random_f32(8192, 5), out(128256);
  std::vector<ops::WeightQuant> q;
  for (auto& wi : w) q.push_back(wi->quant(state.range(1) != 0));
  LoopTimer timer;
  for (auto _ : state) {
    for (size_t i = 0; i < w.size(); ++i)
      backend().matmul({TensorView(x.data(), DType::kF32, {1, w[i]->k}), w[i]->view(), {},
                        TensorView(out.data(), DType::kF32, {1, w[i]->n}), q[i]});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(mix ? std::string("Q4_K_M mix") : ggml_type_name(type));
  report_bandwidth(state, bytes, timer);
  state.counters["tok/s"] = static_cast<double>(state.iterations()) / timer.seconds();
}

// Launch overhead of a parallel op: a matmul too small to matter (N=64, K=8, f32) split over the threads.
void BM_ParallelOpOverhead(benchmark::State& state) {
  std::vector<float> x = random_f32(8, 1), w = random_f32(64 * 8, 2), out(64);
  for (auto _ : state) {
    backend().matmul({TensorView(x.data(), DType::kF32, {1, 8}), TensorView(w.data(), DType::kF32, {64, 8}), {},
                      TensorView(out.data(), DType::kF32, {1, 64})});
    benchmark::DoNotOptimize(out.data());
  }
}

}  // namespace

BENCHMARK(BM_ParallelOpOverhead)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemv)
    ->ArgNames({"N", "K"})
    ->Args({2048, 2048})
    ->Args({512, 2048})
    ->Args({8192, 2048})
    ->Args({2048, 8192})
    ->Args({128256, 2048})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_QuantGemv)
    ->ArgNames({"N", "K", "bits"})
    ->Args({2048, 2048, 4})
    ->Args({8192, 2048, 4})
    ->Args({2048, 8192, 4})
    ->Args({128256, 2048, 4})
    ->Args({8192, 2048, 8})
    ->Args({2048, 8192, 8})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W8A8Gemv)
    ->ArgNames({"N", "K", "packed"})
    ->ArgsProduct({{2048, 8192, 128256}, {2048}, {0, 1}})
    ->Args({2048, 8192, 0})
    ->Args({2048, 8192, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeStepMatmuls)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_Gemm)
    ->ArgNames({"M", "N", "K"})
    ->Args({128, 2048, 2048})
    ->Args({128, 8192, 2048})
    ->Args({128, 2048, 8192})
    ->Args({512, 2048, 2048})
    ->Args({512, 8192, 2048})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// Verification's shapes (speculative decoding: 1 + k rows): the 1B shape's MLP and pycoder-tiny's LM head.
BENCHMARK(BM_Gemm)
    ->Name("BM_GemmVerify")
    ->ArgNames({"M", "N", "K"})
    ->ArgsProduct({{1, 2, 4, 5, 8, 9, 16}, {8192}, {2048}})
    ->ArgsProduct({{1, 2, 4, 5, 8, 9, 16}, {32000}, {384}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// GGUF types at the 1B shape (Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q6_K = 14; also Q5_0 = 6, Q4_1 = 3, Q5_1 = 7, Q5_K = 13): decode and prefill, on
// the file's blocks (packed:0) and on the backend's packed copy (packed:1; the same as 0 for types it does not pack).
BENCHMARK(BM_GgmlMatmul)
    ->ArgNames({"type", "M", "N", "K", "packed"})
    ->ArgsProduct({{2, 8, 12, 14, 6}, {1, 128}, {2048}, {2048}, {0, 1}})
    ->ArgsProduct({{2, 8, 12, 14, 6}, {1, 128}, {8192}, {2048}, {0, 1}})
    ->ArgsProduct({{2, 8, 12, 14, 6}, {1, 128}, {2048}, {8192}, {0, 1}})
    ->ArgsProduct({{2, 8, 12, 14, 6}, {1}, {128256}, {2048}, {0, 1}})
    ->ArgsProduct({{2, 8, 12, 14, 6}, {1}, {512}, {2048}, {0, 1}})  // 0.3-0.6 MB: with --hot, from L2 (compute-bound)
    ->ArgsProduct({{3, 7, 13}, {1, 128}, {512, 2048}, {2048}, {0, 1}})  // Q4_1, Q5_1, Q5_K (rare in files)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GgmlDecodeStep)
    ->ArgNames({"type", "packed"})
    ->ArgsProduct({{2, 8, 12, 14, 6, 0}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionDecode)
    ->ArgNames({"ctx", "f32"})
    ->ArgsProduct({{1024, 4096, 16384}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  // Our own flags first (--threads=N, --isa=NAME); the rest goes to Google Benchmark.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_threads = std::atoi(argv[i] + 10);
    } else if (std::strcmp(argv[i], "--hot") == 0) {
      g_hot = true;
    } else if (std::strncmp(argv[i], "--isa=", 6) == 0) {
      const std::string isa = argv[i] + 6;
      g_isa = isa == "scalar"   ? ops::CpuIsa::kScalar
              : isa == "avx2"   ? ops::CpuIsa::kAvx2
              : isa == "avx512" ? ops::CpuIsa::kAvx512
                                : ops::CpuIsa::kAuto;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const int threads = g_threads > 0 ? g_threads : static_cast<int>(std::thread::hardware_concurrency());
  g_bandwidth = measure_host_bandwidth(threads);
  const double one_stream_read = g_bandwidth.read_gbs;
  const double multi_stream_read = measure_multistream_read_gbs(threads);
  g_bandwidth.read_gbs = std::max(one_stream_read, multi_stream_read);
  std::printf("cpu: %s; backend: %s\n", cpu_features().describe().c_str(), backend().name().c_str());
  std::printf(
      "measured DRAM bandwidth (%d threads, 1 GiB buffers, best of 5): read %.1f GB/s (one stream per "
      "thread %.1f, eight streams %.1f), copy %.1f GB/s (bytes read + written)\n",
      threads, g_bandwidth.read_gbs, one_stream_read, multi_stream_read, g_bandwidth.copy_gbs);
  std::printf("x_read_bw / x_copy_bw: the benchmark's GB/s over those two figures\n");
  benchmark::AddCustomContext("dram_read_GBps", std::to_string(g_bandwidth.read_gbs));
  benchmark::AddCustomContext("dram_copy_GBps", std::to_string(g_bandwidth.copy_gbs));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
