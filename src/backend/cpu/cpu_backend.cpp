// CpuBackend: validates each op, splits it over the thread pool and runs the kernel table chosen at start-up
// (AVX-512 → AVX2+FMA+F16C → scalar, see cpu_kernels.h). Activations are f32; weights and KV caches may be
// f32, bf16 or f16 and are read in place.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/ggml_kernels.h"
#include "backend/cpu/ggml_packed.h"
#include "backend/cpu/quant_lowp.h"
#include "backend/cpu/w8_matmul.h"
#include "core/cpu_features.h"
#include "core/ggml_quant.h"
#include "core/huge_pages.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "ops/act_quant.h"
#include "ops/host_memory.h"
#include "ops/host_sampling.h"
#include "ops/op_checks.h"

namespace peregrine::ops {
namespace {

using cpu::KernelTable;

constexpr int64_t kParallelElems = 16384;  // below this many elements an elementwise op stays on one thread

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, what);
}

void require_f32(const TensorView& t, const char* op, const char* field) {
  if (t.dtype != DType::kF32)
    throw Error(ErrorCode::kUnsupported, std::string(op) + ": " + field + " is " + std::string(dtype_name(t.dtype)) +
                                             "; the cpu backend computes with float32 activations");
}

const KernelTable* table_for(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case CpuIsa::kScalar:
      return &cpu::scalar_kernels();
    case CpuIsa::kAvx2:
      return f.avx2 && f.fma && f.f16c ? cpu::avx2_kernels() : nullptr;
    case CpuIsa::kAvx512:
      return f.avx512f && f.avx512bw && f.avx2 && f.fma && f.f16c ? cpu::avx512_kernels() : nullptr;
    case CpuIsa::kAvx512Vnni:
      return f.avx512_vnni && cpu::avx512vnni_i8matmul() ? table_for(CpuIsa::kAvx512) : nullptr;
    case CpuIsa::kAuto:
      for (CpuIsa c : {CpuIsa::kAvx512Vnni, CpuIsa::kAvx512, CpuIsa::kAvx2})
        if (const KernelTable* t = table_for(c)) return t;
      return &cpu::scalar_kernels();
  }
  return nullptr;
}

// A float vector of any float dtype as f32 (weights of norms, biases: small, converted per call).
std::vector<float> to_f32_vector(const KernelTable& k, const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  k.to_f32(t.dtype, t.data, v.data(), t.numel());
  return v;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int num_threads, const KernelTable& kernels, const cpu::GgmlKernelTable& ggml, cpu::Int8MatmulFn i8 = nullptr,
             cpu::W4A8Kernel w4 = {}, cpu::GgmlPackedMatmulFn packed = nullptr, cpu::Int8PackedFn i8_packed = nullptr)
      : k_(kernels), g_(ggml), i8_(i8 ? i8 : kernels.i8matmul), i8p_(i8_packed), w4_(w4.fn ? w4 : kernels.w4a8), gp_(packed),
        pool_(num_threads) {
    scratch_.resize(static_cast<size_t>(pool_.num_threads()));
    const char* v = std::getenv("PEREGRINE_CPU_INT8_ACT");
    int8_act_ = gp_ && !(v && std::string(v) == "0");
  }

  std::string name() const override {
    return std::string("cpu (") + k_.name + (i8_ != k_.i8matmul ? " vnni" : "") +
           (std::string(g_.name) == k_.name ? "" : std::string(", ggml ") + g_.name) + ", " +
           std::to_string(pool_.num_threads()) + " threads)";
  }
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  bool is_host() const override { return true; }
  bool supports_activation(DType act) const override { return act == DType::kF32; }

  // Large buffers are 2 MiB aligned and asked for transparent huge pages (fewer TLB misses when streaming).
  void* allocate(size_t bytes) override {
    if (bytes < kHugePageBytes) return host_allocate(bytes);
    void* p = huge_page_alloc(bytes);
    if (!p) throw Error(ErrorCode::kResourceExhausted, "cpu: allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void deallocate(void* p) override { std::free(p); }
  void copy_from_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_on_device(void* d, const void* s, size_t n) override { std::memmove(d, s, n); }
  void fill_zero(void* d, size_t n) override { std::memset(d, 0, n); }
  void synchronize() override {}
  size_t free_memory() const override { return host_available_memory(); }

  bool supports_sampling() const override { return true; }
  void sample(const SampleParams& p) override { host_sample(p); }

  void embedding(const EmbeddingParams& p) override {
    check_embedding(p);
    require_f32(p.out, "embedding", "out");
    if (p.table_ggml != GgmlType::kNone) return ggml_embedding(p);
    const int64_t tokens = p.token_ids.dim(0), vocab = p.table.dim(0), hidden = p.table.dim(1);
    const int32_t* ids = p.token_ids.as<const int32_t>();
    for (int64_t t = 0; t < tokens; ++t)
      if (ids[t] < 0 || ids[t] >= vocab)
        fail("embedding: token id " + std::to_string(ids[t]) + " out of range [0, " + std::to_string(vocab) + ")");
    const size_t row_bytes = dtype_bytes(p.table.dtype, static_cast<size_t>(hidden));
    float* out = p.out.as<float>();
    parallel_rows(tokens, hidden, [&](int64_t t) {
      k_.to_f32(p.table.dtype, static_cast<const char*>(p.table.data) + ids[t] * row_bytes, out + t * hidden, hidden);
    });
  }

  void matmul(const MatmulParams& p) override {
    check_matmul(p);
    if (p.quant.ggml_blocks()) return ggml_matmul(p);
    if (p.quant.quantized()) {
      if (is_w8a8_int8_packed(p)) {
        require_f32(p.x, "matmul", "x");
        require_f32(p.out, "matmul", "out");
        return w8a8_packed_matmul(p, k_, i8p_, pool_);
      }
      if (p.quant.packed) return ggml_matmul(lowp_params(gather_perm(p)));
      require_f32(p.x, "matmul", "x");
      require_f32(p.out, "matmul", "out");
      if (is_w8_matmul(p)) return w8_matmul(p, k_, i8_, w4_, pool_);
      return quant_matmul(p);
    }
    require_f32(p.x, "matmul", "x");
    require_f32(p.out, "matmul", "out");
    cpu::MatmulArgs a;
    a.x = p.x.as<const float>();
    a.w = p.w.data;
    a.w_dtype = p.w.dtype;
    a.out = p.out.as<float>();
    a.m = p.x.dim(0);
    a.k = p.x.dim(1);
    a.n = p.w.dim(0);
    std::vector<float> bias;
    if (!p.bias.empty()) {
      bias = to_f32_vector(k_, p.bias);
      a.bias = bias.data();
    }
    if (a.m == 0 || a.n == 0) return;
    // Split over N in whole cache lines of output (and so over independent weight rows); over M only when N is
    // too narrow to feed every thread. Never over K: see the determinism note in cpu_kernels.h.
    const int threads = pool_.num_threads();
    constexpr int64_t kGrainN = 16;
    if (a.m == 1 || a.n >= threads * 4 * kGrainN) {
      pool_.parallel_for(
          a.n, [&](int64_t n0, int64_t n1) { k_.matmul(a, 0, a.m, n0, n1); }, kGrainN);
    } else {
      pool_.parallel_for(a.m, [&](int64_t m0, int64_t m1) { k_.matmul(a, m0, m1, 0, a.n); });
    }
  }

  // GGUF blocks (llama.cpp's Q4_0 ... Q6_K): each gathered row dequantized from its blocks straight into out.
  void ggml_embedding(const EmbeddingParams& p) {
    const int64_t tokens = p.token_ids.dim(0), vocab = p.table.dim(0), hidden = p.hidden();
    const int32_t* ids = p.token_ids.as<const int32_t>();
    for (int64_t t = 0; t < tokens; ++t)
      if (ids[t] < 0 || ids[t] >= vocab)
        fail("embedding: token id " + std::to_string(ids[t]) + " out of range [0, " + std::to_string(vocab) + ")");
    const auto* table = static_cast<const uint8_t*>(p.table.data);
    const int64_t row_bytes = p.table.dim(1);
    float* out = p.out.as<float>();
    parallel_rows(tokens, hidden, [&](int64_t t) {
      ggml_dequantize_row(p.table_ggml, table + ids[t] * row_bytes, out + t * hidden, hidden);
    });
  }

  // GGUF blocks on kernels that have a packed layout (every block type on AVX-512 VNNI and AVX2): 16 rows interleaved
  // (ggml_packed.h), repacked once; memory stays the file's size (Q4_K / Q5_K: + 2.8 % / 2.3 %).
  // PEREGRINE_GGML_PACK=0 keeps the file's blocks and the plain kernels (comparisons only), as on CUDA.
  // int8 W8A8 per channel on AVX-512 VNNI: rows in groups of 16 "lanes as outputs" (cpu_kernels.h Int8PackedFn),
  // replacing the codes (the same size); PEREGRINE_I8_PACK=0 keeps the plain codes and kernel (comparisons only).
  DeviceBuffer pack_weight(const TensorView& w, const WeightQuant& q) override {
    static const bool i8_pack_off = [] {
      const char* v = std::getenv("PEREGRINE_I8_PACK");
      return v && std::string(v) == "0";
    }();
    if (q.quantized() && i8p_ && !i8_pack_off && w8a8_int8_packable(w, q)) return pack_w8a8_int8(*this, w, q, pool_);
    if (q.quantized()) return pack_lowp(w, q);
    static const bool off = [] {
      const char* v = std::getenv("PEREGRINE_GGML_PACK");
      return v && std::string(v) == "0";
    }();
    if (off || !gp_ || !q.ggml_blocks() || !cpu::ggml_packable(q.ggml) || w.ndim != 2 || w.dtype != DType::kU8) return {};
    const GgmlBlockInfo b = *ggml_block_info(q.ggml);
    const int64_t n = w.dim(0), row_bytes = w.dim(1), k = row_bytes / b.type_size * b.block_size;
    if (n == 0 || k == 0 || static_cast<int64_t>(ggml_row_bytes(q.ggml, k)) != row_bytes || k % b.block_size) return {};
    DeviceBuffer buf(*this, cpu::ggml_packed_bytes(q.ggml, n, k));
    const int64_t groups = (n + cpu::kGgmlPackRows - 1) / cpu::kGgmlPackRows;
    pool_.parallel_for(groups, [&](int64_t g0, int64_t g1) {
      cpu::ggml_pack_groups(q.ggml, static_cast<const uint8_t*>(w.data), row_bytes, n, k,
                            static_cast<uint8_t*>(buf.data()), g0, g1);
    });
    return buf;
  }

  // GGUF blocks (not W4A16 / W8A16 codes, whose packed copy starts with a header): groups of 16 rows.
  PackedRowGroup packed_row_group(const TensorView& w, const WeightQuant& q) const override {
    if (q.quantized() || !gp_ || !q.ggml_blocks() || !cpu::ggml_packable(q.ggml) || w.ndim != 2) return {};
    const GgmlBlockInfo b = *ggml_block_info(q.ggml);
    const int64_t k = w.dim(1) / b.type_size * b.block_size;
    return {cpu::kGgmlPackRows, static_cast<size_t>(cpu::ggml_packed_group_bytes(q.ggml, k))};
  }

  // W4A16 / W8A16 as GGUF blocks in the packed layout, behind a header naming the block type (quant_lowp.h); an
  // empty buffer where the weight keeps the float path.
  DeviceBuffer pack_lowp(const TensorView& w, const WeightQuant& q) {
    if (!int8_act_) return {};
    const GgmlType t = cpu::lowp_block_type(w, q);
    if (t == GgmlType::kNone || !cpu::ggml_packable(t)) return {};
    const int64_t n = w.dim(0), k = w.dim(1);
    const size_t row_bytes = ggml_row_bytes(t, k);
    std::vector<uint8_t> blocks(row_bytes * static_cast<size_t>(n));
    pool_.parallel_for(n, [&](int64_t r0, int64_t r1) {
      cpu::lowp_rows_to_ggml(t, w, q, r0, r1, blocks.data() + static_cast<size_t>(r0) * row_bytes);
    });
    DeviceBuffer buf(*this, cpu::kLowpHeaderBytes + cpu::ggml_packed_bytes(t, n, k));
    auto* base = static_cast<uint8_t*>(buf.data());
    std::memset(base, 0, cpu::kLowpHeaderBytes);
    const cpu::LowpHeader h{cpu::kLowpMagic, t};
    std::memcpy(base, &h, sizeof h);
    const int64_t groups = (n + cpu::kGgmlPackRows - 1) / cpu::kGgmlPackRows;
    pool_.parallel_for(groups, [&](int64_t g0, int64_t g1) {
      cpu::ggml_pack_groups(t, blocks.data(), static_cast<int64_t>(row_bytes), n, k, base + cpu::kLowpHeaderBytes, g0,
                            g1);
    });
    return buf;
  }

  // An act-order matmul on the packed path reads x gathered into code-column order (xperm_[m, c] = x[m, perm[c]]);
  // other params come back as they are.
  MatmulParams gather_perm(const MatmulParams& p) {
    if (p.quant.perm.empty()) return p;
    require_f32(p.x, "matmul", "x");
    const int64_t m = p.x.dim(0), k = p.x.dim(1);
    const int32_t* perm = p.quant.perm.as<const int32_t>();
    for (int64_t c = 0; c < k; ++c)
      if (perm[c] < 0 || perm[c] >= k) fail("matmul: quant.perm holds " + std::to_string(perm[c]) + ", outside [0, K)");
    xperm_.resize(static_cast<size_t>(m * k));
    const float* x = p.x.as<const float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c) xperm_[static_cast<size_t>(i * k + c)] = x[i * k + perm[c]];
    MatmulParams r = p;
    r.x = TensorView(xperm_.data(), DType::kF32, {m, k});
    r.quant.perm = {};
    return r;
  }

  // A W4A16 / W8A16 matmul whose weight pack_lowp packed, as the GGUF matmul it became.
  MatmulParams lowp_params(const MatmulParams& p) const {
    cpu::LowpHeader h;
    std::memcpy(&h, p.quant.packed, sizeof h);
    if (h.magic != cpu::kLowpMagic || !cpu::ggml_packable(h.type) || !gp_)
      fail("matmul: quant.packed of a quantized weight is not this backend's packed copy");
    MatmulParams r = p;
    r.quant = WeightQuant{};
    r.quant.ggml = h.type;
    r.quant.packed = static_cast<const uint8_t*>(p.quant.packed) + cpu::kLowpHeaderBytes;
    r.w = TensorView(p.w.data, DType::kU8,
                     {p.w.dim(0), static_cast<int64_t>(ggml_row_bytes(h.type, p.x.dim(1)))});
    return r;
  }

  // GGUF block weights: each row of x quantized once to int8 blocks (as llama.cpp's CPU matmuls do), then the
  // integer block kernels (ggml_kernels.h) stream the weight blocks, decoded in registers, split over N.
  void ggml_matmul(const MatmulParams& p) {
    require_f32(p.x, "matmul", "x");
    require_f32(p.out, "matmul", "out");
    const int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0);
    if (m == 0 || n == 0) return;
    std::vector<float> bias;
    if (!p.bias.empty()) bias = to_f32_vector(k_, p.bias);
    const GgmlType type = p.quant.ggml;
    const int64_t qk = cpu::ggml_x_block(type);
    if (p.quant.packed) return ggml_packed_matmul(p, bias);
    const int64_t q_stride = cpu::ggml_x_q_stride(type, k);
    const int64_t pairs = cpu::ggml_x_pairs(type, k);
    gx_q_.resize(static_cast<size_t>(m * q_stride));
    gx_d_.resize(static_cast<size_t>(m * k / qk));
    gx_s_.resize(static_cast<size_t>(m * k / 16));
    gx_off_.resize(static_cast<size_t>(m * pairs * 8));
    gx_pf_.resize(static_cast<size_t>(m * pairs * 16));
    const cpu::GgmlQuantizedX gx{gx_q_.data(), q_stride, gx_d_.data(), gx_s_.data(), gx_off_.data(), gx_pf_.data()};
    const float* x = p.x.as<const float>();
    auto quantize = [&](int64_t r0, int64_t r1) {
      const cpu::GgmlQuantizedX at{gx.q + r0 * q_stride, q_stride, gx.d + r0 * (k / qk), gx.sums + r0 * (k / 16),
                                   gx.pair_off + r0 * pairs * 8, gx.pair_f + r0 * pairs * 16};
      g_.quantize_x(x + r0 * k, r1 - r0, k, type, at);
    };
    if (m * k >= kParallelElems && m > 1) pool_.parallel_for(m, quantize);
    else quantize(0, m);
    cpu::GgmlMatmulArgs a;
    a.type = p.quant.ggml;
    a.w = static_cast<const uint8_t*>(p.w.data);
    a.row_bytes = p.w.dim(1);
    a.x = gx;
    a.bias = bias.empty() ? nullptr : bias.data();
    a.out = p.out.as<float>();
    a.m = m;
    a.k = k;
    a.n = n;
    const int threads = pool_.num_threads();
    constexpr int64_t kGrainN = 16;
    if (m == 1 || n >= threads * 4 * kGrainN) {
      pool_.parallel_for(n, [&](int64_t n0, int64_t n1) { g_.matmul(a, 0, m, n0, n1); }, kGrainN);
    } else {
      pool_.parallel_for(m, [&](int64_t m0, int64_t m1) { g_.matmul(a, m0, m1, 0, n); });
    }
  }

  // Several matmuls of one x on packed blocks whose x is quantized alike (q/k/v, gate/up; one type, or types of one
  // x block size: a Q4_K_M file's Q4_K q/k with a Q6_K v): x quantized once and every matmul's groups in one
  // parallel region (one wake-up of the threads instead of one per matmul); each output is computed exactly as
  // matmul() computes it.
  void matmuls(std::span<const MatmulParams> ps) override {
    if (std::any_of(ps.begin(), ps.end(), [](const MatmulParams& p) { return p.quant.quantized() && p.quant.packed; })) {
      if (std::any_of(ps.begin(), ps.end(),
                      [](const MatmulParams& p) { return !p.quant.perm.empty() || is_w8a8_int8_packed(p); })) {
        for (const MatmulParams& p : ps) matmul(p);  // each its own gathered x
        return;
      }
      std::vector<MatmulParams> blocks(ps.begin(), ps.end());
      for (MatmulParams& p : blocks)
        if (p.quant.quantized() && p.quant.packed) {
          check_matmul(p);
          p = lowp_params(p);
        }
      return matmuls(blocks);
    }
    bool fused = ps.size() > 1;
    for (const MatmulParams& p : ps)
      fused = fused && p.quant.packed && p.quant.ggml_blocks() &&
              cpu::ggml_x_block(p.quant.ggml) == cpu::ggml_x_block(ps[0].quant.ggml) && p.x.data == ps[0].x.data &&
              p.x.ndim == 2 && ps[0].x.ndim == 2 && p.x.dim(0) == ps[0].x.dim(0) && p.x.dim(1) == ps[0].x.dim(1) &&
              p.x.dtype == ps[0].x.dtype;
    if (!fused || ps[0].x.dim(0) != 1) {
      for (const MatmulParams& p : ps) matmul(p);
      return;
    }
    std::vector<std::vector<float>> biases(ps.size());
    std::vector<cpu::GgmlPackedArgs> args(ps.size());
    std::vector<int64_t> first(ps.size() + 1, 0);  // the matmuls' groups laid end to end
    for (size_t i = 0; i < ps.size(); ++i) {
      check_matmul(ps[i]);
      if (!ps[i].bias.empty()) biases[i] = to_f32_vector(k_, ps[i].bias);
      args[i] = ggml_packed_args(ps[i], biases[i], i == 0);
      first[i + 1] = first[i] + (args[i].n + cpu::kGgmlPackRows - 1) / cpu::kGgmlPackRows;
    }
    pool_.dynamic_for(first.back(), kGemvChunk, [&](int64_t g0, int64_t g1) {
      for (size_t i = 0; i < ps.size(); ++i) {
        const int64_t b = std::max(g0, first[i]), e = std::min(g1, first[i + 1]);
        if (b < e) gp_(args[i], 0, 1, b - first[i], e - first[i]);
      }
    });
  }

  // M = 1 packed matmuls split over groups of 16 rows in chunks of the GEMV's four streams, taken by the threads as
  // they come free (ThreadPool::dynamic_for).
  static constexpr int64_t kGemvChunk = 4;

  // The packed layout (pack_weight): x quantized in the plain layout (when `quantize`; else the previous call's
  // codes are reused, for the same x), the kernel's arguments.
  cpu::GgmlPackedArgs ggml_packed_args(const MatmulParams& p, const std::vector<float>& bias, bool quantize) {
    const GgmlType type = p.quant.ggml;
    if (!gp_ || !cpu::ggml_packable(type))
      fail("matmul: quant.packed is set but this backend has no packed kernels for " + ggml_type_name(type));
    require_f32(p.x, "matmul", "x");
    require_f32(p.out, "matmul", "out");
    const int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0);
    if (quantize) quantize_plain(p.x.as<const float>(), m, k, type);
    cpu::GgmlPackedArgs a;
    a.type = type;
    a.w = static_cast<const uint8_t*>(p.quant.packed);
    a.group_bytes = cpu::ggml_packed_group_bytes(type, k);
    a.xq = gx_q_.data();
    a.xd = gx_d_.data();
    a.xs = gx_s_.data();
    a.bias = bias.empty() ? nullptr : bias.data();
    a.out = p.out.as<float>();
    a.m = m;
    a.k = k;
    a.n = n;
    return a;
  }

  void quantize_plain(const float* x, int64_t m, int64_t k, GgmlType type) {
    const int64_t qk = cpu::ggml_x_block(type);
    gx_q_.resize(static_cast<size_t>(m * k));
    gx_d_.resize(static_cast<size_t>(m * k / qk));
    gx_s_.resize(static_cast<size_t>(m * k / 16));
    auto quantize = [&](int64_t r0, int64_t r1) {
      const cpu::GgmlQuantizedX at{gx_q_.data() + r0 * k, k, gx_d_.data() + r0 * (k / qk), gx_s_.data() + r0 * (k / 16),
                                   nullptr, nullptr};
      g_.quantize_x(x + r0 * k, r1 - r0, k, type, at);
    };
    if (m * k >= kParallelElems && m > 1) pool_.parallel_for(m, quantize);
    else quantize(0, m);
  }

  // One matmul on packed blocks: groups of 16 rows split over the threads (over M when there are too few groups
  // to feed them; rows are the same either way).
  void ggml_packed_matmul(const MatmulParams& p, const std::vector<float>& bias) {
    const cpu::GgmlPackedArgs a = ggml_packed_args(p, bias, true);
    const int64_t m = a.m, n = a.n;
    const int64_t groups = (n + cpu::kGgmlPackRows - 1) / cpu::kGgmlPackRows;
    const int threads = pool_.num_threads();
    if (m == 1 || groups >= threads * 4) {
      if (m == 1) pool_.dynamic_for(groups, kGemvChunk, [&](int64_t g0, int64_t g1) { gp_(a, 0, 1, g0, g1); });
      else pool_.parallel_for(groups, [&](int64_t g0, int64_t g1) { gp_(a, 0, m, g0, g1); });
    } else {
      pool_.parallel_for(m, [&](int64_t m0, int64_t m1) { gp_(a, m0, m1, 0, groups); });
    }
  }

  // W4A16 / W8A16: x is prepared once per row (act-order permutation, the int4 even/odd lane layout, group
  // sums), then the kernel streams the codes (quant_matmul_impl.h). Shapes the kernels do not tile (a group not
  // a multiple of the vector, irregular g_idx) take a plain per-row dequantization with the same row rule.
  void quant_matmul(const MatmulParams& p) {
    require_f32(p.x, "matmul", "x");
    require_f32(p.out, "matmul", "out");
    const WeightQuant& q = p.quant;
    const DType c = p.w.dtype;
    if (c != DType::kI4 && c != DType::kU8)
      throw Error(ErrorCode::kUnsupported, std::string("cpu backend: matmul with ") + std::string(dtype_name(c)) +
                                               " weight codes is not implemented (int4 and uint8 codes are)");
    const int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0), groups = q.scales.dim(1), gs = q.group_size;
    if (m == 0 || n == 0) return;
    std::vector<float> scales_f32, bias;
    const float* scales = q.scales.dtype == DType::kF32 ? q.scales.as<const float>() : nullptr;
    if (!scales) {
      scales_f32 = to_f32_vector(k_, q.scales);
      scales = scales_f32.data();
    }
    if (!p.bias.empty()) bias = to_f32_vector(k_, p.bias);
    const float* zeros = q.zeros.empty() ? nullptr : q.zeros.as<const float>();
    const int32_t* perm = q.perm.empty() ? nullptr : q.perm.as<const int32_t>();
    if (perm)
      for (int64_t j = 0; j < k; ++j)
        if (perm[j] < 0 || perm[j] >= k) fail("matmul: quant.perm[" + std::to_string(j) + "] is outside [0, K)");
    const float* x = p.x.as<const float>();
    float* out = p.out.as<float>();
    const int64_t lanes = k_.lanes, step = c == DType::kI4 ? 2 * lanes : lanes;
    const bool tiled = q.g_idx.empty() && q.block_rows == 1 && gs % step == 0 && groups * gs == k;
    const int threads = pool_.num_threads();
    if (!tiled) {
      // Generic: each weight row dequantized to f32, then one sequential dot per row of x.
      const int32_t* g_idx = q.g_idx.empty() ? nullptr : q.g_idx.as<const int32_t>();
      const auto* codes = static_cast<const uint8_t*>(p.w.data);
      if (g_idx)
        for (int64_t kk = 0; kk < k; ++kk)
          if (g_idx[kk] < 0 || g_idx[kk] >= groups)
            fail("matmul: quant.g_idx[" + std::to_string(kk) + "] is outside [0, " + std::to_string(groups) + ")");
      pool_.parallel_for(n, [&](int64_t n0, int64_t n1) {
        std::vector<float> row(static_cast<size_t>(k));
        for (int64_t j = n0; j < n1; ++j) {
          for (int64_t kk = 0; kk < k; ++kk) {
            const int64_t i = j * k + kk;
            const float code = c == DType::kU8 ? codes[i] : ((i % 2 == 0) ? (codes[i / 2] & 0xf) : (codes[i / 2] >> 4));
            const int64_t g = g_idx ? g_idx[kk] : kk / gs;
            const float z = zeros ? zeros[j * groups + g] : (c == DType::kI4 ? 8.0f : 128.0f);
            row[static_cast<size_t>(kk)] = (code - z) * scales[(j / q.block_rows) * groups + g];
          }
          for (int64_t r = 0; r < m; ++r) {
            float acc = 0;
            for (int64_t kk = 0; kk < k; ++kk) acc += x[r * k + (perm ? perm[kk] : kk)] * row[static_cast<size_t>(kk)];
            out[r * n + j] = bias.empty() ? acc : acc + bias[static_cast<size_t>(j)];
          }
        }
      });
      return;
    }
    // Prepared rows and their group sums.
    qx_.resize(static_cast<size_t>(m * k));
    qsum_.resize(static_cast<size_t>(m * groups * lanes));
    auto prepare = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k;
        float* xp = qx_.data() + r * k;
        if (c == DType::kI4) {
          for (int64_t b = 0; b < k; b += step)
            for (int64_t l = 0; l < lanes; ++l) {
              const int64_t even = b + 2 * l, odd = even + 1;
              xp[b + l] = xr[perm ? perm[even] : even];
              xp[b + lanes + l] = xr[perm ? perm[odd] : odd];
            }
        } else {
          for (int64_t kk = 0; kk < k; ++kk) xp[kk] = xr[perm ? perm[kk] : kk];
        }
        float* xs = qsum_.data() + r * groups * lanes;
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t l = 0; l < lanes; ++l) {
            float s = 0;
            for (int64_t b = g * gs; b < (g + 1) * gs; b += step) {
              s += xp[b + l];
              if (c == DType::kI4) s += xp[b + lanes + l];
            }
            xs[g * lanes + l] = s;
          }
      }
    };
    if (m * k >= kParallelElems) pool_.parallel_for(m, prepare);
    else prepare(0, m);
    cpu::QuantMatmulArgs a;
    a.x = qx_.data();
    a.xsum = qsum_.data();
    a.codes = static_cast<const uint8_t*>(p.w.data);
    a.codes_dtype = c;
    a.scales = scales;
    a.zeros = zeros;
    a.bias = bias.empty() ? nullptr : bias.data();
    a.out = out;
    a.m = m;
    a.k = k;
    a.n = n;
    a.groups = groups;
    a.group_size = gs;
    constexpr int64_t kGrainN = 16;
    if (m == 1 || n >= threads * 4 * kGrainN) {
      pool_.parallel_for(n, [&](int64_t n0, int64_t n1) { k_.qmatmul(a, 0, m, n0, n1); }, kGrainN);
    } else {
      pool_.parallel_for(m, [&](int64_t m0, int64_t m1) { k_.qmatmul(a, m0, m1, 0, n); });
    }
  }

  void rms_norm(const RmsNormParams& p) override {
    check_rms_norm(p);
    require_f32(p.x, "rms_norm", "x");
    require_f32(p.out, "rms_norm", "out");
    if (!p.residual.empty()) require_f32(p.residual, "rms_norm", "residual");
    const int64_t rows = p.x.dim(0), h = p.x.dim(1);
    std::vector<float> weight = to_f32_vector(k_, p.weight);
    const float* x = p.x.as<const float>();
    float* residual = p.residual.empty() ? nullptr : p.residual.as<float>();
    float* out = p.out.as<float>();
    parallel_rows(rows, h, [&](int64_t r) {
      k_.rms_norm_row(x + r * h, residual ? residual + r * h : nullptr, weight.data(), out + r * h, h, p.eps);
    });
  }

  void rope(const RopeParams& p) override {
    check_rope(p);
    require_f32(p.q, "rope", "q");
    require_f32(p.k, "rope", "k");
    const int64_t tokens = p.positions.dim(0), hd = p.q.dim(2), half = p.rotary_dim / 2;
    const int64_t hq = p.q.dim(1), hkv = p.k.dim(1);
    const int32_t* positions = p.positions.as<const int32_t>();
    const float* inv_freq = p.inv_freq.as<const float>();
    pool_.parallel_for(
        tokens,
        [&](int64_t t0, int64_t t1) {
          std::vector<float> cs(static_cast<size_t>(2 * half));
          for (int64_t t = t0; t < t1; ++t) {
            const float pos = static_cast<float>(positions[t]);
            for (int64_t i = 0; i < half; ++i) {
              const double angle = pos * inv_freq[i];  // the f32 product, as Hugging Face computes it
              cs[i] = static_cast<float>(std::cos(angle) * p.attention_scaling);
              cs[half + i] = static_cast<float>(std::sin(angle) * p.attention_scaling);
            }
            k_.rope_token(p.q.as<float>() + t * hq * hd, hq, hd, cs.data(), cs.data() + half, half);
            k_.rope_token(p.k.as<float>() + t * hkv * hd, hkv, hd, cs.data(), cs.data() + half, half);
          }
        },
        std::max<int64_t>(1, 64 / std::max<int64_t>(1, hq)));
  }

  void silu_mul(const SiluMulParams& p) override {
    check_silu_mul(p);
    require_f32(p.gate, "silu_mul", "gate");
    require_f32(p.up, "silu_mul", "up");
    require_f32(p.out, "silu_mul", "out");
    const int64_t n = p.gate.numel();
    const float* g = p.gate.as<const float>();
    const float* u = p.up.as<const float>();
    float* out = p.out.as<float>();
    if (n < kParallelElems) return k_.silu_mul(g, u, out, n);
    pool_.parallel_for(
        n, [&](int64_t i0, int64_t i1) { k_.silu_mul(g + i0, u + i0, out + i0, i1 - i0); }, 1024);
  }

  void kv_write(const KvWriteParams& p) override {
    check_kv_write(p);
    require_f32(p.k, "kv_write", "k");
    require_f32(p.v, "kv_write", "v");
    const int64_t tokens = p.k.dim(0), row = p.k.dim(1) * p.k.dim(2);
    const int64_t slots = p.k_cache.dim(0) * p.k_cache.dim(1);
    const int32_t* slot = p.slot_mapping.as<const int32_t>();
    for (int64_t t = 0; t < tokens; ++t)
      if (slot[t] >= slots) fail("kv_write: slot " + std::to_string(slot[t]) + " out of range");
    if (kv_cache_quantized(p.k_cache.dtype)) return kv_write_quantized(p);
    if (!is_float_dtype(p.k_cache.dtype)) fail("kv_write: the KV cache must be float32, bfloat16 or float16");
    const size_t row_bytes = dtype_bytes(p.k_cache.dtype, static_cast<size_t>(row));
    parallel_rows(tokens, 2 * row, [&](int64_t t) {
      if (slot[t] < 0) return;
      k_.from_f32(p.k_cache.dtype, p.k.as<const float>() + t * row,
                  static_cast<char*>(p.k_cache.data) + slot[t] * row_bytes, row);
      k_.from_f32(p.v_cache.dtype, p.v.as<const float>() + t * row,
                  static_cast<char*>(p.v_cache.data) + slot[t] * row_bytes, row);
    });
  }

  void attention(const AttentionParams& p) override;

  // int8 / fp8 KV: each (token, head) vector quantized with its own scale (ops.h KvWriteParams).
  void kv_write_quantized(const KvWriteParams& p) {
    const int64_t heads = p.k.dim(1), hd = p.k.dim(2), row = heads * hd;
    const int32_t* slot = p.slot_mapping.as<const int32_t>();
    const bool i8 = p.k_cache.dtype == DType::kI8;
    parallel_rows(p.k.dim(0), 2 * row, [&](int64_t t) {
      if (slot[t] < 0) return;
      for (int which = 0; which < 2; ++which) {
        const float* src = (which ? p.v : p.k).as<const float>() + t * row;
        auto* codes = static_cast<uint8_t*>((which ? p.v_cache : p.k_cache).data) + slot[t] * row;
        float* scales = (which ? p.v_scales : p.k_scales).as<float>() + slot[t] * heads;
        for (int64_t h = 0; h < heads; ++h)
          scales[h] = i8 ? quantize_act_int8(src + h * hd, hd, reinterpret_cast<int8_t*>(codes + h * hd))
                         : quantize_act_fp8(src + h * hd, hd, codes + h * hd);
      }
    });
  }

  void gather_rows(const GatherRowsParams& p) override {
    check_gather_rows(p);
    const int64_t rows = p.indices.dim(0);
    const size_t row_bytes = dtype_bytes(p.x.dtype, static_cast<size_t>(p.x.dim(1)));
    const int32_t* idx = p.indices.as<const int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
      if (idx[r] < 0 || idx[r] >= p.x.dim(0)) fail("gather_rows: index " + std::to_string(idx[r]) + " out of range");
      std::memcpy(static_cast<char*>(p.out.data) + r * row_bytes,
                  static_cast<const char*>(p.x.data) + idx[r] * row_bytes, row_bytes);
    }
  }

 private:
  // fn(row) for every row in [0, rows), on several threads when the op is big enough to pay for it.
  template <class Fn>
  void parallel_rows(int64_t rows, int64_t elems_per_row, const Fn& fn) {
    auto run = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) fn(r);
    };
    if (rows * elems_per_row < kParallelElems || rows == 1) return run(0, rows);
    pool_.parallel_for(rows, run, std::max<int64_t>(1, kParallelElems / 4 / std::max<int64_t>(1, elems_per_row)));
  }

  void validate_attention(const AttentionParams& p) const;

  const KernelTable& k_;
  const cpu::GgmlKernelTable& g_;
  cpu::Int8MatmulFn i8_;
  cpu::Int8PackedFn i8p_;  // int8 W8A8 on packed weights (null: never packed)
  cpu::W4A8Kernel w4_;
  cpu::GgmlPackedMatmulFn gp_;  // the packed GGUF kernels (ggml_packed.h), null where the ISA has none
  bool int8_act_ = false;       // W4A16 / W8A16 packed as GGUF blocks (quant_lowp.h; PEREGRINE_CPU_INT8_ACT=0: off)
  ThreadPool pool_;
  std::vector<std::vector<float>> scratch_;  // per thread, attention accumulators
  std::vector<float> qx_, qsum_;             // quantized matmul: prepared rows of x and their group sums
  std::vector<float> xperm_;                 // W4A16 on packed blocks with act-order: x in code-column order
  std::vector<int8_t> gx_q_;                 // ggml matmul: x as int8 blocks, their scales, their 16-sums
  std::vector<float> gx_d_;
  std::vector<int16_t> gx_s_;
  std::vector<int32_t> gx_off_;
  std::vector<float> gx_pf_;
  std::vector<float> partials_;              // attention: per-segment softmax states of split items
  std::vector<int32_t> tails_;               // attention: token-tree rows' paths (sequence slots)
};

void CpuBackend::validate_attention(const AttentionParams& p) const {
  require_f32(p.q, "attention", "q");
  require_f32(p.out, "attention", "out");
  if (!(is_float_dtype(p.k_cache.dtype) || kv_cache_quantized(p.k_cache.dtype)) || p.v_cache.dtype != p.k_cache.dtype ||
      p.v_cache.numel() != p.k_cache.numel())
    fail("attention: k_cache and v_cache must share one dtype (float, int8 or fp8) and shape");
  const int64_t num_seqs = p.seq_lens.dim(0), tokens = p.q.dim(0);
  const int64_t num_blocks = p.k_cache.dim(0), block_size = p.k_cache.dim(1), max_blocks = p.block_tables.dim(1);
  const int32_t* qsl = p.query_start_loc.as<const int32_t>();
  const int32_t* lens = p.seq_lens.as<const int32_t>();
  const int32_t* tables = p.block_tables.as<const int32_t>();
  const int32_t* table_index = p.block_table_index.empty() ? nullptr : p.block_table_index.as<const int32_t>();
  if (qsl[0] != 0 || qsl[num_seqs] > tokens) fail("attention: query_start_loc must start at 0 and end within q");
  check_attention_indices(p);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = qsl[s + 1] - qsl[s];
    const std::string where = "attention: sequence " + std::to_string(s);
    if (q_len < 0) fail(where + ": query_start_loc decreases");
    if (lens[s] < q_len) fail(where + ": seq_len " + std::to_string(lens[s]) + " is shorter than its query rows");
    const int64_t used = (lens[s] + block_size - 1) / block_size;
    if (used > max_blocks) fail(where + ": seq_len needs more blocks than block_tables has columns");
    if (q_len == 0) continue;
    const int64_t row = table_index ? table_index[s] : s;
    const int64_t first_pos = p.sliding_window > 0 ? std::max<int64_t>(0, lens[s] - q_len - p.sliding_window + 1) : 0;
    auto check_block = [&](int64_t b) {
      if (tables[row * max_blocks + b] < 0 || tables[row * max_blocks + b] >= num_blocks)
        fail(where + ": block table entry " + std::to_string(b) + " is out of range");
    };
    for (int64_t b = first_pos / block_size; b < used; ++b) check_block(b);
    if (!p.key_tail_from.empty() && p.key_tail_from.as<const int32_t>()[s] < lens[s]) {
      const int32_t from = p.key_tail_from.as<const int32_t>()[s];
      const int32_t* tail = p.key_tail.as<const int32_t>() + p.key_tail_offset.as<const int32_t>()[s];
      for (int32_t j = 0; j < lens[s] - from; ++j) check_block(tail[j] / block_size);
    }
  }
}

void CpuBackend::attention(const AttentionParams& p) {
  check_attention(p);
  validate_attention(p);
  cpu::AttentionArgs a;
  a.q = p.q.as<const float>();
  a.k_cache = p.k_cache.data;
  a.v_cache = p.v_cache.data;
  a.cache_dtype = p.k_cache.dtype;
  if (kv_cache_quantized(a.cache_dtype)) {
    a.k_scales = p.k_scales.as<const float>();
    a.v_scales = p.v_scales.as<const float>();
  }
  a.out = p.out.as<float>();
  a.query_start_loc = p.query_start_loc.as<const int32_t>();
  a.seq_lens = p.seq_lens.as<const int32_t>();
  a.block_tables = p.block_tables.as<const int32_t>();
  a.table_index = p.block_table_index.empty() ? nullptr : p.block_table_index.as<const int32_t>();
  a.hq = p.q.dim(1);
  a.hkv = p.k_cache.dim(2);
  a.hd = p.q.dim(2);
  a.block_size = p.k_cache.dim(1);
  a.max_blocks = p.block_tables.dim(1);
  a.scale = p.scale;
  a.sliding_window = p.sliding_window;

  // Items: (sequence, a chunk of query rows, all its key segments), every head at once so that each K/V block is
  // read once and contiguously. When that leaves threads idle (few sequences, long contexts: decode), an item
  // is split into one item per key segment whose partial states are merged afterwards. Neither the chunking nor
  // the split changes a bit of any row (see attention_impl.h).
  const int64_t num_seqs = p.seq_lens.dim(0);
  const int64_t rows_per_item = std::max<int64_t>(1, 256 / a.hq);
  const int64_t seg_keys = cpu::attention_segment_keys(a.block_size);
  std::vector<cpu::AttentionItem> items;
  check_tree_parents(p);
  const int32_t* parents = p.tree_parents.empty() ? nullptr : p.tree_parents.as<const int32_t>();
  if (parents) {
    // Token trees: one item per row, each with its path's slots (root first).
    size_t total = 0;
    std::vector<int32_t> depth(static_cast<size_t>(p.q.dim(0)), 0);
    for (int64_t s = 0; s < num_seqs; ++s)
      for (int32_t i = a.query_start_loc[s]; i < a.query_start_loc[s + 1]; ++i) {
        const int32_t par = parents[i];
        depth[static_cast<size_t>(i)] = par < 0 ? 0 : depth[static_cast<size_t>(a.query_start_loc[s] + par)] + 1;
        total += static_cast<size_t>(depth[static_cast<size_t>(i)]) + 1;
      }
    tails_.assign(total, 0);
    size_t at = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int32_t q0 = a.query_start_loc[s], q_len = a.query_start_loc[s + 1] - q0;
      const int32_t ctx = a.seq_lens[s] - q_len;
      const int32_t segs = static_cast<int32_t>((a.seq_lens[s] + seg_keys - 1) / seg_keys);
      for (int32_t i = 0; i < q_len; ++i) {
        const int32_t len = depth[static_cast<size_t>(q0 + i)] + 1;
        int32_t r = i;
        for (int32_t d = len - 1; d >= 0; --d, r = parents[q0 + r]) tails_[at + static_cast<size_t>(d)] = ctx + r;
        cpu::AttentionItem it{static_cast<int32_t>(s), i, i + 1, 0, segs};
        it.tail = tails_.data() + at;
        it.tail_from = ctx;
        it.tail_len = len;
        items.push_back(it);
        at += static_cast<size_t>(len);
      }
    }
  } else {
    const int32_t* tail_from = p.key_tail_from.empty() ? nullptr : p.key_tail_from.as<const int32_t>();
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t q_len = a.query_start_loc[s + 1] - a.query_start_loc[s];
      const int32_t segs = static_cast<int32_t>((a.seq_lens[s] + seg_keys - 1) / seg_keys);
      if (tail_from && tail_from[s] < a.seq_lens[s]) {
        // Remapped keys (one query row, checked): a tree row's item, its path as the tail.
        cpu::AttentionItem it{static_cast<int32_t>(s), 0, 1, 0, segs};
        it.tail = p.key_tail.as<const int32_t>() + p.key_tail_offset.as<const int32_t>()[s];
        it.tail_from = tail_from[s];
        it.tail_len = a.seq_lens[s] - tail_from[s];
        items.push_back(it);
        continue;
      }
      for (int64_t r = 0; r < q_len; r += rows_per_item)
        items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(r),
                         static_cast<int32_t>(std::min(q_len, r + rows_per_item)), 0, segs});
    }
  }
  auto cost = [&](const cpu::AttentionItem& x) {
    return static_cast<int64_t>(x.row_end - x.row_begin) *
           std::min<int64_t>(a.seq_lens[x.seq], (x.seg_end - x.seg_begin) * seg_keys);
  };
  const int threads = pool_.num_threads();
  std::vector<cpu::AttentionItem> merges;  // split items, each merged from its segments' partial states
  std::vector<int64_t> partial_offsets;    // per item: where its partial state goes, or -1
  int64_t partial_floats = 0;
  if (threads > 1 && static_cast<int64_t>(items.size()) < 2 * threads) {
    std::vector<cpu::AttentionItem> split;
    for (const cpu::AttentionItem& it : items) {
      const int64_t state = cpu::attention_state_floats(a, it.row_end - it.row_begin);
      if (it.seg_end - it.seg_begin < 2) {
        split.push_back(it);
        partial_offsets.push_back(-1);
        continue;
      }
      merges.push_back(it);
      for (int32_t g = it.seg_begin; g < it.seg_end; ++g) {
        cpu::AttentionItem part = it;
        part.seg_begin = g;
        part.seg_end = g + 1;
        split.push_back(part);
        partial_offsets.push_back(partial_floats);
        partial_floats += state;
      }
    }
    items.swap(split);
  } else {
    partial_offsets.assign(items.size(), -1);
  }
  // Longest items first, pulled dynamically by the threads.
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return cost(items[x]) > cost(items[y]); });

  const size_t scratch_floats = static_cast<size_t>(cpu::attention_scratch_floats(a, rows_per_item));
  for (auto& s : scratch_)
    if (s.size() < scratch_floats) s.resize(scratch_floats);
  if (partials_.size() < static_cast<size_t>(partial_floats)) partials_.resize(static_cast<size_t>(partial_floats));
  std::atomic<size_t> next{0};
  auto work = [&](int thread) {
    float* scratch = scratch_[static_cast<size_t>(thread)].data();
    for (size_t i = next.fetch_add(1); i < items.size(); i = next.fetch_add(1)) {
      const size_t item = order[i];
      const int64_t off = partial_offsets[item];
      k_.attention(a, items[item], scratch, off < 0 ? nullptr : partials_.data() + off);
    }
  };
  if (items.size() <= 1) {
    work(0);
  } else {
    pool_.run_on_all(work);
  }
  // Merge split items: their segments' partials were laid out one after another, in item order.
  int64_t off = 0;
  for (const cpu::AttentionItem& m : merges) {
    k_.attention_merge(a, m, partials_.data() + off, scratch_[0].data());
    off += (m.seg_end - m.seg_begin) * cpu::attention_state_floats(a, m.row_end - m.row_begin);
  }
}

}  // namespace

bool cpu_isa_available(CpuIsa isa) {
  return table_for(isa) != nullptr;
}

std::unique_ptr<Backend> make_cpu_backend(int num_threads, CpuIsa isa) {
  const KernelTable* table = table_for(isa);
  if (!table)
    throw Error(ErrorCode::kUnsupported, "cpu backend: the requested kernel set is not available on this CPU (" +
                                             cpu_features().describe() + ")");
  // The GGUF block kernels of the same ISA level; AVX-512 ones need VNNI (and VL), else the AVX2 ones serve.
  const cpu::GgmlKernelTable* ggml = &cpu::ggml_scalar_kernels();
  if (table == cpu::avx512_kernels() && cpu_features().avx512_vnni && __builtin_cpu_supports("avx512vl"))
    ggml = cpu::ggml_vnni_kernels();
  else if (table == cpu::avx512_kernels() || table == cpu::avx2_kernels())
    ggml = cpu::ggml_avx2_kernels();
  const bool vnni = (isa == CpuIsa::kAuto || isa == CpuIsa::kAvx512Vnni) && table_for(CpuIsa::kAvx512Vnni) == table;
  return std::make_unique<CpuBackend>(num_threads, *table, *ggml, vnni ? cpu::avx512vnni_i8matmul() : nullptr,
                                      vnni ? cpu::avx512vnni_w4a8() : cpu::W4A8Kernel{},
                                      ggml == cpu::ggml_vnni_kernels()   ? cpu::ggml_vnni_packed_matmul()
                                      : ggml == cpu::ggml_avx2_kernels() ? cpu::ggml_avx2_packed_matmul()
                                                                         : nullptr,
                                      vnni ? cpu::avx512vnni_i8packed() : nullptr);
}

}  // namespace peregrine::ops
