// Quantized projections: checkpoint formats (GPTQ v1/v2, AWQ GEMM, compressed-tensors pack-quantized, and the 8-bit
// int-quantized / float-quantized / quant_method fp8 layouts: int8 or e4m3 codes kept as they are) read into
// the one layout ops::WeightQuant defines, on the host, before placement on the backend:
//   codes [N, K] kI4 (two per byte, even k in the low nibble) or kU8, scales f32 [N, groups], zeros f32 [N, groups]
//   (only when some zero differs from the midpoint 8 / 128), and for act-order checkpoints the code columns sorted
//   by group with `perm` (the input column of each code column), so groups are contiguous for every kernel.
// Every defect (missing tensor, wrong dtype or shape, a g_idx outside the groups) is an Error naming file and tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/hf_config.h"
#include "io/weight_source.h"

namespace peregrine::model {

// W8A8 kinds of activation quantization (mirrors ops::ActQuant; the model room maps one to the other).
enum class HostActQuant : uint8_t { kNone, kInt8, kFp8 };

struct HostQuantLinear {
  DType codes_dtype = DType::kI4;  // kI4, kU8, kI8 or kF8E4M3
  int64_t n = 0, k = 0;
  int64_t group_size = 0;          // columns per group (K when per channel)
  int64_t groups = 0;
  int64_t block_rows = 1;          // output rows per row of scales (128 for block FP8, N for one scale per tensor)
  HostActQuant act = HostActQuant::kNone;  // W8A8: activations quantized per token in the matmul
  int64_t act_group = 0;           // columns per activation scale (0: one per token)
  std::vector<uint8_t> codes;      // N*K/2 (kI4) or N*K (8-bit) bytes
  std::vector<float> scales;       // [ceil(N / block_rows), groups]
  std::vector<float> zeros;        // [N, groups] or empty (midpoint)
  std::vector<int32_t> perm;       // [K] or empty
  std::vector<int32_t> g_idx;      // [K] or empty (groups irregular after sorting: ref/generic paths only)
};

// Reads projection `prefix` (e.g. "model.layers.0.mlp.down_proj") of logical shape [n, k].
HostQuantLinear read_quantized_linear(const io::QuantConfig& q, const io::WeightSource& src, const std::string& prefix,
                                      int64_t n, int64_t k);

// The code of (n, kk): column kk of the codes (after any act-order sort).
int code_at(const HostQuantLinear& w, int64_t n, int64_t kk);

// Random codes and scales of the given scheme for benchmarks (weights of about uniform [-a, a), a = sqrt(3 / k)).
HostQuantLinear random_quantized(int64_t n, int64_t k, int bits, int64_t group_size, uint64_t seed);

// Load-time quantization of a dense weight [n, k] (any float dtype), symmetric per output channel:
// fp8: scale = max|row| / 448, codes e4m3(w / scale), activations fp8 per token;
// w8a8-int8: scale = max|row| / 127.5 (compressed-tensors' observer), codes clamp(rint(w / scale), -128, 127),
// activations int8 per token.
HostQuantLinear quantize_dense_8bit(const TensorView& w, HostActQuant scheme);

// Which 8-bit scheme a --quantization name asks for at load on a dense model (fp8, w8a8-int8 and its spellings
// int8_w8a8 / w8a8); kNone when it names none.
HostActQuant load_time_scheme(const std::string& name);

// Random 8-bit codes (int8 uniform, or e4m3 of uniform values) per channel with activations quantized per token.
// blocks (FP8): 128 x 128 weight blocks and activations per token and 128 columns, as DeepSeek / Qwen3 FP8
// checkpoints (weight_block_size [128, 128]) are; random weights only (--quantization fp8-block128 in benches).
HostQuantLinear random_quantized_8bit(int64_t n, int64_t k, HostActQuant scheme, uint64_t seed, bool blocks = false);
inline constexpr const char* kRandomFp8Blocks = "fp8-block128";

// Which scheme --quantization names for random weights: w4a16 / w8a16 (and the checkpoint method names, which
// mean int4 g128). Returns false for names it does not know.
bool random_scheme(const std::string& name, int* bits, int64_t* group_size);

}  // namespace peregrine::model
