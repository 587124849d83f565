// Backend: the op interface the engine and models call. A backend owns a device (host memory for ref and
// cpu, one GPU for cuda) and a stream of work on it; ops are enqueued in call order and may run
// asynchronously until synchronize() or a copy to host.
// Contract: pointers inside params structs must be memory of this backend (allocate(), or for host backends
// any host memory). The caller owns every buffer; a backend keeps no pointer past the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "ops/ops.h"

namespace peregrine {
class ThreadPool;
}

namespace peregrine::ops {

class DeviceBuffer;

enum class DeviceKind { kRef, kCpu, kCuda };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "ref", "cpu (avx2 fma)", "cuda (NVIDIA H200)"
  virtual DeviceKind kind() const = 0;
  // True when the CPU can read and write this backend's memory directly (mmapped weights can be used as is).
  virtual bool is_host() const = 0;
  // Whether this backend computes with activations of this dtype.
  virtual bool supports_activation(DType act) const = 0;

  // Memory. allocate throws Error(kResourceExhausted) when the device is full.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;  // waits for prior work
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Bytes that could still be allocated (for sizing the KV cache); host backends report available RAM.
  virtual size_t free_memory() const = 0;
  // A device's memory as its driver reports it (every allocation of the process, the runtime's own included),
  // for /metrics and soaks; false on host backends, whose memory is the process's (RSS).
  virtual bool device_memory(size_t* free_bytes, size_t* total_bytes) const {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }

  // Optional services with plain defaults (host memory, synchronous copies, no graphs); the CUDA backend
  // overrides them. Pinned memory is what copy_from_host_async reads; its source must stay unchanged until the
  // next synchronize() or copy_to_host().
  virtual void* allocate_pinned(size_t bytes);
  virtual void deallocate_pinned(void* ptr);
  virtual void copy_from_host_async(void* dst, const void* src, size_t bytes) { copy_from_host(dst, src, bytes); }
  // Graphs: record the ops `record` enqueues, replay them later on the buffers' current contents. Every buffer
  // the ops touch must outlive the graph. Run the same ops once eagerly before capturing.
  virtual bool supports_graphs() const { return false; }
  // Whether attention takes AttentionParams::tree_parents (token-tree verification).
  virtual bool supports_tree_attention() const { return true; }
  // Whether attention takes AttentionParams::block_table_index and the key tails (a tree's rows laid out as
  // chains of one row each: how the runner verifies trees where tree_parents is not taken).
  virtual bool supports_key_tails() const { return true; }
  // How to lay out a sequence's few query rows (a decode and its drafts) so that attention computes each row
  // bit-identically to decoding that row alone, which speculative decoding needs to be exact. {0, 0}: attention
  // already computes every row the same way whatever rows share its sequence (cpu, ref). Otherwise cut the rows
  // into pieces (sequences of their own over the same block table) of at most max_rows rows whose context
  // positions p, and p - sliding_window + 1 when there is a window, lie within one aligned run of key_granule.
  struct RowExactLayout {
    int max_rows = 0;
    int key_granule = 0;
  };
  virtual RowExactLayout row_exact_layout(DType act, DType cache, int num_q_heads, int num_kv_heads,
                                          int head_dim) const {
    (void)act, (void)cache, (void)num_q_heads, (void)num_kv_heads, (void)head_dim;
    return {};
  }
  virtual int64_t capture_graph(const std::function<void()>& record);
  virtual void replay_graph(int64_t graph);
  virtual void destroy_graph(int64_t graph);
  // Named ranges for profilers around the work enqueued in between (the runner's steps: "decode", "step"). CUDA:
  // NVTX ranges (`ncu --nvtx --nvtx-include decode/` profiles decode steps only); elsewhere nothing.
  virtual void trace_push(const char* name) { (void)name; }
  virtual void trace_pop() {}

  // Transfers on a copy queue of their own, so they overlap compute (KV swap to and from host memory). A
  // transfer starts after all work enqueued before the call and runs in the background; its ticket says when it
  // is done. Host memory in a transfer must be pinned (allocate_pinned) and stay untouched until it is done.
  // Host backends copy synchronously (the ticket is done on return); CUDA uses a second stream and events.
  struct CopyRegion {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  enum class CopyDirection { kDeviceToHost, kHostToDevice, kDeviceToDevice };
  // Returns a ticket > 0 (also for an empty region list).
  virtual uint64_t copy_async(CopyDirection direction, std::span<const CopyRegion> regions);
  virtual bool transfer_done(uint64_t ticket);       // never blocks
  virtual void wait_transfer(uint64_t ticket);       // the host waits
  virtual void compute_waits_for(uint64_t ticket);   // work enqueued after this call starts after the transfer
  // Bytes and seconds of the copies themselves (not the wait for prior work) of finished transfers, by direction
  // (index = CopyDirection), since the backend was made. A transfer counts once it is seen done.
  struct TransferTotals {
    uint64_t bytes[3] = {0, 0, 0};
    double seconds[3] = {0, 0, 0};
  };
  virtual TransferTotals transfer_totals() const { return transfer_totals_; }

  // Ops (see ops.h for semantics).
  // Optional: a copy of matmul weight w in a layout this backend's kernels read faster (the CPU backend: GGUF
  // blocks of 16 rows interleaved), or an empty buffer when it has none (the default). The caller keeps the buffer
  // as long as the weight and sets WeightQuant::packed to its data; the values stay exactly w's.
  virtual DeviceBuffer pack_weight(const TensorView& w, const WeightQuant& q);
  // True when this backend never reads w once WeightQuant::packed is set (the CUDA backend: every path reads the
  // packed copy), so the caller may free w's own copy and point w at the packed bytes (same size and shape).
  virtual bool packed_replaces_weight() const { return false; }
  // True when the loader should store a layer's dense q/k/v weights one after another in one buffer (the CUDA
  // backend runs matmuls over such weights as one GEMM at large M; PEREGRINE_ADJACENT_QKV=1 for now).
  virtual bool adjacent_weights_wanted() const { return false; }
  // How pack_weight's layout groups w's rows: `rows` consecutive rows of w pack into `bytes` of the layout, group
  // after group, the bytes of a group depending on its rows alone (so rows [r0, r1) with r0 a multiple of `rows`
  // pack into the bytes at r0 / rows * bytes: a part of the weight can be re-packed in place). rows 0 where the
  // backend has no such layout for w.
  struct PackedRowGroup {
    int64_t rows = 0;
    size_t bytes = 0;
  };
  virtual PackedRowGroup packed_row_group(const TensorView& w, const WeightQuant& q) const {
    (void)w;
    (void)q;
    return {};
  }

  virtual void embedding(const EmbeddingParams& p) = 0;
  virtual void matmul(const MatmulParams& p) = 0;
  // Several matmuls of one x (q/k/v, gate/up), each as matmul() computes it; a backend may launch them as one.
  virtual void matmuls(std::span<const MatmulParams> ps) {
    for (const MatmulParams& p : ps) matmul(p);
  }
  // Fused matmul groups (ops.h MatmulFusion). fuses_matmuls: whether the model should run these params fused (a
  // backend without fusion kernels says no, and the model runs the ops one by one). matmuls_fused computes them;
  // it throws Error(kUnsupported) where it has no kernel (the ref backend takes every valid group: it is the
  // definition the other backends' kernels are tested against, while its own model path stays unfused).
  virtual bool fuses_matmuls(std::span<const MatmulParams> ps, const MatmulFusion& f) const;
  virtual void matmuls_fused(std::span<const MatmulParams> ps, const MatmulFusion& f);
  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void rope(const RopeParams& p) = 0;
  virtual void silu_mul(const SiluMulParams& p) = 0;
  virtual void kv_write(const KvWriteParams& p) = 0;
  // rope(r), then kv_write(kv) of the rotated k (kv.k is r.k) and v: one launch where a backend has a kernel for it
  // (CUDA, caches in the activation dtype), the same values as the two ops. The default runs the two ops.
  virtual void rope_kv_write(const RopeParams& r, const KvWriteParams& kv);
  virtual void attention(const AttentionParams& p) = 0;
  virtual void gather_rows(const GatherRowsParams& p) = 0;
  // Sampling where the logits are (ops.h SampleParams); backends without it throw Error(kUnsupported).
  virtual bool supports_sampling() const { return false; }
  virtual void sample(const SampleParams& p);

 protected:
  TransferTotals transfer_totals_;

 private:
  uint64_t host_transfers_ = 0;
};

// A buffer of backend memory, freed on destruction. The backend must outlive it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, size_t bytes) : backend_(&backend), bytes_(bytes) {
    ptr_ = bytes ? backend.allocate(bytes) : nullptr;
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  TensorView view(DType t, std::initializer_list<int64_t> dims) const { return TensorView(ptr_, t, dims); }
  void reset() {
    if (ptr_ && backend_) backend_->deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct BackendOptions {
  DeviceKind kind = DeviceKind::kCpu;
  int num_threads = 0;  // cpu: 0 = all cores
  int device_index = 0;  // cuda
};

// Creates a backend; throws Error(kUnsupported) when it was not compiled in or no device exists.
std::unique_ptr<Backend> create_backend(const BackendOptions& options);
// True when a CUDA backend is compiled in and a GPU is visible.
bool cuda_available();

}  // namespace peregrine::ops
