// CudaBackendImpl: the op interface on one GPU. All work goes on one non-blocking stream; ops validate with
// op_checks, then launch the kernels of this directory; invalid device-side inputs (token ids, slots) are
// flagged in a device word that synchronize()/copy_to_host() turn into Error(kInvalidArgument).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_sampling.h"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/ggml_matmul.cuh"
#include "backend/cuda/quant_matmul.cuh"
#include "backend/cuda/w4_gemm.cuh"
#include "backend/cuda/skinny_gemm.cuh"
#include "backend/cuda/fp8_gemm_lt.h"
#include "backend/cuda/w4a8_matmul.cuh"
#include "backend/cuda/w8_matmul.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/kv_cache.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/rope.cuh"
#include "core/status.h"
#include "ops/op_checks.h"

namespace peregrine::ops {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
constexpr int kScratchSlots = 9;
constexpr int kStackedOutSlot = 8;  // dense matmuls over adjacent weights at large M: the stacked output
constexpr int kGemmScratchSlot = 7;
constexpr int kQuantWSlot = 6;  // quantized matmul at large M: the dequantized weight
constexpr int kW4A8CSlot = 3;   // W4A8 at large M: the f32 GEMM output before the scales
constexpr int kW4A8ASlot = 4;   // W4A8 at large M: the int8 activations widened to the activation dtype
constexpr int kQuantXSlot = 5;  // quantized matmul with act-order: the permuted activations  // split-K partials beyond kGemmWorkspaceBytes (large M)

std::string describe_device_errors(int flags) {
  std::string msg = "cuda: invalid input found on the device:";
  if (flags & cuda::kErrEmbeddingTokenId) msg += " embedding token id out of range;";
  if (flags & cuda::kErrKvSlot) msg += " kv_write slot out of range;";
  if (flags & cuda::kErrGatherIndex) msg += " gather_rows index out of range;";
  if (flags & cuda::kErrSampleToken) msg += " sampling penalty token id or token-mask index out of range;";
  return msg;
}

static_assert(cuda::kSkinnyMaxM == kSkinnyMatmulMaxM, "skinny_gemm.cuh and cuda_backend.h must agree");

// vLLM's switch for batch-invariant kernels: VLLM_BATCH_INVARIANT=1 keeps every dense matmul on the split-K
// policy, whose rows never depend on M.
// Whether the environment switch `name` is set to "0" (the comparison switches: PEREGRINE_GGML_PACK=0, ...).
bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string_view(v) == "0";
}

// The integer the environment switch `name` holds, if it is set (the comparison switches).
std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<int>(std::atoi(v)) : std::nullopt;
}

bool batch_invariant_requested() {
  const char* v = std::getenv("VLLM_BATCH_INVARIANT");
  return v && std::string_view(v) != "0" && *v != '\0';
}

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(int device) : device_(device) {
    PEREGRINE_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    PEREGRINE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = std::string("cuda (") + prop.name + ")";
    sm_count_ = prop.multiProcessorCount;
    try {
      PEREGRINE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      PEREGRINE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      PEREGRINE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&error_word_), sizeof(int)));
      PEREGRINE_CUDA_CHECK(cudaMemset(error_word_, 0, sizeof(int)));
      PEREGRINE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&w4_flags_), static_cast<size_t>(sm_count_) * sizeof(int)));
      PEREGRINE_CUDA_CHECK(cudaMemset(w4_flags_, 0, static_cast<size_t>(sm_count_) * sizeof(int)));
      PEREGRINE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&error_host_), sizeof(int)));
      *error_host_ = 0;
      PEREGRINE_CUDA_CHECK(cudaMalloc(&gemm_workspace_, kGemmWorkspaceBytes));
      gemm_ = std::make_unique<cuda::LtMatmul>(sm_count_, kGemmWorkspaceBytes);
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaBackendImpl() override { release(); }

  std::string name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  bool is_host() const override { return false; }
  bool supports_activation(DType act) const override { return is_float_dtype(act); }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      throw Error(err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                  "cuda: cannot allocate " + std::to_string(bytes) + " bytes (" + std::to_string(free_bytes) +
                      " free): " + cudaGetErrorString(err));
    }
    return ptr;
  }
  void deallocate(void* ptr) override {
    if (ptr) PEREGRINE_CUDA_CHECK(cudaFree(ptr));
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    if (capturing_) throw Error(ErrorCode::kInvalidArgument, "cuda: copy_from_host inside a graph capture; use "
                                                              "copy_from_host_async from pinned memory");
    PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    // Pageable sources are staged before the call returns; pinned ones are read later, so wait for them.
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost) {
      PEREGRINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    (void)cudaGetLastError();
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    sync_and_check();
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes) PEREGRINE_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
  }
  void synchronize() override { sync_and_check(); }
  size_t free_memory() const override {
    size_t free_bytes = 0, total = 0;
    device_memory(&free_bytes, &total);
    return free_bytes;
  }
  bool device_memory(size_t* free_bytes, size_t* total_bytes) const override {
    PEREGRINE_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return true;
  }

  void embedding(const EmbeddingParams& p) override {
    check_embedding(p);
    if (p.table_ggml == GgmlType::kF32 || p.table_ggml == GgmlType::kF16 || p.table_ggml == GgmlType::kBF16) {
      // Plain floats in a byte view: the ordinary gather with the table's element dtype.
      const DType t = p.table_ggml == GgmlType::kF32 ? DType::kF32 : p.table_ggml == GgmlType::kF16 ? DType::kF16 : DType::kBF16;
      cuda::EmbeddingLaunch l{p.token_ids.as<const int32_t>(), p.table.data, p.out.data, t, p.out.dtype,
                              p.token_ids.dim(0), p.table.dim(0), p.hidden(), error_word_};
      return cuda::launch_embedding(l, stream_);
    }
    if (p.table_ggml != GgmlType::kNone) {
      cuda::GgmlEmbeddingLaunch l{p.token_ids.as<const int32_t>(), static_cast<const uint8_t*>(p.table.data),
                                  p.table_ggml, p.table.dim(1), p.out.data, p.out.dtype, p.token_ids.dim(0),
                                  p.table.dim(0), p.hidden(), error_word_};
      return cuda::launch_ggml_embedding(l, stream_);
    }
    cuda::EmbeddingLaunch l{p.token_ids.as<const int32_t>(), p.table.data, p.out.data, p.table.dtype, p.out.dtype,
                            p.token_ids.dim(0), p.table.dim(0), p.table.dim(1), error_word_};
    cuda::launch_embedding(l, stream_);
  }

  // GGUF Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K / Q6_K blocks regrouped for the int8 tensor-core kernel (ggml_matmul.cuh's
  // packed layout, the file's size); every ggml path then reads the packed copy. PEREGRINE_GGML_PACK=0 keeps the file's layout
  // and the GEMV (comparisons only).
  DeviceBuffer pack_weight(const TensorView& w, const WeightQuant& q) override {
    static const bool off = env_off("PEREGRINE_GGML_PACK");
    if (off || !q.ggml_blocks() || w.ndim != 2 || w.dtype != DType::kU8) return {};
    const std::optional<GgmlBlockInfo> b = ggml_block_info(q.ggml);
    if (!b || b->type_size == 0) return {};
    const int64_t n = w.dim(0), row_bytes = w.dim(1), k = row_bytes / b->type_size * b->block_size;
    if (n == 0 || !cuda::ggml_packable(q.ggml, k) || static_cast<int64_t>(ggml_row_bytes(q.ggml, k)) != row_bytes)
      return {};
    DeviceBuffer buf(*this, w.bytes());
    cuda::launch_ggml_pack(static_cast<const uint8_t*>(w.data), q.ggml, n, k, static_cast<uint8_t*>(buf.data()), stream_);
    sync_and_check();  // the caller may free w next
    return buf;
  }
  bool packed_replaces_weight() const override { return true; }

  // What kQuantXSlot holds: x's codes and scales for a W8A8 matmul (w8_matmul, prequant_key).
  struct XqKey {
    const void* x = nullptr;
    DType dtype = DType::kF32;
    int64_t m = 0, k = 0;
    int act = 0;
    int64_t act_group = 0;
    bool operator==(const XqKey&) const = default;
  };
  // What a producer op made for the matmul call after it (prequant_key) lasts until that call returns.
  struct PrequantScope {
    CudaBackendImpl* b;
    ~PrequantScope() { b->end_prequant(); }
  };
  void end_prequant() {
    if (prequant_) prequant_ = false, xq_key_ = {};
  }

  void matmul(const MatmulParams& p) override {
    PrequantScope scope{this};
    matmul_one(p);
  }
  void matmul_one(const MatmulParams& p) {
    check_matmul(p);
    // An op told of W8A8 or GGUF matmuls next (prequant_key) left x unwritten: only such a matmul may read it.
    PEREGRINE_CHECK(!prequant_ || p.x.data != xq_key_.x ||
                        (xq_key_.act == cuda::kActQuantGgml ? p.quant.ggml_blocks() && p.quant.packed != nullptr
                                                            : is_w8a8(p)),
                    "cuda backend: a matmul over the output of an op told of other matmuls next");
    last_matmul_skinny_ = false;
    if (p.quant.ggml_blocks()) return ggml_matmul(p);
    if (p.quant.quantized()) return quant_matmul(p);
    cuda::GemmLaunch l{p.x.data, p.w.data, p.bias.empty() ? nullptr : p.bias.data, p.out.data,
                       p.x.dtype, p.w.dtype, p.bias.dtype, p.out.dtype, p.x.dim(0), p.w.dim(0), p.x.dim(1)};
    dense_matmul(l);
  }

  // q/k/v and gate/up: one skinny launch when every matmul takes it, else one matmul each, with 8-bit activations
  // (W8A8) quantized once for the group rather than once a matmul: x is the same tensor for all of them, and
  // w8_matmul keeps the key of what kQuantXSlot holds while the group runs (PEREGRINE_W8_GROUP_X=0: once a matmul).
  void matmuls(std::span<const MatmulParams> ps) override {
    PrequantScope scope{this};
    if (grouped_skinny(ps)) return;
    if (adjacent_dense(ps)) return;
    struct Group {
      CudaBackendImpl* b;
      ~Group() { b->grouping_ = false, b->xq_key_ = {}; }
    } group{this};
    static const bool group_x = !env_off("PEREGRINE_W8_GROUP_X");
    grouping_ = group_x && ps.size() > 1 && std::none_of(ps.begin(), ps.end(), [&](const MatmulParams& p) {
      return p.out.data == ps.front().x.data;  // a matmul that overwrites x ends what x's codes hold
    });
    if (!prequant_) xq_key_ = {};
    for (const MatmulParams& p : ps) matmul_one(p);
  }

  // Dense matmuls over one x whose weights lie one after another in memory (the loader's adjacent q/k/v,
  // adjacent_weights_wanted) past the skinny kernel's M: one cuBLASLt GEMM over the stacked weight into a scratch
  // [M, sum N], then each output's columns copied out (2-D copies). k and v alone are small GEMMs (N 1,024: 16 CTAs
  // at M = 256, so split-K and a reduce each) and q a third launch; at batch 256 the three took 55 us a layer under
  // ncu (H100, 2026-12-07). Every M past the skinny kernel's takes it, so rows still agree for every M there.
  // PEREGRINE_ADJACENT_QKV=1 until a GPU run has checked and measured it.
  bool adjacent_weights_wanted() const override { return adjacent_.on(); }
  void set_adjacent_matmuls(int mode) override { adjacent_.set(mode); }
  bool adjacent_dense(std::span<const MatmulParams> ps) {
    if (!adjacent_.on() || !skinny_ || ps.size() < 2) return false;  // small M on the skinny kernel: unfused
    const MatmulParams& first = ps.front();
    if (first.x.ndim != 2 || first.x.dim(0) <= cuda::kSkinnyMaxM) return false;
    const int64_t m = first.x.dim(0), k = first.x.dim(1);
    int64_t n_total = 0;
    const auto* next_w = static_cast<const std::byte*>(first.w.data);
    for (const MatmulParams& p : ps) {
      if (p.quant.quantized() || p.quant.ggml_blocks() || p.quant.act != ActQuant::kNone || !p.bias.empty() ||
          p.x.data != first.x.data || p.x.dtype != first.x.dtype || p.x.ndim != 2 || p.x.dim(0) != m ||
          p.w.dtype != first.x.dtype || p.w.ndim != 2 || p.w.dim(1) != k || p.w.data != next_w ||
          p.out.dtype != first.out.dtype || p.out.ndim != 2 || p.out.dim(0) != m || p.out.dim(1) != p.w.dim(0) ||
          p.out.data == first.x.data)
        return false;
      next_w += p.w.bytes();
      n_total += p.w.dim(0);
    }
    const size_t row_bytes = dtype_bytes(first.out.dtype, static_cast<size_t>(n_total));
    void* stacked = scratch(static_cast<size_t>(m) * row_bytes, kStackedOutSlot);
    dense_matmul(cuda::GemmLaunch{first.x.data, first.w.data, nullptr, stacked, first.x.dtype, first.w.dtype,
                                  first.x.dtype, first.out.dtype, m, n_total, k},
                 false);
    size_t col = 0;
    for (const MatmulParams& p : ps) {
      const size_t width = dtype_bytes(p.out.dtype, static_cast<size_t>(p.w.dim(0)));
      PEREGRINE_CUDA_CHECK(cudaMemcpy2DAsync(p.out.data, width, static_cast<const std::byte*>(stacked) + col, row_bytes,
                                             width, static_cast<size_t>(m), cudaMemcpyDeviceToDevice, stream_));
      col += width;
    }
    last_matmul_skinny_ = false;
    return true;
  }

  // The key of x's codes that the matmul or group `next` reads from kQuantXSlot, where a producer op (rms_norm,
  // silu_mul: ops.h RmsNormParams::next) can make them instead as it makes out: every matmul of next W8A8 per token
  // (int8 or FP8 codes with per-row scales, one activation type) over x = out [m, k], past the 8-bit skinny kernel's
  // M (which quantizes x itself), not FP8 in 128 x 128 blocks (its own scale layout). w8_matmul then finds them
  // (xq_key_, prequant_) and reads only them, so the producer leaves out unwritten. Or every matmul of next packed
  // GGUF blocks that ggml_skinny takes (M <= 32): x's int8 blocks (ggml_xq.cuh), act kActQuantGgml, which depend on x
  // alone. PEREGRINE_PREQUANT: 0 never, norm / silu only that producer (comparisons); unset, both.
  std::optional<XqKey> prequant_key(std::span<const MatmulParams> next, const TensorView& out, bool norm) const {
    static const std::string which = [] {
      const char* v = std::getenv("PEREGRINE_PREQUANT");
      return std::string(v ? v : "");
    }();
    if (which == "0" || (which == "norm" && !norm) || (which == "silu" && norm)) return std::nullopt;
    if (next.empty() || out.ndim != 2) return std::nullopt;
    const int64_t m = out.dim(0), k = out.dim(1);
    if (next.front().quant.ggml_blocks()) {  // GGUF blocks: x's int8 blocks, where ggml_skinny takes every matmul
      cuda::SkinnyGemmLaunch ls[cuda::kSkinnyMaxSegments];
      int launches = 0;
      const TensorView& x = next.front().x;
      if (x.data != out.data || x.dtype != out.dtype || x.ndim != 2 || x.dim(0) != m || x.dim(1) != k ||
          !ggml_skinny_plan(next, ls, launches))
        return std::nullopt;
      return ggml_xq_key(out);
    }
    if (m <= std::max(cuda::kSkinnyW8F8MaxM, cuda::kSkinnyW8I8MaxM) || k % 8 != 0) return std::nullopt;
    int act = 0;
    for (const MatmulParams& p : next) {
      const WeightQuant& q = p.quant;
      if (!is_w8a8(p) || is_fp8_blocks(p) || p.x.data != out.data || p.x.dtype != out.dtype || p.x.ndim != 2 ||
          p.x.dim(0) != m || p.x.dim(1) != k || !q.zeros.empty() || !q.perm.empty() || !q.g_idx.empty() ||
          q.scales.dtype != DType::kF32 || !(q.act_group == 0 || q.act_group == k) || (act != 0 && static_cast<int>(q.act) != act))
        return std::nullopt;
      act = static_cast<int>(q.act);
    }
    return XqKey{out.data, out.dtype, m, k, act, k};
  }
  // kQuantXSlot laid out for the codes of key: [m, k] codes, then a scale per (row, activation group).
  std::pair<uint8_t*, float*> xq_scratch(const XqKey& key) {
    const size_t codes = static_cast<size_t>(key.m * key.k + 15) / 16 * 16;
    auto* base = static_cast<uint8_t*>(scratch(codes + static_cast<size_t>(key.m * (key.k / key.act_group)) * 4, kQuantXSlot));
    return {base, reinterpret_cast<float*>(base + codes)};
  }

  // The skinny launch for x [m, k] with no segments yet (skinny_gemm.cuh).
  cuda::SkinnyGemmLaunch skinny_launch(const void* x, DType x_dtype, DType out_dtype, int64_t m, int64_t k) const {
    cuda::SkinnyGemmLaunch s{};
    s.x = x;
    s.dtype = x_dtype;
    s.out_dtype = out_dtype;
    s.m = m;
    s.k = k;
    s.sm_count = sm_count_;
    return s;
  }

  // Launches ps as one skinny kernel when all are dense, or all W4A16 / W8A16 of one code type without act-order,
  // over one x and the kernel takes them; false, having enqueued nothing, otherwise.
  bool grouped_skinny(std::span<const MatmulParams> ps) {
    if (ps.size() < 2 || ps.size() > static_cast<size_t>(cuda::kSkinnyMaxSegments) || !skinny_) return false;
    const MatmulParams& first = ps.front();
    if (first.quant.ggml_blocks()) {
      for (const MatmulParams& p : ps) check_matmul(p);
      return ggml_skinny(ps);
    }
    if (first.quant.act != ActQuant::kNone) {
      for (const MatmulParams& p : ps) check_matmul(p);
      return w8a8_skinny(ps);
    }
    for (const MatmulParams& p : ps) check_matmul(p);
    cuda::SkinnyGemmLaunch l;
    if (!skinny_segments(ps, l) || !cuda::skinny_gemm_supports(l)) return false;  // also M == 0 or M > 16
    cuda::launch_skinny_gemm(l, stream_);
    last_matmul_skinny_ = true;
    return true;
  }

  // The skinny launch of ps over one x (checked already): all dense, or all W4A16 / W8A16 of one code type
  // without act-order; false when they are not.
  bool skinny_segments(std::span<const MatmulParams> ps, cuda::SkinnyGemmLaunch& l) const {
    if (ps.empty() || ps.size() > static_cast<size_t>(cuda::kSkinnyMaxSegments) || !skinny_) return false;
    const MatmulParams& first = ps.front();
    if (first.quant.ggml_blocks() || first.quant.act != ActQuant::kNone) return false;
    l = skinny_launch(first.x.data, first.x.dtype, first.out.dtype, first.x.dim(0), first.x.dim(1));
    const bool quantized = first.quant.quantized();
    if (quantized) {
      l.codes = first.w.dtype;
      if ((l.codes != DType::kI4 && l.codes != DType::kU8) || !quant_skinny_enabled(l.codes)) return false;
    }
    for (const MatmulParams& p : ps) {
      if (p.quant.ggml_blocks() || p.quant.quantized() != quantized || p.x.data != first.x.data ||
          p.out.dtype != first.out.dtype || p.x.dim(0) != first.x.dim(0))
        return false;
      if (!quantized) {
        if (p.x.dtype != p.w.dtype) return false;
        l.seg[l.num_segments++] = {p.w.data, p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype, p.out.data,
                                   p.w.dim(0)};
        continue;
      }
      const WeightQuant& q = p.quant;
      if (p.w.dtype != l.codes || q.act != ActQuant::kNone || !q.g_idx.empty() || !q.perm.empty() ||
          q.scales.dtype != DType::kF32 || q.block_rows != 1 || (p.out.dtype != p.x.dtype && p.out.dtype != DType::kF32))
        return false;
      l.seg[l.num_segments++] = {p.w.data, p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype, p.out.data,
                                 p.w.dim(0), q.scales.as<const float>(),
                                 q.zeros.empty() ? nullptr : q.zeros.as<const float>(), q.scales.dim(1), q.group_size};
    }
    return true;
  }

  // Fused decode matmuls (ops.h MatmulFusion) on the skinny kernel: the norm made piece by piece as each block
  // reads x, the residual add and SiLU-mul in its epilogue, so a layer's decode runs without the norm, SiLU-mul and
  // residual launches. By default for dense weights only: on the H200 (8B shape, 2026-12-04, docs/BENCHMARKS.md)
  // it makes bf16 bs 1 faster, but W4A16 slower (each block normalises all of x's pieces for its 16 rows, which
  // costs more beside 4-bit codes' smaller loads). So codes take the epilogue fusions only (the residual add, and
  // SiLU-mul on gate/up whose x the norm kernel made): the model runs the norms on their own, the rest fused.
  // PEREGRINE_FUSE=1 fuses the norm into codes too, PEREGRINE_FUSE=0 nothing, PEREGRINE_FUSE_EPILOGUE=0 keeps
  // codes' epilogues apart (comparisons). The fusion covers every M <= 16 or none, never a boundary by M inside the
  // skinny range (the full fusion's rows would differ between a request alone and in a batch; the epilogue fusions
  // give the unfused bits). fuses_matmuls says no where it is off, so the model runs the ops one by one.
  enum class FusionMode { kNone, kDense, kAll };
  static FusionMode fusion_mode() {
    static const FusionMode mode = [] {
      if (env_off("PEREGRINE_FUSE")) return FusionMode::kNone;
      const char* v = std::getenv("PEREGRINE_FUSE");
      return v && std::string_view(v) == "1" ? FusionMode::kAll : FusionMode::kDense;
    }();
    return mode;
  }
  // W8A8 per channel takes the 8-bit skinny kernel's fusions (bit for bit the unfused ops), the rest the skinny
  // kernel's.
  bool fused_launch(std::span<const MatmulParams> ps, const MatmulFusion& f, cuda::SkinnyGemmLaunch& l) const {
    const bool w8a8 = is_w8a8(ps.front());
    if (w8a8 ? !w8a8_launch(ps, l) : !skinny_segments(ps, l)) return false;
    if (!f.norm_weight.empty()) {
      if (f.norm_weight.dtype != l.dtype) return false;
      l.norm_w = f.norm_weight.data;
      l.norm_eps = f.eps;
    }
    if (!f.residual.empty()) l.residual = f.residual.data;
    l.silu_pair = f.silu_mul;
    return w8a8 ? cuda::skinny_w8a8_takes(l) : cuda::skinny_gemm_fuses(l);
  }
  bool fuses_matmuls(std::span<const MatmulParams> ps, const MatmulFusion& f) const override {
    const FusionMode mode = fusion_mode();
    cuda::SkinnyGemmLaunch l;
    if (mode == FusionMode::kNone || !fused_launch(ps, f, l)) return false;
    static const bool epilogues = !env_off("PEREGRINE_FUSE_EPILOGUE");
    return mode == FusionMode::kAll || (l.codes != DType::kI4 && l.codes != DType::kU8) ||
           (epilogues && f.norm_weight.empty());
  }
  void matmuls_fused(std::span<const MatmulParams> ps, const MatmulFusion& f) override {
    PrequantScope scope{this};
    // The fused kernels read x itself, which an op told of plain matmuls next (prequant_key) left unwritten.
    PEREGRINE_CHECK(!prequant_ || ps.empty() || ps.front().x.data != xq_key_.x,
                    "cuda backend: a fused matmul over the output of an op told of plain matmuls next");
    check_matmul_fusion(ps, f);
    cuda::SkinnyGemmLaunch l;
    if (!fused_launch(ps, f, l))
      throw Error(ErrorCode::kUnsupported, "cuda backend: these matmuls have no fused kernel (fuses_matmuls says which do)");
    if (is_w8a8(ps.front())) {
      if (!run_w8a8(l))
        throw Error(ErrorCode::kUnsupported, "cuda backend: the 8-bit skinny kernel refused a fused launch it offered");
      return;
    }
    cuda::launch_skinny_gemm(l, stream_);
    last_matmul_skinny_ = true;
  }

  // allow_skinny false: the large-M paths of quantized weights over a dequantized scratch stay on cuBLASLt, so
  // each quantized format keeps exactly two M ranges (its own kernel, then this).
  void dense_matmul(const cuda::GemmLaunch& l, bool allow_skinny = true) {
    if (l.m == 0 || l.n == 0) return;
    if (allow_skinny && skinny_ && l.x_dtype == l.w_dtype) {
      cuda::SkinnyGemmLaunch s = skinny_launch(l.x, l.x_dtype, l.out_dtype, l.m, l.k);
      s.num_segments = 1;
      s.seg[0] = {l.w, l.bias, l.bias_dtype, l.out, l.n};
      if (cuda::skinny_gemm_supports(s)) {
        cuda::launch_skinny_gemm(s, stream_);
        last_matmul_skinny_ = true;
        return;
      }
    }
    if (cuda::LtMatmul::supports(l) && run_lt_matmul(l)) {
      if (l.bias && !cuda::LtMatmul::fuses_bias(l)) {
        cuda::AddBiasLaunch b{l.out, l.bias, l.out_dtype, l.bias_dtype, l.m, l.n};
        cuda::launch_add_bias(b, stream_);
      }
    } else {
      cuda::launch_gemm_generic(l, stream_);
    }
  }

  // GGUF blocks (ggml_matmul.cuh): M <= kGgmlGemvMaxM reads every block once, dequantized in registers; larger M
  // dequantizes the weight into a dense scratch in x's dtype and runs the cuBLASLt GEMM.
  // NOTE determinism: rows agree bit for bit for every M within each path, not across the M = 8 / 9 boundary.
  void ggml_matmul(const MatmulParams& p) {
    if (p.out.dtype != p.x.dtype && p.out.dtype != DType::kF32)
      throw Error(ErrorCode::kUnsupported, "cuda backend: ggml matmul out dtype must be x's or f32");
    cuda::GgmlMatmulLaunch l{p.x.data, p.x.dtype, static_cast<const uint8_t*>(p.w.data), p.quant.ggml, p.w.dim(1),
                             p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype, p.out.data, p.out.dtype,
                             p.x.dim(0), p.w.dim(0), p.x.dim(1)};
    if (l.m == 0 || l.n == 0) return;
    if (p.quant.packed) {
      if (ggml_skinny(std::span<const MatmulParams>(&p, 1))) return;
      l.w = static_cast<const uint8_t*>(p.quant.packed);
      void* w = scratch(static_cast<size_t>(l.n * l.k) * dtype_bytes(p.x.dtype, 1), kQuantWSlot);
      cuda::launch_ggml_dequantize_packed(l, w, stream_);
      dense_matmul(cuda::GemmLaunch{p.x.data, w, l.bias, p.out.data, p.x.dtype, p.x.dtype, p.bias.dtype, p.out.dtype,
                                    l.m, l.n, l.k}, false);
      return;
    }
    if (l.m <= cuda::kGgmlGemvMaxM) return cuda::launch_ggml_gemv(l, stream_);
    void* w = scratch(static_cast<size_t>(l.n * l.k) * dtype_bytes(p.x.dtype, 1), kQuantWSlot);
    cuda::launch_ggml_dequantize(l, w, stream_);
    dense_matmul(cuda::GemmLaunch{p.x.data, w, l.bias, p.out.data, p.x.dtype, p.x.dtype, p.bias.dtype, p.out.dtype,
                                  l.m, l.n, l.k}, false);
  }

  // Packed GGUF blocks over one x at M <= kSkinnyGgmlMaxM: x quantized once (ggml_matmul.cuh), then one int8
  // tensor-core launch per block type among ps (a Q4_K_M layer's Q4_K q/k and Q6_K v: two). False, having enqueued
  // nothing, when the kernel does not take them all.
  // NOTE determinism: rows agree bit for bit for every M within this path and within the dequantize + GEMM path
  // above it, not across the M = 32 / 33 boundary.
  bool ggml_skinny(std::span<const MatmulParams> ps) {
    const MatmulParams& first = ps.front();
    const int64_t m = first.x.dim(0), k = first.x.dim(1);
    cuda::SkinnyGemmLaunch ls[cuda::kSkinnyMaxSegments];
    int launches = 0;
    // The op before made x's blocks (prequant_key; asking for the slot forgets its key: kept for the group's other
    // matmuls), or they are made here. An op told of other matmuls left x unwritten: refused, never read.
    const XqKey key = ggml_xq_key(first.x);
    const bool made = prequant_ && xq_key_ == key, told = prequant_ && xq_key_.x == first.x.data;
    const bool planned = ggml_skinny_plan(ps, ls, launches);
    PEREGRINE_CHECK(made == told && (planned || !told),
                    "cuda backend: GGUF matmuls over the output of an op told of other matmuls next");
    if (!planned) return false;
    const cuda::GgmlXq xq = ggml_xq_scratch(m, k);
    if (made) xq_key_ = key;
    else cuda::launch_ggml_quantize_x(first.x.data, first.x.dtype, m, k, xq, stream_);
    for (int i = 0; i < launches; ++i) {
      ls[i].xq = xq.q;
      ls[i].xd = xq.d;
      ls[i].xsum = xq.sum;
      ls[i].xsum16 = xq.sum16;
      cuda::launch_skinny_ggml(ls[i], stream_);
    }
    last_matmul_skinny_ = true;
    return true;
  }
  // The key of x [m, k]'s GGUF blocks in kQuantXSlot (they depend on x alone: 32-value blocks for every type).
  static XqKey ggml_xq_key(const TensorView& x) {
    return XqKey{x.data, x.dtype, x.dim(0), x.dim(1), cuda::kActQuantGgml, 32};
  }
  // kQuantXSlot laid out for x [m, k]'s GGUF blocks: codes, then a scale, a code sum per 32 values, sums per 16.
  cuda::GgmlXq ggml_xq_scratch(int64_t m, int64_t k) {
    const size_t q_bytes = static_cast<size_t>(m * k + 255) / 256 * 256;
    const size_t s_padded = (static_cast<size_t>(m * (k / 32)) * 4 + 255) / 256 * 256;
    const size_t h_bytes = static_cast<size_t>(m * (k / 16)) * 4;
    auto* base = static_cast<uint8_t*>(scratch(q_bytes + 2 * s_padded + h_bytes, kQuantXSlot));
    return cuda::GgmlXq{reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + q_bytes),
                        reinterpret_cast<int32_t*>(base + q_bytes + s_padded),
                        reinterpret_cast<int32_t*>(base + q_bytes + 2 * s_padded)};
  }
  // ggml_skinny's launches for ps (one per block type); false where the kernel does not take them all.
  bool ggml_skinny_plan(std::span<const MatmulParams> ps, cuda::SkinnyGemmLaunch (&ls)[cuda::kSkinnyMaxSegments],
                        int& launches) const {
    const MatmulParams& first = ps.front();
    const int64_t m = first.x.dim(0), k = first.x.dim(1);
    if ((reinterpret_cast<uintptr_t>(first.x.data) & 15u) != 0) return false;
    launches = 0;
    for (const MatmulParams& p : ps) {
      if (!p.quant.packed || p.x.data != first.x.data || p.x.dim(0) != m || p.out.dtype != first.out.dtype ||
          (p.out.dtype != p.x.dtype && p.out.dtype != DType::kF32))
        return false;
      int li = 0;
      while (li < launches && ls[li].ggml != p.quant.ggml) ++li;
      if (li == launches) {
        ls[launches] = skinny_launch(first.x.data, first.x.dtype, first.out.dtype, m, k);
        ls[launches++].ggml = p.quant.ggml;
      }
      cuda::SkinnyGemmLaunch& l = ls[li];
      if (l.num_segments == cuda::kSkinnyMaxSegments) return false;
      const int64_t n = p.w.dim(0);
      const auto* codes = static_cast<const uint8_t*>(p.quant.packed);
      l.seg[l.num_segments] = {codes, p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype, p.out.data, n};
      l.seg[l.num_segments++].meta = codes + cuda::ggml_packed_code_bytes(l.ggml, n, k);
    }
    // Nothing is enqueued unless the kernel takes every launch.
    for (int i = 0; i < launches; ++i)
      if (!cuda::skinny_ggml_takes(ls[i])) return false;
    return true;
  }

  // W4A16 / W8A16 (quant_matmul.cuh): M <= 16 reads the codes once with dequantization in registers (the skinny
  // tensor-core kernel for bf16/f16 activations, the GEMV for f32); W4A16 at 17 <= M <= 256 (128 off Hopper) with
  // bf16/f16 activations runs the fused tensor-core GEMM (w4_gemm, below); larger M (and shapes neither tiles)
  // dequantize into a dense scratch and run the cuBLASLt GEMM.
  // NOTE determinism: rows agree bit for bit for every M within each path, not across the M = 16 / 17 (and, for
  // W4A16, 64 / 65 and 256 / 257 on Hopper — w4_wgmma.cu's wide kernel between them — 128 / 129 elsewhere) boundary.
  void quant_matmul(const MatmulParams& p) {
    const WeightQuant& q = p.quant;
    const DType c = p.w.dtype;
    if (c == DType::kI4 && q.act == ActQuant::kInt8) return w4a8_matmul(p);
    if (c == DType::kI8 || c == DType::kF8E4M3 || q.act != ActQuant::kNone) return w8_matmul(p);
    if (c != DType::kI4 && c != DType::kU8)
      throw Error(ErrorCode::kUnsupported, std::string("cuda backend: matmul with ") + std::string(dtype_name(c)) +
                                               " weight codes is not implemented (int4 and uint8 codes are)");
    if (q.scales.dtype != DType::kF32 || q.block_rows != 1)
      throw Error(ErrorCode::kUnsupported, "cuda backend: quantized matmul needs f32 group scales with block_rows 1");
    if (p.out.dtype != p.x.dtype && p.out.dtype != DType::kF32)
      throw Error(ErrorCode::kUnsupported, "cuda backend: quantized matmul out dtype must be x's or f32");
    cuda::QuantMatmulLaunch l{p.x.data, p.x.dtype, static_cast<const uint8_t*>(p.w.data), c, q.scales.as<const float>(),
                              q.zeros.empty() ? nullptr : q.zeros.as<const float>(),
                              q.g_idx.empty() ? nullptr : q.g_idx.as<const int32_t>(),
                              q.perm.empty() ? nullptr : q.perm.as<const int32_t>(),
                              p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype, p.out.data, p.out.dtype,
                              p.x.dim(0), p.w.dim(0), p.x.dim(1), q.scales.dim(1), q.group_size};
    if (l.m == 0 || l.n == 0) return;
    const size_t elem = dtype_bytes(p.x.dtype, 1);
    if (quant_skinny(l)) return;
    if (cuda::quant_gemv_supports(l)) {
      void* xp = l.perm ? scratch(static_cast<size_t>(l.m * l.k) * elem, kQuantXSlot) : nullptr;
      cuda::launch_quant_gemv(l, xp, stream_);
      return;
    }
    if (w4_gemm(l)) return;
    if (l.k % 8 != 0) throw Error(ErrorCode::kUnsupported, "cuda backend: quantized matmul needs K % 8 == 0");
    void* w = scratch(static_cast<size_t>(l.n * l.k) * elem, kQuantWSlot);
    cuda::launch_dequantize(l, w, stream_);
    dense_matmul(cuda::GemmLaunch{p.x.data, w, l.bias, p.out.data, p.x.dtype, p.x.dtype, p.bias.dtype, p.out.dtype,
                                  l.m, l.n, l.k}, false);
  }

  // W4A16 at 16 < M up to the path's end (w4_gemm.cuh): int4 codes as stored, dequantized in registers into tensor-core
  // tiles, the K split by (N, K) alone. Contiguous groups that are multiples of 64 (per channel too), with or without
  // zeros, bf16/f16 x; act-order (perm / g_idx) and other groups stay on dequantize + cuBLASLt. On Hopper the
  // warpgroup-MMA kernel (w4_wgmma.cu) up to M = 256; elsewhere, or with PEREGRINE_W4_WGMMA=0 (comparisons), mma.sync's
  // w4_gemm up to M = 128. PEREGRINE_W4_MMA=0 keeps dequantize + cuBLASLt for every shape. False, having enqueued
  // nothing, when it does not take the shape.
  // The ends: with the whole batch decoding (H100, 8B shape, 1K context, 2026-12-07) the warpgroup kernel beat
  // dequantize + cuBLASLt at bs 256 (7,406 output tok/s against 6,539), w4_gemm lost to it at 192 and 256 (H200,
  // 2026-12-04: bs 256 34.7-35.1 ms/step against 40.2).
  static constexpr int64_t kW4GemmPathMaxM = 128, kW4WgmmaPathMaxM = 256;
  bool w4_gemm(const cuda::QuantMatmulLaunch& l) {
    static const bool off = env_off("PEREGRINE_W4_MMA");
    static const bool wgmma_off = env_off("PEREGRINE_W4_WGMMA");
    static const int64_t max_m_env = [] {  // PEREGRINE_W4_MMA_MAX_M: the path's largest M (tuning)
      const char* v = std::getenv("PEREGRINE_W4_MMA_MAX_M");
      return v ? std::atoll(v) : 0LL;
    }();
    if (off || l.codes_dtype != DType::kI4 || l.perm || l.g_idx || l.m <= cuda::kQuantGemvMaxM) return false;
    cuda::W4GemmLaunch w{l.x, l.x_dtype, l.codes, l.scales, l.zeros, l.bias, l.bias_dtype, l.out, l.out_dtype,
                         l.m, l.n, l.k, l.groups, l.group_size, sm_count_};
    if (!wgmma_off && cuda::w4_wgmma_supports(w)) {
      if (l.m > (max_m_env > 0 ? max_m_env : kW4WgmmaPathMaxM)) return false;
      if (l.m > 64) {  // the wide kernels' range: the stream-K one may take the shape
        w.workspace = static_cast<float*>(scratch(cuda::w4_wgmma_workspace_bytes(sm_count_), kQuantWSlot));
        w.flags = w4_flags_;
      }
      cuda::launch_w4_wgmma(w, stream_);
      return true;
    }
    if (l.m > (max_m_env > 0 ? max_m_env : kW4GemmPathMaxM) || !cuda::w4_gemm_supports(w)) return false;
    cuda::launch_w4_gemm(w, stream_);
    return true;
  }

  // PEREGRINE_QUANT_SKINNY=0 (comparisons only) keeps the GEMV for codes of this type: i4, u8 or 0 for both.
  static bool quant_skinny_enabled(DType codes) {
    static const std::string off = [] {
      const char* v = std::getenv("PEREGRINE_QUANT_SKINNY");
      return std::string(v && std::string(v) == "0" ? "all" : v ? v : "");
    }();
    return !(off == "all" || (off == "i4" && codes == DType::kI4) || (off == "u8" && codes == DType::kU8));
  }

  // W4A16 / W8A16 at M <= 16 with bf16/f16 activations: the skinny tensor-core kernel on the codes (an act-order
  // perm gathers x into a scratch first). False, having enqueued nothing, when it does not take the shape.
  bool quant_skinny(const cuda::QuantMatmulLaunch& l) {
    if (!quant_skinny_enabled(l.codes_dtype)) return false;
    if (l.m > cuda::kSkinnyMaxM || l.g_idx || (l.x_dtype != DType::kBF16 && l.x_dtype != DType::kF16)) return false;
    cuda::SkinnyGemmLaunch s{};
    s.x = l.x;
    s.dtype = l.x_dtype;
    s.codes = l.codes_dtype;
    s.out_dtype = l.out_dtype;
    s.m = l.m;
    s.k = l.k;
    s.num_segments = 1;
    s.seg[0] = {l.codes, l.bias, l.bias_dtype, l.out, l.n, l.scales, l.zeros, l.groups, l.group_size};
    s.sm_count = sm_count_;
    if (!cuda::skinny_gemm_supports(s)) return false;
    if (l.perm) {
      void* xp = scratch(static_cast<size_t>(l.m * l.k) * dtype_bytes(l.x_dtype, 1), kQuantXSlot);
      cuda::launch_permute_columns(l.x, l.x_dtype, l.perm, xp, l.m, l.k, stream_);
      s.x = xp;
    }
    cuda::launch_skinny_gemm(s, stream_);
    return true;
  }

  // W4A8 (w4a8_matmul.cuh): activations quantized once per matmul (the W8A8 quantizer); M <= 16 a warp per output
  // with the int4 codes widened in registers and dp4a; larger M widens x, dequantizes the codes into a scratch and
  // runs the cuBLASLt GEMM into f32, then applies the scales.
  // NOTE determinism: rows agree bit for bit for every M within each path, not across the M = 16 / 17 boundary.
  void w4a8_matmul(const MatmulParams& p) {
    const WeightQuant& q = p.quant;
    const int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0);
    if (!q.zeros.empty() || !q.perm.empty() || !q.g_idx.empty() || q.scales.dtype != DType::kF32 || q.block_rows != 1 ||
        !(q.act_group == 0 || q.act_group == k))
      throw Error(ErrorCode::kUnsupported, "cuda backend: W4A8 matmul needs symmetric int4 codes (no zeros / perm / "
                                           "g_idx), f32 group scales with block_rows 1 and activations per token");
    if (p.out.dtype != p.x.dtype && p.out.dtype != DType::kF32)
      throw Error(ErrorCode::kUnsupported, "cuda backend: W4A8 matmul out dtype must be x's or f32");
    const cuda::W4A8MatmulLaunch l{p.x.data, p.x.dtype, static_cast<const uint8_t*>(p.w.data), q.scales.as<const float>(),
                                   q.scales.dim(1), q.group_size, p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype,
                                   p.out.data, p.out.dtype, m, n, k};
    if (!cuda::w4a8_supports(l))
      throw Error(ErrorCode::kUnsupported, "cuda backend: W4A8 matmul needs K and the group size multiples of 32 (K " +
                                               std::to_string(k) + ", group " + std::to_string(q.group_size) + ")");
    if (m == 0 || n == 0) return;
    // x quantized per token (int8 codes, one scale per row) by the W8A8 quantizer; then the 32-column sums.
    const size_t codes = static_cast<size_t>(m * k + 255) / 256 * 256;
    const size_t scales = static_cast<size_t>(m * 4 + 255) / 256 * 256;
    auto* base = static_cast<uint8_t*>(scratch(codes + scales + static_cast<size_t>(m * (k / 32)) * 4, kQuantXSlot));
    auto* xq = reinterpret_cast<int8_t*>(base);
    auto* xs = reinterpret_cast<float*>(base + codes);
    auto* xsum = reinterpret_cast<int32_t*>(base + codes + scales);
    const cuda::W8MatmulLaunch aq{p.x.data, p.x.dtype, nullptr, DType::kI8, nullptr, 1, 1, k, 1, k, nullptr,
                                  DType::kF32, nullptr, DType::kF32, m, n, k};
    cuda::launch_act_quant(aq, base, xs, stream_);
    if (m <= cuda::kW4A8GemvMaxM && reinterpret_cast<uintptr_t>(l.codes) % 16 == 0) {
      cuda::launch_w4a8_chunk_sums(xq, xsum, m, k, stream_);
      cuda::launch_w4a8_gemv(l, xq, xs, xsum, stream_);
      return;
    }
    const size_t elem = dtype_bytes(p.x.dtype, 1);
    void* a = scratch(static_cast<size_t>(m * k) * elem, kW4A8ASlot);
    void* w = scratch(static_cast<size_t>(n * k) * elem, kQuantWSlot);
    auto* c32 = static_cast<float*>(scratch(static_cast<size_t>(m * n) * 4, kW4A8CSlot));
    const bool per_channel = l.groups == 1;
    cuda::launch_w4a8_widen(xq, a, p.x.dtype, m * k, stream_);
    cuda::launch_w4a8_dequantize(l, w, p.x.dtype, per_channel, stream_);
    dense_matmul(cuda::GemmLaunch{a, w, nullptr, c32, p.x.dtype, p.x.dtype, p.x.dtype, DType::kF32, m, n, k}, false);
    cuda::launch_w4a8_epilogue(l, c32, xs, per_channel ? l.scales : nullptr, stream_);
  }

  // W8A8 per channel (int8 or FP8 codes, one scale per row or per block_rows rows, x per token) or FP8 in 128 x 128
  // blocks (x per token and 128 k) over one x at small M: x quantized once (launch_act_quant, or by the kernel's
  // blocks themselves where skinny_w8a8_quantizes), then one 8-bit tensor-core launch (skinny_gemm.cuh) for all of
  // ps (q/k/v, gate/up). False, having enqueued nothing, when the kernel does not take them all.
  // NOTE determinism: int8 rows equal the warp kernel's bit for bit (and cuBLASLt's int8 path's), so int8 rows
  // agree for every M; FP8 rows agree within M <= 32 and within cuBLASLt's M > 32 (block FP8: the warp kernel's), not
  // across.
  static bool is_w8a8(const MatmulParams& p) {
    return (p.w.dtype == DType::kI8 && p.quant.act == ActQuant::kInt8) ||
           (p.w.dtype == DType::kF8E4M3 && p.quant.act == ActQuant::kFp8);
  }
  // The skinny W8A8 launch of ps over one x, x's codes not placed yet: the kernel's blocks quantize x themselves
  // where skinny_w8a8_quantizes (the quantizer's bits, one launch fewer; PEREGRINE_W8_QUANT_X=0 never, for
  // comparisons), else run_w8a8 quantizes it first. False when the skinny kernel is off or ps are not all W8A8 per
  // channel (or all block FP8) of one code type over one x.
  bool w8a8_launch(std::span<const MatmulParams> ps, cuda::SkinnyGemmLaunch& l) const {
    static const bool off = env_off("PEREGRINE_W8_SKINNY");
    static const bool quantize_in_kernel = !env_off("PEREGRINE_W8_QUANT_X");
    // PEREGRINE_W8_QUANT_X_MAX_K=N: only up to K = N in the blocks (comparisons; the bits are the same either way).
    static const int64_t quantize_max_k = [] {
      const char* v = std::getenv("PEREGRINE_W8_QUANT_X_MAX_K");
      return v ? static_cast<int64_t>(std::atoll(v)) : std::numeric_limits<int64_t>::max();
    }();
    const MatmulParams& first = ps.front();
    const int64_t m = first.x.dim(0), k = first.x.dim(1);
    if (off || !skinny_ || m == 0 || ps.size() > static_cast<size_t>(cuda::kSkinnyMaxSegments)) return false;
    l = skinny_launch(first.x.data, first.x.dtype, first.out.dtype, m, k);
    l.codes = first.w.dtype;
    // FP8 in 128 x 128 blocks (weight_block_size [128, 128], x per token and 128 k), or per channel (x per token).
    const bool blocks = is_fp8_blocks(first);
    for (const MatmulParams& p : ps) {
      const WeightQuant& q = p.quant;
      if (!is_w8a8(p) || p.w.dtype != l.codes || !q.zeros.empty() || !q.perm.empty() || !q.g_idx.empty() ||
          q.scales.dtype != DType::kF32 || q.scales.ndim != 2 || is_fp8_blocks(p) != blocks ||
          (!blocks && (q.scales.dim(1) != 1 || !(q.act_group == 0 || q.act_group == k))) || p.x.data != first.x.data ||
          p.x.dim(0) != m || p.out.dtype != first.out.dtype || (p.out.dtype != p.x.dtype && p.out.dtype != DType::kF32))
        return false;
      cuda::SkinnySegment& g = l.seg[l.num_segments++];
      g = {p.w.data, p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype, p.out.data, p.w.dim(0)};
      g.scales = q.scales.as<const float>();
      g.block_rows = q.block_rows;
      g.groups = q.scales.dim(1);
    }
    l.quantize_x = !blocks && quantize_in_kernel && k <= quantize_max_k && cuda::skinny_w8a8_quantizes(l);
    return true;
  }
  // FP8 W8A8 with 128 x 128 weight blocks and x quantized per token and 128 k, as the skinny kernel takes them.
  static bool is_fp8_blocks(const MatmulParams& p) {
    const WeightQuant& q = p.quant;
    const int64_t k = p.x.dim(1);
    return p.w.dtype == DType::kF8E4M3 && q.act == ActQuant::kFp8 && q.group_size == 128 && q.act_group == 128 &&
           q.block_rows == 128 && k % 128 == 0 && q.scales.ndim == 2 && q.scales.dim(1) == k / 128;
  }
  // x quantized into scratch (launch_act_quant) unless the kernel does it, then the launch; false, having enqueued
  // nothing, when the kernel does not take l.
  bool run_w8a8(cuda::SkinnyGemmLaunch& l) {
    if (!cuda::skinny_w8a8_takes(l)) return false;
    if (!l.quantize_x) {
      const int64_t m = l.m, k = l.k;
      const int64_t act_group = cuda::skinny_w8a8_blocks(l) ? 128 : k;  // 128 x 128 FP8 blocks: a scale per 128 k
      const size_t codes = static_cast<size_t>(m * k + 255) / 256 * 256;
      auto* base = static_cast<uint8_t*>(scratch(codes + static_cast<size_t>(m * (k / act_group)) * 4, kQuantXSlot));
      l.xq = reinterpret_cast<const int8_t*>(base);
      l.xs = reinterpret_cast<const float*>(base + codes);
      const cuda::W8MatmulLaunch aq{l.x,     l.dtype, nullptr, l.codes, nullptr, 1,     1,           act_group,
                                    l.codes == DType::kI8 ? 1 : 2, act_group, nullptr, DType::kF32, nullptr, DType::kF32, m, 1, k};
      cuda::launch_act_quant(aq, base, reinterpret_cast<float*>(base + codes), stream_);
    }
    cuda::launch_skinny_w8a8(l, stream_);
    last_matmul_skinny_ = true;
    return true;
  }
  bool w8a8_skinny(std::span<const MatmulParams> ps) {
    cuda::SkinnyGemmLaunch l;
    return w8a8_launch(ps, l) && run_w8a8(l);
  }

  // 8-bit codes and W8A8 (w8_matmul.cuh): activations quantized once per matmul, then a warp per output (per
  // channel W8A8 at small M: w8a8_skinny instead).
  void w8_matmul(const MatmulParams& p) {
    if (p.quant.act != ActQuant::kNone && w8a8_skinny(std::span<const MatmulParams>(&p, 1))) return;
    const WeightQuant& q = p.quant;
    const DType c = p.w.dtype;
    const bool ok_codes = (c == DType::kI8 && q.act != ActQuant::kFp8) || (c == DType::kF8E4M3 && q.act != ActQuant::kInt8);
    if (!ok_codes || !q.zeros.empty() || !q.perm.empty() || !q.g_idx.empty() || q.scales.dtype != DType::kF32)
      throw Error(ErrorCode::kUnsupported, std::string("cuda backend: 8-bit matmul with ") + std::string(dtype_name(c)) +
                                               " codes needs f32 scales, no zeros / perm / g_idx, and activations of the same kind");
    const int64_t m = p.x.dim(0), k = p.x.dim(1);
    cuda::W8MatmulLaunch l{p.x.data, p.x.dtype, static_cast<const uint8_t*>(p.w.data), c, q.scales.as<const float>(),
                           q.block_rows, q.scales.dim(1), q.group_size, static_cast<int>(q.act),
                           q.act_group > 0 ? q.act_group : k, p.bias.empty() ? nullptr : p.bias.data, p.bias.dtype,
                           p.out.data, p.out.dtype, m, p.w.dim(0), k};
    if (!cuda::w8_matmul_supports(l))
      throw Error(ErrorCode::kUnsupported, "cuda backend: 8-bit matmul needs K and the group a multiple of 4 and "
                                           "activation groups of K or the weight group");
    if (l.m == 0 || l.n == 0) return;
    if (fp8_blocks_lt(p, l)) return;
    uint8_t* xq = nullptr;
    float* xs = nullptr;
    if (l.act != 0) {
      const XqKey key{p.x.data, p.x.dtype, m, k, l.act, l.act_group};
      // An earlier matmul of this group made them, or the op before (prequant_key), which may have left x unwritten.
      const bool quantized = (grouping_ || prequant_) && xq_key_ == key;
      PEREGRINE_CHECK(quantized || !prequant_ || xq_key_.x != p.x.data,
                      "cuda backend: a W8A8 matmul does not read the codes the op before made of its x");
      std::tie(xq, xs) = xq_scratch(key);
      if (!quantized) cuda::launch_act_quant(l, xq, xs, stream_);
      if (grouping_ || prequant_) xq_key_ = key;
    }
    // FP8 per channel x per token beyond the skinny kernel's M (or its shapes): cuBLASLt's FP8 GEMM with both
    // scale vectors (rows agree for every M
    // within each path, not across M = 16 / 17, as for W4A16).
    if (l.act == 2 && c == DType::kF8E4M3 && l.block_rows == 1 && l.groups == 1 && l.act_group == k &&
        l.m > cuda::kQuantGemvMaxM && (p.out.dtype == p.x.dtype || p.out.dtype == DType::kF32)) {
      if (!fp8_gemm_) fp8_gemm_ = std::make_unique<cuda::Fp8LtGemm>();
      constexpr size_t kFp8Workspace = size_t{8} << 20;
      void* ws = scratch(kFp8Workspace, kQuantWSlot);
      const cuda::Fp8GemmLaunch g{l.codes, xq, l.scales, xs, p.out.data, p.out.dtype, m, l.n, k};
      if (fp8_gemm_->run(g, ws, kFp8Workspace, stream_)) {
        if (l.bias) {
          cuda::AddBiasLaunch b{p.out.data, l.bias, p.out.dtype, p.bias.dtype, m, l.n};
          cuda::launch_add_bias(b, stream_);
        }
        return;
      }
    }
    // int8 per channel x per token beyond the skinny kernel's M: cuBLASLt's int8 GEMM (exact int32 sums) in row
    // chunks that bound the int32 scratch, then the warp kernel's epilogue, so rows are its bits at every M.
    if (l.act == 1 && c == DType::kI8 && l.groups == 1 && l.act_group == k && int8_gemm_on()) {
      if (!fp8_gemm_) fp8_gemm_ = std::make_unique<cuda::Fp8LtGemm>();
      constexpr size_t kWorkspace = size_t{8} << 20, kC32Bytes = size_t{256} << 20;
      const int64_t chunk = std::max<int64_t>(16, static_cast<int64_t>(kC32Bytes / (static_cast<size_t>(l.n) * 4)) / 16 * 16);
      const int64_t rows0 = std::min(m, chunk);
      void* ws = scratch(kWorkspace, kQuantWSlot);
      auto* c32 = static_cast<int32_t*>(scratch(static_cast<size_t>(rows0 * l.n) * 4, kW4A8CSlot));
      int64_t r0 = 0;
      for (; r0 < m; r0 += chunk) {
        const int64_t rows = std::min(chunk, m - r0);
        const cuda::Int8GemmLaunch g{reinterpret_cast<const int8_t*>(l.codes),
                                     reinterpret_cast<const int8_t*>(xq + r0 * k), c32, rows, l.n, k};
        if (!fp8_gemm_->run_int8(g, ws, kWorkspace, stream_)) break;
        cuda::launch_w8_int32_epilogue(l, c32, xs + r0, r0, rows, stream_);
      }
      if (r0 >= m) return;
      // Rows cuBLASLt refused (no algorithm for the shape): the warp kernel, the same bits.
      l.m = m - r0;
      l.out = static_cast<uint8_t*>(l.out) + static_cast<size_t>(r0 * l.n) * dtype_bytes(p.out.dtype, 1);
      xq += r0 * k;
      xs += r0;
    }
    cuda::launch_w8_matmul(l, xq, xs, stream_);
  }

  // FP8 in 128 x 128 blocks beyond the skinny kernel's M: cuBLASLt's block-scaled FP8 GEMM (fp8_gemm_lt.h), x
  // quantized per token and 128 k straight into the scale layout it reads, W's scales re-laid out into scratch when
  // they are not already that layout (a few KB). False, having enqueued nothing, when it does not apply or cuBLASLt
  // has no algorithm: the warp kernel then (and always with PEREGRINE_FP8_BLOCK_LT=0). CudaW8Matmul.
  // Fp8BlockLayoutProbe confirmed the scale layouts on an H200 (cuBLASLt 13.1, 2026-12-06).
  bool fp8_blocks_lt(const MatmulParams& p, const cuda::W8MatmulLaunch& l) {
    static const bool on = !env_off("PEREGRINE_FP8_BLOCK_LT");
    if (!on || !is_fp8_blocks(p) || l.m <= cuda::kSkinnyW8F8MaxM ||
        !(p.out.dtype == p.x.dtype || p.out.dtype == DType::kF32))
      return false;
    const cuda::Fp8BlockLayout layout = cuda::fp8_block_layout();
    // cuBLASLt takes the block-scaled GEMM only for M a multiple of 4 (H200, cuBLASLt 13.1: 36 and 40 yes, 37 and
    // 8190 no): other M run as M rounded up, the padding rows' codes and scales zero, into scratch, and the first
    // M rows of it (a contiguous prefix) are copied out.
    const int64_t m = l.m, mp = (m + 3) / 4 * 4, n = l.n, k = l.k, kb = k / 128, nb = (n + 127) / 128;
    if (p.quant.scales.dim(0) != nb) return false;
    const size_t codes = static_cast<size_t>(mp * k + 255) / 256 * 256;
    const size_t x_floats = static_cast<size_t>(layout.x_floats(mp, kb) + 63) / 64 * 64;
    const bool w_copy = !layout.w_as_stored(nb, kb);
    const size_t w_floats = w_copy ? static_cast<size_t>(layout.w_floats(nb, kb)) : 0;
    auto* base = static_cast<uint8_t*>(scratch(codes + (x_floats + w_floats) * 4, kQuantXSlot));
    auto* xs = reinterpret_cast<float*>(base + codes);
    float* ws_copy = w_copy ? xs + x_floats : nullptr;
    if (!fp8_gemm_) fp8_gemm_ = std::make_unique<cuda::Fp8LtGemm>();
    constexpr size_t kWorkspace = size_t{8} << 20;
    void* ws = scratch(kWorkspace, kQuantWSlot);
    const size_t out_row = dtype_bytes(p.out.dtype, static_cast<size_t>(n));
    void* out = mp == m ? p.out.data : scratch(static_cast<size_t>(mp) * out_row, kW4A8CSlot);
    const cuda::Fp8BlockGemmLaunch g{l.codes, base, w_copy ? ws_copy : l.scales, xs, out, p.out.dtype, mp, n, k};
    if (!fp8_gemm_->blocks_usable(g, kWorkspace)) return false;
    if (mp != m) {
      PEREGRINE_CUDA_CHECK(cudaMemsetAsync(base + m * k, 0, static_cast<size_t>((mp - m) * k), stream_));
      PEREGRINE_CUDA_CHECK(cudaMemsetAsync(xs, 0, x_floats * 4, stream_));
    }
    cuda::W8MatmulLaunch aq = l;
    const int64_t x_ld = layout.x_ld(mp, kb);
    aq.xs_row_stride = layout.x_m_major ? 1 : x_ld;
    aq.xs_group_stride = layout.x_m_major ? x_ld : 1;
    cuda::launch_act_quant(aq, base, xs, stream_);
    if (w_copy) {
      const int64_t w_ld = layout.w_ld(nb, kb);
      cuda::launch_relayout_f32(l.scales, nb, kb, ws_copy, layout.w_k_major ? w_ld : 1, layout.w_k_major ? 1 : w_ld,
                                stream_);
    }
    if (!fp8_gemm_->run_blocks(g, ws, kWorkspace, stream_)) return false;  // planned above: not expected
    if (mp != m)
      PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(p.out.data, out, static_cast<size_t>(m) * out_row, cudaMemcpyDeviceToDevice,
                                           stream_));
    if (l.bias) {
      cuda::AddBiasLaunch b{p.out.data, l.bias, p.out.dtype, p.bias.dtype, m, n};
      cuda::launch_add_bias(b, stream_);
    }
    last_matmul_skinny_ = false;
    return true;
  }

  // PEREGRINE_W8_INT8_GEMM=0: int8 W8A8 at large M on the warp kernel (comparisons only).
  static bool int8_gemm_on() {
    static const bool on = !env_off("PEREGRINE_W8_INT8_GEMM");
    return on;
  }

  void rms_norm(const RmsNormParams& p) override {
    check_rms_norm(p);
    end_prequant();
    cuda::RmsNormLaunch l{p.x.data, p.residual.empty() ? nullptr : p.residual.data, p.weight.data, p.out.data,
                          p.x.dtype, p.weight.dtype, p.x.dim(0), p.x.dim(1), p.eps};
    if (p.out.dtype != p.x.dtype)
      throw Error(ErrorCode::kUnsupported, "rms_norm on cuda: out dtype must equal x dtype");
    // The next matmuls' x codes (W8A8) or blocks (GGUF), out left unwritten.
    const std::optional<XqKey> key = prequant_key(p.next, p.out, true);
    const bool ggml = key && key->act == cuda::kActQuantGgml;
    if (key && (ggml ? cuda::rms_norm_ggml_takes(l) : cuda::rms_norm_quant_takes(l))) {
      l.act_quant = key->act;
      if (ggml) l.ggml = ggml_xq_scratch(key->m, key->k);
      else std::tie(l.xq, l.xs) = xq_scratch(*key);
      cuda::launch_rms_norm(l, stream_);
      xq_key_ = *key;
      prequant_ = true;
      return;
    }
    cuda::launch_rms_norm(l, stream_);
  }

  void rope(const RopeParams& p) override {
    check_rope(p);
    if (p.q.dtype != p.k.dtype) throw Error(ErrorCode::kUnsupported, "rope on cuda: q and k dtypes differ");
    cuda::RopeLaunch l{p.q.data, p.k.data, p.positions.as<const int32_t>(), p.inv_freq.as<const float>(), p.q.dtype,
                       p.q.dim(0), static_cast<int>(p.q.dim(1)), static_cast<int>(p.k.dim(1)),
                       static_cast<int>(p.q.dim(2)), p.rotary_dim, p.attention_scaling};
    cuda::launch_rope(l, stream_);
  }

  void silu_mul(const SiluMulParams& p) override {
    check_silu_mul(p);
    end_prequant();
    cuda::SiluMulLaunch l{p.gate.data, p.up.data, p.out.data, p.gate.dtype, p.up.dtype, p.out.dtype, p.gate.numel(),
                          p.gate.dim(0)};
    // The next matmul's x codes (W8A8) or blocks (GGUF), out left unwritten.
    const std::optional<XqKey> key = p.out.ndim == 2 ? prequant_key(p.next, p.out, false) : std::nullopt;
    const bool ggml = key && key->act == cuda::kActQuantGgml;
    if (key && (ggml ? cuda::silu_mul_ggml_takes(l) : cuda::silu_mul_quant_takes(l))) {
      if (ggml) {
        cuda::launch_silu_mul_ggml(l, ggml_xq_scratch(key->m, key->k), stream_);
      } else {
        const auto [xq, xs] = xq_scratch(*key);
        cuda::launch_silu_mul_quant(l, key->act, xq, xs, stream_);
      }
      xq_key_ = *key;
      prequant_ = true;
      return;
    }
    cuda::launch_silu_mul(l, stream_);
  }

  void kv_write(const KvWriteParams& p) override {
    check_kv_write(p);
    if (p.k.dtype != p.v.dtype) throw Error(ErrorCode::kUnsupported, "kv_write on cuda: k and v dtypes differ");
    cuda::KvWriteLaunch l{p.k.data, p.v.data, p.slot_mapping.as<const int32_t>(), p.k_cache.data, p.v_cache.data,
                          p.k.dtype, p.k_cache.dtype, p.k.dim(0), p.k_cache.dim(0) * p.k_cache.dim(1),
                          p.k.dim(1) * p.k.dim(2), error_word_,
                          kv_cache_quantized(p.k_cache.dtype) ? p.k_scales.as<float>() : nullptr,
                          kv_cache_quantized(p.k_cache.dtype) ? p.v_scales.as<float>() : nullptr, p.k.dim(2)};
    cuda::launch_kv_write(l, stream_);
  }

  // One launch for a layer's RoPE and KV write when the caches are in the activation dtype and kv writes rope's k;
  // otherwise (quantized caches, another k) the two ops. PEREGRINE_ROPE_KV=0 keeps two launches (comparisons).
  void rope_kv_write(const RopeParams& r, const KvWriteParams& kv) override {
    check_rope(r);
    check_kv_write(kv);
    static const bool off = env_off("PEREGRINE_ROPE_KV");
    const bool one = !off && r.q.dtype == r.k.dtype && kv.k.data == r.k.data && kv.k.dtype == r.k.dtype &&
                     kv.v.dtype == r.k.dtype && kv.k_cache.dtype == r.k.dtype && kv.v_cache.dtype == r.k.dtype &&
                     kv.k.dim(0) == r.k.dim(0) && kv.k.dim(1) == r.k.dim(1) && kv.k.dim(2) == r.k.dim(2) &&
                     kv.v.dim(1) == r.k.dim(1) && kv.v.dim(2) == r.k.dim(2) && r.rotary_dim >= 2;
    if (!one) {
      rope(r);
      kv_write(kv);
      return;
    }
    cuda::RopeKvLaunch l{};
    l.rope = {r.q.data, r.k.data, r.positions.as<const int32_t>(), r.inv_freq.as<const float>(), r.q.dtype,
              r.q.dim(0), static_cast<int>(r.q.dim(1)), static_cast<int>(r.k.dim(1)), static_cast<int>(r.q.dim(2)),
              r.rotary_dim, r.attention_scaling};
    l.v = kv.v.data;
    l.slot_mapping = kv.slot_mapping.as<const int32_t>();
    l.k_cache = kv.k_cache.data;
    l.v_cache = kv.v_cache.data;
    l.num_slots = kv.k_cache.dim(0) * kv.k_cache.dim(1);
    l.error_flags = error_word_;
    cuda::launch_rope_kv_write(l, stream_);
  }

  void attention(const AttentionParams& p) override {
    check_attention(p);
    if (!p.tree_parents.empty())
      throw Error(ErrorCode::kUnsupported, "cuda backend: token-tree attention (tree_parents) is not implemented yet");
    if (p.out.dtype != p.q.dtype || p.v_cache.dtype != p.k_cache.dtype)
      throw Error(ErrorCode::kUnsupported, "attention on cuda: out must match q and v_cache must match k_cache");
    cuda::AttentionLaunch l{};
    l.q = p.q.data;
    l.out = p.out.data;
    l.k_cache = p.k_cache.data;
    l.v_cache = p.v_cache.data;
    l.query_start_loc = p.query_start_loc.as<const int32_t>();
    l.seq_lens = p.seq_lens.as<const int32_t>();
    l.block_tables = p.block_tables.as<const int32_t>();
    l.table_index = p.block_table_index.empty() ? nullptr : p.block_table_index.as<const int32_t>();
    if (!p.key_tail_from.empty()) {
      if (p.q.dim(1) / p.k_cache.dim(2) > cuda::kDecodeMaxRows)
        throw Error(ErrorCode::kUnsupported, "attention on cuda: key tails need at most 16 query heads per KV head");
      l.tail_from = p.key_tail_from.as<const int32_t>();
      l.tail_offset = p.key_tail_offset.as<const int32_t>();
      l.tail = p.key_tail.as<const int32_t>();
    }
    l.act = p.q.dtype;
    l.cache = p.k_cache.dtype;
    if (kv_cache_quantized(l.cache)) {
      l.k_scales = p.k_scales.as<const float>();
      l.v_scales = p.v_scales.as<const float>();
    }
    l.num_seqs = static_cast<int>(p.seq_lens.dim(0));
    l.num_q_heads = static_cast<int>(p.q.dim(1));
    l.num_kv_heads = static_cast<int>(p.k_cache.dim(2));
    l.head_dim = static_cast<int>(p.q.dim(2));
    l.block_size = static_cast<int>(p.k_cache.dim(1));
    l.max_blocks_per_seq = static_cast<int>(p.block_tables.dim(1));
    l.num_tokens = p.q.dim(0);
    l.scale = p.scale;
    l.sliding_window = p.sliding_window;
    // NOTE: the hints bound the launch grids, so they must be true maxima; absent ones take safe bounds.
    const int64_t seq_cap = static_cast<int64_t>(l.max_blocks_per_seq) * l.block_size;
    l.max_query_len = static_cast<int>(p.max_query_len > 0 ? std::min<int64_t>(p.max_query_len, l.num_tokens)
                                                           : l.num_tokens);
    l.max_seq_len = static_cast<int>(p.max_seq_len > 0 ? std::min<int64_t>(p.max_seq_len, seq_cap) : seq_cap);
    // Comparison switches, process-wide constants (so a sequence's splits still depend on its own length alone):
    // PEREGRINE_DECODE_SPLIT_TILES=N, splits of at least N 64-key tiles; PEREGRINE_DECODE_MAX_SPLITS=N, at most N
    // splits a sequence (default 64, at most 256); PEREGRINE_DECODE_WAVES=0, the first rule alone, not the wave rule;
    // PEREGRINE_DECODE_SPLIT_COST=Q, the wave rule's fixed cost of a split in quarter tiles.
    static const std::optional<int> tiles = env_int("PEREGRINE_DECODE_SPLIT_TILES");
    static const std::optional<int> splits = env_int("PEREGRINE_DECODE_MAX_SPLITS");
    static const std::optional<int> cost = env_int("PEREGRINE_DECODE_SPLIT_COST");
    static const bool waves = !env_off("PEREGRINE_DECODE_WAVES");
    l.decode_split_tiles = tiles ? std::max(1, *tiles) : 0;
    l.decode_max_splits = splits ? std::clamp(*splits, 1, cuda::kDecodeSplitsLimit) : 0;
    l.decode_split_cost = cost ? std::clamp(*cost, 0, 64) : cuda::kDecodeSplitCostQuarters;
    l.decode_waves = waves;
    const size_t ws = cuda::attention_workspace_bytes(l);
    l.workspace = ws ? static_cast<float*>(scratch(ws, 0)) : nullptr;
    cuda::launch_attention(l, stream_);
  }

  bool supports_sampling() const override { return true; }
  void sample(const SampleParams& p) override { cuda_sample(*this, p); }

  void gather_rows(const GatherRowsParams& p) override {
    check_gather_rows(p);
    cuda::GatherRowsLaunch l{p.x.data, p.indices.as<const int32_t>(), p.out.data, p.x.dim(0), p.indices.dim(0),
                             static_cast<int64_t>(dtype_bytes(p.x.dtype, static_cast<size_t>(p.x.dim(1)))),
                             error_word_};
    cuda::launch_gather_rows(l, stream_);
  }

  // CUDA services.
  void* allocate_pinned(size_t bytes) override {
    void* ptr = nullptr;
    PEREGRINE_CUDA_CHECK(cudaHostAlloc(&ptr, bytes ? bytes : 1, cudaHostAllocPortable));
    pinned_.insert(ptr);
    return ptr;
  }
  void deallocate_pinned(void* ptr) override {
    if (ptr == nullptr || pinned_.erase(ptr) == 0) return;
    PEREGRINE_CUDA_CHECK(cudaFreeHost(ptr));
  }
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override {
    if (bytes) PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  bool supports_graphs() const override { return true; }
  bool supports_tree_attention() const override { return false; }
  // The tensor-core kernels take a sequence's rows together (one tile of up to kDecodeMaxRows (row, head) pairs,
  // or the prefill kernel beyond) with a split-K geometry set by the sequence's last key tile, so a verify row
  // matches its own decode only inside a piece of at most kDecodeMaxRows / group rows within one key tile. The
  // generic kernel computes each row alone.
  RowExactLayout row_exact_layout(DType act, DType cache, int num_q_heads, int num_kv_heads,
                                  int head_dim) const override {
    const bool tensor_cores = act == cache && (act == DType::kBF16 || act == DType::kF16) &&
                              (head_dim == 64 || head_dim == 128 || head_dim == 256);
    if (!tensor_cores || num_kv_heads <= 0) return {};
    const int group = num_q_heads / num_kv_heads;
    return {std::max(1, cuda::kDecodeMaxRows / std::max(1, group)), cuda::kDecodeTileKeys};
  }
  int64_t capture_graph(const std::function<void()>& record) override {
    if (capturing_) throw Error(ErrorCode::kInvalidArgument, "cuda: capture_graph called inside a capture");
    PEREGRINE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    cudaGraph_t graph = nullptr;
    try {
      record();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      (void)cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      capturing_ = false;
      throw;
    }
    cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    capturing_ = false;
    PEREGRINE_CUDA_CHECK(err);
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    PEREGRINE_CUDA_CHECK(err);
    int64_t id = next_graph_id_++;
    graphs_[id] = exec;
    return id;
  }
  void replay_graph(int64_t graph) override {
    auto it = graphs_.find(graph);
    if (it == graphs_.end()) throw Error(ErrorCode::kInvalidArgument, "cuda: unknown graph id");
    PEREGRINE_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  }
  void destroy_graph(int64_t graph) override {
    auto it = graphs_.find(graph);
    if (it == graphs_.end()) return;
    PEREGRINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraphExecDestroy(it->second);
    graphs_.erase(it);
  }

  // Transfers: on copy_stream_, after an event recorded on the compute stream; a second event marks the end.
  uint64_t copy_async(CopyDirection direction, std::span<const CopyRegion> regions) override {
    if (capturing_) throw Error(ErrorCode::kInvalidArgument, "cuda: copy_async inside a graph capture");
    prune_transfers();
    cudaEvent_t start = take_event(), begun = take_timing_event(), done = take_timing_event();
    PEREGRINE_CUDA_CHECK(cudaEventRecord(start, stream_));
    PEREGRINE_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, start, 0));
    PEREGRINE_CUDA_CHECK(cudaEventRecord(begun, copy_stream_));  // the copies' own time starts here
    size_t bytes = 0;
    for (const CopyRegion& r : regions) bytes += r.bytes;
    const cudaMemcpyKind kind = direction == CopyDirection::kDeviceToHost   ? cudaMemcpyDeviceToHost
                                : direction == CopyDirection::kHostToDevice ? cudaMemcpyHostToDevice
                                                                            : cudaMemcpyDeviceToDevice;
    // Many small regions between the device and the host (a KV block is 2 per layer, 32-64 KB each) move at half
    // the pinned bandwidth as DMA copies of their own; gathered on the device into contiguous runs first (or
    // scattered after), the DMA moves runs of whole blocks.
    if (kind != cudaMemcpyDeviceToDevice && regions.size() >= 8 && bytes / regions.size() < kStageBelowBytes &&
        staging()) {
      staged_copies(kind, regions);
    } else {
      enqueue_copies(kind, regions);
    }
    PEREGRINE_CUDA_CHECK(cudaEventRecord(done, copy_stream_));
    free_events_.push_back(start);  // reusable once recorded work is enqueued: later records replace it
    const uint64_t ticket = ++last_ticket_;
    transfers_[ticket] = Transfer{begun, done, static_cast<int>(direction), bytes};
    return ticket;
  }
  bool transfer_done(uint64_t ticket) override {
    auto it = transfers_.find(ticket);
    if (it == transfers_.end()) return true;
    const cudaError_t err = cudaEventQuery(it->second.done);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    PEREGRINE_CUDA_CHECK(err);
    finish_transfer(it);
    return true;
  }
  void wait_transfer(uint64_t ticket) override {
    auto it = transfers_.find(ticket);
    if (it == transfers_.end()) return;
    PEREGRINE_CUDA_CHECK(cudaEventSynchronize(it->second.done));
    finish_transfer(it);
  }
  void compute_waits_for(uint64_t ticket) override {
    auto it = transfers_.find(ticket);
    if (it != transfers_.end()) PEREGRINE_CUDA_CHECK(cudaStreamWaitEvent(stream_, it->second.done, 0));
  }

  void set_matmul_policy(MatmulPolicy policy) override {
    skinny_ = policy == MatmulPolicy::kSkinnySmallM;
    switch (policy) {
      case MatmulPolicy::kSkinnySmallM:
      case MatmulPolicy::kBatchInvariantSplitK: policy_ = cuda::LtPolicy::kBatchInvariantSplitK; break;
      case MatmulPolicy::kBatchInvariant: policy_ = cuda::LtPolicy::kBatchInvariant; break;
      case MatmulPolicy::kFastest: policy_ = cuda::LtPolicy::kFastest; break;
    }
  }
  void set_matmul_splits(int64_t n, int64_t k, int splits) override { gemm_->pin_splits(n, k, splits); }
  std::string describe_last_matmul() const override {
    return last_matmul_skinny_ ? std::string("skinny tensor-core kernel (M <= ") + std::to_string(cuda::kSkinnyMaxM) + ")"
                               : gemm_->describe_last_plan();
  }
  void trace_push(const char* name) override { nvtxRangePushA(name); }
  void trace_pop() override { nvtxRangePop(); }
  int multiprocessor_count() const override { return sm_count_; }
  void* stream_handle() const override { return stream_; }
  int* device_error_word() override { return error_word_; }

  void* scratch(size_t bytes, int slot) override {
    if (slot < 0 || slot >= kScratchSlots) throw Error(ErrorCode::kInvalidArgument, "cuda: scratch slot out of range");
    if (slot == kQuantXSlot) xq_key_ = {};  // whoever asks may overwrite it (w8_matmul sets the key after)
    Scratch& s = scratch_[slot];
    if (bytes <= s.bytes) return s.ptr;
    if (capturing_)
      throw Error(ErrorCode::kInvalidArgument,
                  "cuda: workspace must grow inside a graph capture; run the same step eagerly before capturing");
    PEREGRINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Captured graphs may still point at the old buffer: keep it until the backend goes away.
    if (s.ptr) {
      if (graphs_.empty()) {
        PEREGRINE_CUDA_CHECK(cudaFree(s.ptr));
      } else {
        retired_.push_back(s.ptr);
      }
    }
    const size_t grown = std::max(bytes, s.bytes + s.bytes / 2);
    const size_t rounded = (grown + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
    s.ptr = nullptr;
    s.bytes = 0;
    s.ptr = allocate(rounded);
    s.bytes = rounded;
    return s.ptr;
  }

 private:
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  // Split-K plans at large M need more than the fixed workspace: they take a scratch slot (never grown
  // inside a capture, so run such shapes eagerly first).
  bool run_lt_matmul(const cuda::GemmLaunch& l) {
    const size_t need = gemm_->workspace_bytes(l, policy_);
    if (need <= kGemmWorkspaceBytes) return gemm_->run(l, policy_, gemm_workspace_, kGemmWorkspaceBytes, stream_);
    void* ws = scratch(need, kGemmScratchSlot);
    return gemm_->run(l, policy_, ws, scratch_[kGemmScratchSlot].bytes, stream_);
  }

  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    PEREGRINE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  cudaEvent_t take_timing_event() {
    if (!free_timing_events_.empty()) {
      cudaEvent_t e = free_timing_events_.back();
      free_timing_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    PEREGRINE_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  // DMA copies of the regions on the copy stream: one batch where the driver has batches, else region by region.
  void enqueue_copies(cudaMemcpyKind kind, std::span<const CopyRegion> regions) {
    bool batched = false;
    if (regions.size() > 1 && batch_copies_) {
      batch_dst_.clear();
      batch_src_.clear();
      batch_bytes_.clear();
      for (const CopyRegion& r : regions) {
        if (!r.bytes) continue;
        batch_dst_.push_back(r.dst);
        batch_src_.push_back(r.src);
        batch_bytes_.push_back(r.bytes);
      }
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t attr_index = 0;
      const cudaError_t err = batch_dst_.empty() ? cudaSuccess
                                                 : cudaMemcpyBatchAsync(batch_dst_.data(), batch_src_.data(),
                                                                        batch_bytes_.data(), batch_dst_.size(), &attr,
                                                                        &attr_index, 1, copy_stream_);
      if (err == cudaSuccess) {
        batched = true;
      } else if (err == cudaErrorNotSupported || err == cudaErrorInvalidValue) {
        (void)cudaGetLastError();
        batch_copies_ = false;
      } else {
        PEREGRINE_CUDA_CHECK(err);
      }
    }
    if (!batched) {
      for (const CopyRegion& r : regions) {
        if (r.bytes) PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, kind, copy_stream_));
      }
    }
  }

  // The staging buffer of staged_copies, made at first use (false: none could be made, or PEREGRINE_COPY_STAGING=0).
  bool staging() {
    if (staging_buf_) return true;
    if (staging_failed_) return false;
    if (env_off("PEREGRINE_COPY_STAGING")) {
      staging_failed_ = true;
      return false;
    }
    if (cudaMalloc(&staging_buf_, kStagingBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      staging_buf_ = nullptr;
      staging_failed_ = true;
      return false;
    }
    return true;
  }

  // Device-to-host: the regions are gathered (a kernel on the copy stream) into the staging buffer, in order, then
  // runs that are contiguous on the host side go down as one DMA copy each; host-to-device the other way round. In
  // rounds of at most kStagingBytes; the copy stream orders each round's staging use after the previous round's.
  // A region larger than the buffer goes as a DMA copy of its own (it is large enough to run at full rate).
  void staged_copies(cudaMemcpyKind kind, std::span<const CopyRegion> regions) {
    const bool down = kind == cudaMemcpyDeviceToHost;
    auto* stage = static_cast<std::byte*>(staging_buf_);
    std::vector<cuda::CopyRegionDesc> device_side;
    std::vector<CopyRegion> dma;
    size_t i = 0;
    while (i < regions.size()) {
      device_side.clear();
      dma.clear();
      size_t used = 0;
      for (; i < regions.size(); ++i) {
        const CopyRegion& r = regions[i];
        if (r.bytes == 0) continue;
        if (r.bytes > kStagingBytes) {
          if (used == 0) {  // alone in its round
            dma.push_back(r);
            ++i;
          }
          break;
        }
        if (used + r.bytes > kStagingBytes) break;
        std::byte* at = stage + used;
        used += (r.bytes + 15) & ~size_t{15};  // keeps every staged region 16-byte aligned
        // The host side's run: joins the previous one when both sides continue it.
        const void* host = down ? r.dst : r.src;
        if (!dma.empty()) {
          CopyRegion& last = dma.back();
          const void* last_host = down ? last.dst : last.src;
          const void* last_stage = down ? last.src : last.dst;
          if (static_cast<const std::byte*>(last_host) + last.bytes == host &&
              static_cast<const std::byte*>(last_stage) + last.bytes == at) {
            last.bytes += r.bytes;
            device_side.push_back(down ? cuda::CopyRegionDesc{at, r.src, r.bytes}
                                       : cuda::CopyRegionDesc{r.dst, at, r.bytes});
            continue;
          }
        }
        dma.push_back(down ? CopyRegion{r.dst, at, r.bytes} : CopyRegion{at, r.src, r.bytes});
        device_side.push_back(down ? cuda::CopyRegionDesc{at, r.src, r.bytes} : cuda::CopyRegionDesc{r.dst, at, r.bytes});
      }
      if (device_side.empty()) {
        enqueue_copies(kind, dma);  // a region larger than the buffer, copied directly
        continue;
      }
      if (down) {
        cuda::launch_copy_regions(device_side.data(), static_cast<int>(device_side.size()), copy_stream_);
        enqueue_copies(kind, dma);
      } else {
        enqueue_copies(kind, dma);
        cuda::launch_copy_regions(device_side.data(), static_cast<int>(device_side.size()), copy_stream_);
      }
    }
  }

  struct Transfer {
    cudaEvent_t begun, done;  // timing events on the copy stream around the copies
    int direction;
    size_t bytes;
  };
  // A finished transfer: its bytes and time go into the totals, its events back to the pool.
  std::map<uint64_t, Transfer>::iterator finish_transfer(std::map<uint64_t, Transfer>::iterator it) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, it->second.begun, it->second.done) != cudaSuccess) {
      (void)cudaGetLastError();
      ms = 0.0f;
    }
    transfer_totals_.bytes[it->second.direction] += it->second.bytes;
    transfer_totals_.seconds[it->second.direction] += static_cast<double>(ms) * 1e-3;
    free_timing_events_.push_back(it->second.begun);
    free_timing_events_.push_back(it->second.done);
    return transfers_.erase(it);
  }
  // Finished transfers nobody asked about give their events back.
  void prune_transfers() {
    for (auto it = transfers_.begin(); it != transfers_.end();) {
      if (cudaEventQuery(it->second.done) == cudaSuccess) {
        it = finish_transfer(it);
      } else {
        (void)cudaGetLastError();
        ++it;
      }
    }
  }

  void sync_and_check() {
    if (capturing_) throw Error(ErrorCode::kInvalidArgument, "cuda: synchronize inside a graph capture");
    PEREGRINE_CUDA_CHECK(cudaMemcpyAsync(error_host_, error_word_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    PEREGRINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int flags = *error_host_;
    if (flags != 0) {
      *error_host_ = 0;
      PEREGRINE_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(int), stream_));
      PEREGRINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      throw Error(ErrorCode::kInvalidArgument, describe_device_errors(flags));
    }
  }

  void release() noexcept {
    if (stream_) cudaStreamSynchronize(stream_);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    for (auto& [ticket, t] : transfers_) {
      cudaEventDestroy(t.begun);
      cudaEventDestroy(t.done);
    }
    transfers_.clear();
    for (cudaEvent_t e : free_timing_events_) cudaEventDestroy(e);
    free_timing_events_.clear();
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    free_events_.clear();
    for (auto& [id, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
    gemm_.reset();
    for (Scratch& s : scratch_) {
      if (s.ptr) cudaFree(s.ptr);
      s = Scratch{};
    }
    for (void* p : retired_) cudaFree(p);
    retired_.clear();
    for (void* p : pinned_) cudaFreeHost(p);
    pinned_.clear();
    if (gemm_workspace_) cudaFree(gemm_workspace_);
    gemm_workspace_ = nullptr;
    if (staging_buf_) cudaFree(staging_buf_);
    staging_buf_ = nullptr;
    if (error_word_) cudaFree(error_word_);
    error_word_ = nullptr;
    if (w4_flags_) cudaFree(w4_flags_);
    w4_flags_ = nullptr;
    if (error_host_) cudaFreeHost(error_host_);
    error_host_ = nullptr;
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    copy_stream_ = nullptr;
    (void)cudaGetLastError();
  }

  int device_;
  std::string name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // transfers (copy_async)
  static constexpr size_t kStagingBytes = size_t{64} << 20;  // staged_copies' device buffer
  static constexpr size_t kStageBelowBytes = size_t{1} << 20;  // regions smaller than this on average are staged
  void* staging_buf_ = nullptr;
  bool staging_failed_ = false;
  bool batch_copies_ = true;             // cudaMemcpyBatchAsync works here (until it says otherwise)
  std::vector<void*> batch_dst_;
  std::vector<const void*> batch_src_;
  std::vector<size_t> batch_bytes_;
  std::map<uint64_t, Transfer> transfers_;  // pending transfers
  std::vector<cudaEvent_t> free_timing_events_;
  std::vector<cudaEvent_t> free_events_;
  uint64_t last_ticket_ = 0;
  int* error_word_ = nullptr;
  int* w4_flags_ = nullptr;  // the W4A16 stream-K kernel's flags (sm_count_ ints, zero between launches)
  int* error_host_ = nullptr;
  void* gemm_workspace_ = nullptr;
  std::unique_ptr<cuda::LtMatmul> gemm_;
  std::unique_ptr<cuda::Fp8LtGemm> fp8_gemm_;  // FP8 and int8 W8A8 at M > 32 (created at first use)
  cuda::LtPolicy policy_ = cuda::LtPolicy::kBatchInvariantSplitK;  // for M past the skinny kernel's range
  bool skinny_ = !batch_invariant_requested();                       // MatmulPolicy::kSkinnySmallM
  mutable cuda::EnvSwitch adjacent_{"PEREGRINE_ADJACENT_QKV"};         // adjacent_dense (set_adjacent_matmuls)
  bool last_matmul_skinny_ = false;
  // What kQuantXSlot holds while a matmul group runs (matmuls): x's activations quantized by w8_matmul.
  XqKey xq_key_;
  bool grouping_ = false;
  bool prequant_ = false;  // xq_key_ names codes a producer op made for the next matmul call (prequant_key)
  bool capturing_ = false;
  std::map<int64_t, cudaGraphExec_t> graphs_;
  int64_t next_graph_id_ = 1;
  Scratch scratch_[kScratchSlots];
  std::vector<void*> retired_;
  std::set<void*> pinned_;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  const int count = cuda_device_count();
  if (device_index < 0 || device_index >= count)
    throw Error(ErrorCode::kUnsupported, "cuda: device " + std::to_string(device_index) + " does not exist (" +
                                             std::to_string(count) + " visible)");
  return std::make_unique<CudaBackendImpl>(device_index);
}

CudaBackend* as_cuda_backend(Backend& backend) { return dynamic_cast<CudaBackend*>(&backend); }

}  // namespace peregrine::ops
