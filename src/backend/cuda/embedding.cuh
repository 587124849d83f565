// Row lookups: token embedding (with dtype conversion) and gather_rows (byte copies of selected rows).
// Out-of-range ids set a device error bit and produce zero rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace peregrine::cuda {

struct EmbeddingLaunch {
  const int32_t* token_ids;  // [T]
  const void* table;         // [vocab, hidden]
  void* out;                 // [T, hidden]
  DType table_dtype, out_dtype;
  int64_t num_tokens, vocab, hidden;
  int* error_flags;
};
void launch_embedding(const EmbeddingLaunch& p, cudaStream_t stream);

struct GatherRowsLaunch {
  const void* x;           // [T, row_bytes]
  const int32_t* indices;  // [R]
  void* out;               // [R, row_bytes]
  int64_t num_rows_in, num_rows_out, row_bytes;
  int* error_flags;
};
void launch_gather_rows(const GatherRowsLaunch& p, cudaStream_t stream);

}  // namespace peregrine::cuda
