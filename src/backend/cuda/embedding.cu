// Embedding and gather_rows kernels: one block per output row, 16-byte copies when the row allows.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/embedding.cuh"

namespace peregrine::cuda {
namespace {

// Copies row src (bytes) into dst with 16-byte accesses when both are aligned, else byte by byte.
__device__ void copy_row(char* dst, const char* src, int64_t bytes, bool vec) {
  if (vec) {
    for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

__device__ void zero_row(char* dst, int64_t bytes) {
  for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = 0;
}

__global__ void embedding_kernel(EmbeddingLaunch p, int64_t out_row_bytes, bool same_dtype_vec) {
  pdl_wait();
  pdl_trigger();
  int64_t t = blockIdx.x;
  int32_t id = p.token_ids[t];
  char* dst = static_cast<char*>(p.out) + t * out_row_bytes;
  if (id < 0 || id >= p.vocab) {
    if (threadIdx.x == 0) atomicOr(p.error_flags, kErrEmbeddingTokenId);
    zero_row(dst, out_row_bytes);
    return;
  }
  if (p.table_dtype == p.out_dtype) {
    copy_row(dst, static_cast<const char*>(p.table) + id * out_row_bytes, out_row_bytes, same_dtype_vec);
    return;
  }
  for (int64_t h = threadIdx.x; h < p.hidden; h += blockDim.x)
    store_any(p.out, p.out_dtype, t * p.hidden + h, load_any(p.table, p.table_dtype, id * p.hidden + h));
}

__global__ void gather_rows_kernel(GatherRowsLaunch p, bool vec) {
  pdl_wait();
  pdl_trigger();
  int64_t r = blockIdx.x;
  int32_t src = p.indices[r];
  char* dst = static_cast<char*>(p.out) + r * p.row_bytes;
  if (src < 0 || src >= p.num_rows_in) {
    if (threadIdx.x == 0) atomicOr(p.error_flags, kErrGatherIndex);
    zero_row(dst, p.row_bytes);
    return;
  }
  copy_row(dst, static_cast<const char*>(p.x) + src * p.row_bytes, p.row_bytes, vec);
}

}  // namespace

void launch_embedding(const EmbeddingLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  int64_t row_bytes = dtype_bytes(p.out_dtype, 1) * p.hidden;
  bool vec = row_bytes % 16 == 0 && aligned16(p.table) && aligned16(p.out);
  embedding_kernel<<<static_cast<unsigned>(p.num_tokens), 256, 0, stream>>>(p, row_bytes, vec);
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const GatherRowsLaunch& p, cudaStream_t stream) {
  if (p.num_rows_out == 0) return;
  bool vec = p.row_bytes % 16 == 0 && aligned16(p.x) && aligned16(p.out);
  launch_pdl(gather_rows_kernel, static_cast<unsigned>(p.num_rows_out), 256, 0, stream, p.num_rows_out, p, vec);
}

}  // namespace peregrine::cuda
