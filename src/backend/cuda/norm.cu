// RMSNorm kernel: each row is handled by `tpr` threads (a warp up to a whole block); two passes over the
// row (the second hits L1/L2), the residual sum rounded to the activation dtype before the statistics. The sums of
// squares go through norm_sum.cuh, which the 8-bit skinny kernel's norm fusion shares.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/norm_rows.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace peregrine::cuda {
namespace {

constexpr int kThreads = kNormThreads;

// The vector path (16-byte pieces) is norm_rows.cuh's rms_norm_vec_rows; the scalar one below, for rows that are not
// a multiple of 8 elements or not 16-byte aligned.
template <typename T, typename TW>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(RmsNormLaunch p, int tpr, bool vec) {
  pdl_wait();
  pdl_trigger();
  const int rows_per_block = kThreads / tpr;
  if (vec) return rms_norm_vec_rows<T, TW, false>(p, static_cast<int64_t>(blockIdx.x) * rows_per_block, tpr);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / tpr;
  const int lane = threadIdx.x % tpr;
  const bool active = row < p.rows;
  const int64_t h = p.hidden;
  const T* x = static_cast<const T*>(p.x) + row * h;
  T* res = p.residual ? static_cast<T*>(p.residual) + row * h : nullptr;
  T* out = static_cast<T*>(p.out) + row * h;
  const TW* w = static_cast<const TW*>(p.weight);

  float ss = 0.f;
  if (active) {
    for (int64_t i = lane; i < h; i += tpr) {
      float v = to_f32(x[i]);
      if (res) {
        T sum = from_f32<T>(v + to_f32(res[i]));
        res[i] = sum;
        v = to_f32(sum);
      }
      ss = __fmaf_rn(v, v, ss);
    }
  }
  ss = row_sum(ss, tpr);
  if (!active) return;
  const float inv = rms_inv(ss, h, p.eps);
  const T* src = res ? res : x;
  for (int64_t i = lane; i < h; i += tpr) out[i] = from_f32<T>(to_f32(src[i]) * inv * to_f32(w[i]));
}

// The same arithmetic as rms_norm_kernel's vector path, a lane's pieces all loaded before anything is stored
// (norm_rows.cuh).
template <typename T, typename TW, int C>
__global__ void __launch_bounds__(kThreads) rms_norm_regs_kernel(RmsNormLaunch p, int tpr) {
  pdl_wait();
  pdl_trigger();
  rms_norm_regs_rows<T, TW, C, false>(p, static_cast<int64_t>(blockIdx.x) * (kThreads / tpr), tpr);
}

}  // namespace

void launch_rms_norm(const RmsNormLaunch& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  bool vec = p.hidden % 8 == 0 && aligned16(p.x) && aligned16(p.out) && aligned16(p.weight) &&
             (p.residual == nullptr || aligned16(p.residual));
  int64_t per_thread_units = vec ? p.hidden / 8 : p.hidden;
  const int tpr = rms_norm_lanes(per_thread_units);
  int rows_per_block = kThreads / tpr;
  unsigned blocks = static_cast<unsigned>(ceil_div(p.rows, rows_per_block));
  const int64_t pieces = vec ? ceil_div(per_thread_units, tpr) : 0;  // 8-element pieces per lane
  dispatch_float(p.act, [&](auto at) {
    using T = typename decltype(at)::type;
    dispatch_float(p.weight_dtype, [&](auto wt) {
      using TW = typename decltype(wt)::type;
      if (pieces >= 1 && pieces <= 2) {
        launch_pdl(rms_norm_regs_kernel<T, TW, 2>, blocks, kThreads, 0, stream, p.rows, p, tpr);
      } else if (pieces >= 3 && pieces <= 4) {
        launch_pdl(rms_norm_regs_kernel<T, TW, 4>, blocks, kThreads, 0, stream, p.rows, p, tpr);
      } else if (pieces >= 5 && pieces <= 8) {
        launch_pdl(rms_norm_regs_kernel<T, TW, 8>, blocks, kThreads, 0, stream, p.rows, p, tpr);
      } else {
        launch_pdl(rms_norm_kernel<T, TW>, blocks, kThreads, 0, stream, p.rows, p, tpr, vec);
      }
    });
  });
  PEREGRINE_CUDA_CHECK_LAUNCH();
}

}  // namespace peregrine::cuda
