// bf16/f16 matmuls of few rows (decode and verify steps): out[M, N] = x[M, K] * w[N, K]^T (+ bias) for
// M <= kSkinnyMaxM, on tensor cores with the operands swapped (w is mma's A, 16 weight rows per tile; x is B,
// 8 tokens per n-tile), every weight byte read once with 16-byte streaming loads straight into fragments.
// Dense weights, W4A16 and W8A16 codes (SkinnySegment). Batch invariance: each output's sum runs over K in an
// order fixed by K alone (8 warps take interleaved 64-wide chunks, 128-wide on the factored code path, their
// partials are added in warp order), never by M, so a row's bits are the same for every
// M <= kSkinnyMaxM and whether or not the matmul is grouped with others. Larger M goes to cuBLASLt, whose rows
// differ from these: the boundary is the one place a row's result depends on M (ops::MatmulPolicy says so).
// Several matmuls over the same x (q/k/v, gate/up) run as one launch: segments of one grid (dense, or W4A16 / W8A16
// codes of one type).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/ggml_quant.h"

namespace peregrine::cuda {

constexpr int64_t kSkinnyMaxM = 16;  // ops::kSkinnyMatmulMaxM (cuda_backend.h) says the same
constexpr int kSkinnyMaxSegments = 4;
// GGUF blocks in the packed layout (ggml_matmul.cuh) take the int8 tensor-core kernel up to this M.
constexpr int64_t kSkinnyGgmlMaxM = 32;
// W8A8 (int8 or FP8 codes, x quantized per token) take the 8-bit tensor-core kernel up to these M (beyond them
// cuBLASLt's int8 or FP8 GEMM). int8's rows equal w8_matmul's warp kernel bit for bit (exact integer sums, the same
// epilogue), and so cuBLASLt's int8 rows too: int8 rows agree for every M. FP8 rows agree within M <= 32 and within
// cuBLASLt's M > 32 (block FP8: the warp kernel's), not across.
constexpr int64_t kSkinnyW8I8MaxM = 32;
constexpr int64_t kSkinnyW8F8MaxM = 32;
// W8A8 quantizing x in the kernel (quantize_x): up to this many tokens and this many bytes of codes (M * (K + 16)),
// within the 48 KB of shared memory a launch has without opting in.
constexpr int64_t kSkinnyW8QuantXMaxM = 8;
constexpr int64_t kSkinnyW8QuantXMaxBytes = 40 * 1024;

struct SkinnySegment {
  const void* w;     // [n, K] in x's dtype (16-byte aligned), or codes as SkinnyGemmLaunch::codes says
  const void* bias;  // [n] or null
  DType bias_dtype;
  void* out;  // [M, n]
  int64_t n;
  // Quantized weights (codes kI4 / kU8, ops.h WeightQuant): W[r, k] = (code - zero) * scale over groups of
  // group_size consecutive k, zeros null meaning the midpoint (8 / 128). Groups that are multiples of 128 take the
  // factored path: exact code values on the tensor cores, each group's zero and scale applied to its f32 sums
  // (s * (sum c x - z * sum x)); smaller groups are dequantized per code into x's dtype exactly as
  // launch_dequantize rounds them. PEREGRINE_SKINNY_PLAIN=1 sends every group the second way (comparisons).
  const float* scales = nullptr;  // [n, groups]
  const float* zeros = nullptr;   // [n, groups] or null
  int64_t groups = 0, group_size = 0;
  const void* meta = nullptr;  // GGUF packed blocks (SkinnyGemmLaunch::ggml): the layout's meta region; w its codes
  // W8A8: output rows sharing one scale (scales [ceil(n / block_rows), groups]); groups 0 or 1 per channel, K / 128
  // for FP8 in 128 x 128 blocks (block_rows a multiple of 16).
  int64_t block_rows = 1;
};

struct SkinnyGemmLaunch {
  const void* x;  // [M, K], bf16 or f16, 16-byte aligned
  DType dtype;    // of x (and of every w when codes is kNone)
  // Every segment's weights: kI4 codes (two per byte, the low nibble the even k) or kU8 codes; any other value
  // means dense weights in x's dtype.
  DType codes = DType::kBF16;
  DType out_dtype;
  int64_t m, k;
  int num_segments;
  SkinnySegment seg[kSkinnyMaxSegments];
  int sm_count;  // the device's multiprocessors (how many blocks fill a wave)
  // Fusions (ops.h MatmulFusion; dense weights and the factored code path, skinny_gemm_fuses says which; W8A8:
  // skinny_w8a8_takes, below):
  // norm_w [K] in x's dtype: x is the residual stream, each product inv * (round(x * norm_w) . W^T) + bias with
  // inv = 1 / sqrt(mean(x^2) + norm_eps); each lane makes x̂ = round(x * norm_w) of the x pieces it reads (norm_w
  // from shared memory, so K * 2 bytes must fit: K <= 19456) and sums their squares in an order fixed by K alone;
  // residual [M, n] in out_dtype (one segment): out = round(residual + round(product)), out may alias it;
  // silu_pair (segments 0 = gate and 1 = up of one n, groups and bias dtype; with norm_w, or without it on x already
  // normalised): a block takes 8 rows of each, and seg[0].out = round(silu(round(gate)) * round(up)).
  const void* norm_w = nullptr;
  float norm_eps = 0.0f;
  const void* residual = nullptr;
  bool silu_pair = false;
  // GGUF Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K / Q6_K blocks in the packed layout (launch_skinny_ggml): x already quantized by
  // launch_ggml_quantize_x into xq / xd / xsum ([M, K] codes, [M, K / 32] scales and code sums); dtype is unused.
  GgmlType ggml = GgmlType::kNone;
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  const int32_t* xsum = nullptr;
  const int32_t* xsum16 = nullptr;  // [M, K / 16] (Q6_K)
  // W8A8 (codes kI8 or kF8E4M3, launch_skinny_w8a8): x's codes [M, K] in xq (e4m3 bytes for FP8) and its scales
  // per token [M], as w8_matmul.cuh's launch_act_quant writes them (act_group K).
  const float* xs = nullptr;
  // W8A8 with x unquantized ([M, K] bf16 / f16 / f32 in x and dtype; xq / xs unused): each block quantizes x per
  // token into its shared memory with launch_act_quant's arithmetic (the same codes and scales, so the same bits),
  // saving the quantizer's launch. skinny_w8a8_quantizes says when the kernel can.
  bool quantize_x = false;
  // W8A8: the launch's tiles, which its blocks split evenly in consecutive runs (launch_skinny_w8a8 sets it).
  int64_t tiles = 0;
  // int4 codes on the factored path: a group's zero goes into the code's conversion, c - z exactly, where every
  // zero a warp meets in a chunk is an integer (skinny_gemm.cu, fold_chunk); false keeps the zero's sums apart
  // (launch_skinny_gemm sets it so under PEREGRINE_SKINNY_FOLD=0; comparisons).
  bool fold_zeros = true;
};

// Whether the kernel takes it: bf16/f16 x (and dense w of the same dtype), f32/bf16/f16 out, 16-byte aligned x
// and w, 1 <= M <= kSkinnyMaxM; K % 8 == 0 for dense weights; K and group_size multiples of 16 with
// groups * group_size == K for codes (no g_idx; an act-order perm is the caller's: it passes x gathered).
bool skinny_gemm_supports(const SkinnyGemmLaunch& l);
// Whether launch_skinny_gemm takes l's fusion fields too: skinny_gemm_supports, and for any fusion set dense
// weights or codes on the factored path (groups multiples of 128), x-dtype outputs for a residual or a pair, a
// pair's two segments alike, and for the norm a 16-byte aligned norm_w of at most 19456 values.
bool skinny_gemm_fuses(const SkinnyGemmLaunch& l);
void launch_skinny_gemm(const SkinnyGemmLaunch& l, cudaStream_t stream);
// How the symmetric factored kernels at M <= 8 take blocks an SM, for the launches after the call (tests): 0 two,
// 1 three, 2 three where the launch has more tiles than two an SM hold (the default, PEREGRINE_SKINNY_FACT3).
void set_skinny_fact3(int mode);

// GGUF blocks on int8 tensor cores (mma m16n8k32 s8): each 32-value block's integer dot products of weight codes
// and x codes, then out += d_x * (d_w * dot) for Q8_0, d_x * d_w * (dot - 8 sum q) for Q4_0 (- 16 sum q for Q5_0)
// and d_x * (d * sc * dot - dmin * m * sum q) for Q4_K's and Q5_K's sub-blocks, d_x * d * sc * (dot - 32 sum q)
// for each 16 values of Q6_K (one m16n8k16 step each), block by block in K order; the same split of K over
// warps and the same warp-order sum as the kernel above, so rows are bit-identical for every M <= kSkinnyGgmlMaxM.
// Takes: l.ggml one of ggml_packable's types, xq / xd / xsum (and xsum16 for Q6_K) set, 1 <= M <=
// kSkinnyGgmlMaxM, ggml_packable K, f32/bf16/f16 out.
bool skinny_ggml_supports(const SkinnyGemmLaunch& l);
// The same without the x buffers (xq / xd / xsum / xsum16 may still be null): whether to quantize x for it.
bool skinny_ggml_takes(const SkinnyGemmLaunch& l);
void launch_skinny_ggml(const SkinnyGemmLaunch& l, cudaStream_t stream);

// W8A8 on 8-bit tensor cores (mma m16n8k32, s8 or e4m3), weights as stored ([n, K] codes, one f32 scale per
// block_rows rows) and x's codes as launch_act_quant writes them: a lane's 32 consecutive bytes of a 128-wide chunk
// feed four mma steps with the same K permutation in both operands, so neither is repacked. int8: the products
// summed exactly in int32 (the warps' partials added as integers), then out = fmaf(float(sum) * xs[token],
// w_scale, 0) (+ bias), which is w8_matmul's warp kernel's arithmetic, so rows are the same bits at every M. FP8:
// each 128-value chunk's four mma steps accumulate from zero on the tensor cores (whose accumulation is not exact
// f32) and are added to f32 accumulators once per chunk, in an order fixed by K alone; then (sum * xs) * w_scale as
// the warp kernel. FP8 in 128 x 128 blocks (every segment's groups K / 128; x's codes from launch_act_quant with a
// scale per token and 128 k, xs [M, K / 128]): each chunk's sum is scaled as the warp kernel scales a group's,
// acc = fmaf(sum * x_scale, w_scale, acc), and the bias added at the end; no norm or pair fusion there. Takes:
// codes kI8 or kF8E4M3, 16-byte aligned x and w, quantize_x only where skinny_w8a8_quantizes (else the launch
// needs xq / xs set, 16-byte aligned codes), K % 128 == 0, 1 <= M <= kSkinnyW8I8MaxM (kSkinnyW8F8MaxM for FP8),
// scales set, f32/bf16/f16 out. A block takes a run of consecutive tiles (one wave of blocks).
// Fusions (ops.h MatmulFusion), each giving the bits of the unfused ops (norm.cu's rms_norm, the quantizer, this
// kernel, activation.cu's silu_mul, the next norm's residual add), so a fused step equals an unfused one: norm_w
// (with quantize_x; bf16 / f16 x and gamma): x is the residual stream and each block makes norm.cu's output
// round(x * inv * gamma) (inv from the norm kernel's own summation order for K) before quantizing it; residual (one
// segment, out in x's dtype): out = round(residual + round(product)), out may alias it; silu_pair (with norm_w;
// segments 0 = gate and 1 = up of one n): a block takes 8 rows of each and seg[0].out = round(silu(round(gate)) *
// round(up)).
bool skinny_w8a8_takes(const SkinnyGemmLaunch& l);
// Whether a W8A8 launch is FP8 in 128 x 128 blocks (its segments' groups K / 128, skinny_w8a8_takes checks them all).
inline bool skinny_w8a8_blocks(const SkinnyGemmLaunch& l) { return l.seg[0].groups > 1; }
// Whether the kernel can quantize x itself (quantize_x): 1 <= M <= kSkinnyW8QuantXMaxM, M * (K + 16) <=
// kSkinnyW8QuantXMaxBytes, bf16 / f16 / f32 x, 16-byte aligned.
bool skinny_w8a8_quantizes(const SkinnyGemmLaunch& l);
void launch_skinny_w8a8(const SkinnyGemmLaunch& l, cudaStream_t stream);

}  // namespace peregrine::cuda
