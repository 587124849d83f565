// The CUDA backend (Hopper first): the op interface on one GPU, plus the CUDA-only services the GPU model
// runner needs (pinned staging buffers, graph capture, matmul policy). Plain C++: includes no CUDA header,
// so engine code may include it. Kernels live in the .cu files beside this one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ops/backend.h"

namespace peregrine::ops {

// Number of visible CUDA devices; 0 when there is none or the driver is missing (never throws).
int cuda_device_count();

// Largest M the skinny bf16/f16 matmul kernel takes under MatmulPolicy::kSkinnySmallM.
constexpr int64_t kSkinnyMatmulMaxM = 16;

// How matmul picks its kernels and cuBLASLt algorithms.
enum class MatmulPolicy {
  // The default. bf16/f16 matmuls with M <= 16 (decode and verify steps) run the skinny tensor-core kernel
  // (skinny_gemm.cuh: each output's K order fixed by K alone), larger M runs kBatchInvariantSplitK. A row's
  // result is the same for every M within each range, but differs across the M = 16 / 17 boundary (where the
  // W4A16 kernels switch too). W4A16 (int4 codes, contiguous groups that are multiples of 64, no act-order) has
  // three ranges: M <= 16 the skinny kernel, 17 <= M <= 256 on Hopper (128 elsewhere) the fused tensor-core GEMM
  // (w4_gemm.cuh: its split-K count fixed by the weight shape alone; PEREGRINE_W4_MMA_MAX_M moves the upper end),
  // larger M dequantize + cuBLASLt; rows agree for every M within a range and differ across M = 16 / 17 and at the
  // GEMM's end.
  // VLLM_BATCH_INVARIANT=1 in the environment makes kBatchInvariantSplitK the default instead.
  kSkinnySmallM,
  // One split-K count per weight shape [N, K], the same for every M, with a fixed-order f32 reduction out of
  // place: a row's result never depends on M (ops.h contract), at the cost of slower small-M matmuls.
  kBatchInvariantSplitK,
  // No split-K or other cross-CTA reductions: batch-invariant too, but slow at small M for small N.
  kBatchInvariant,
  // The heuristic's first choice per shape (may use split-K at small M; rows may differ across M).
  kFastest,
};

// The CUDA backend implements Backend's optional services (pinned memory, copy_from_host_async, graphs; see
// ops/backend.h) and adds these. NOTE on graphs: inside `record` only enqueue (no synchronize, copy_to_host
// or copy_from_host); workspaces and matmul plans must exist from an eager run of the same ops, since
// scratch cannot grow during a capture (Error(kInvalidArgument) if it would).
class CudaBackend : public Backend {
 public:
  virtual void set_matmul_policy(MatmulPolicy policy) = 0;
  // Pins the split-K count kBatchInvariantSplitK uses for weight shape [n, k] (0: back to the built-in rule).
  // Rows are batch-invariant only among matmuls run with the same count; for tests and tuning.
  virtual void set_matmul_splits(int64_t n, int64_t k, int splits) = 0;
  // The cuBLASLt configuration of the last matmul (algo, tile, splits, reduction scheme), for tests and benches.
  virtual std::string describe_last_matmul() const = 0;
  // Matmuls over adjacent dense weights as one GEMM past the skinny kernel's M (and the loader's stacked q/k/v):
  // 1 on, 0 off, -1 back to PEREGRINE_ADJACENT_QKV (1 on; unset off, until a GPU run has measured it). For tests.
  virtual void set_adjacent_matmuls(int mode) = 0;
  virtual int multiprocessor_count() const = 0;
  // The cudaStream_t all work is enqueued on, as an opaque handle (for kernels outside this backend).
  virtual void* stream_handle() const = 0;
  // Device scratch owned by the backend, one buffer per slot (0..8), grown on demand but never inside a
  // capture; valid until the next call with the same slot. Slots 0-2 serve attention and sampling, 7 matmul, 8 stacked
  // matmul outputs.
  virtual void* scratch(size_t bytes, int slot) = 0;
  // The device word kernels flag invalid inputs in (checked and cleared at synchronize/copy_to_host).
  virtual int* device_error_word() = 0;
};

// Creates the backend on device `device_index`; throws Error(kUnsupported) when it does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device_index);

// The CUDA services of a backend, or nullptr when it is not the CUDA backend.
CudaBackend* as_cuda_backend(Backend& backend);

}  // namespace peregrine::ops
