// CUDA W4A16 / W8A16 matmul vs the ref backend on fresh random inputs, every output element: int4 and uint8
// codes, groups 32..K (groups of 128 and more take the skinny kernel's factored path at M <= 16, smaller ones its
// dequantize-per-code path), zero points, act-order perm, irregular g_idx (dequantize path), bias, bf16, f16 and f32
// activations, M across the small-M kernels and the dequantize + GEMM path; and rows bit-identical for every M
// within each path.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/skinny_gemm.cuh"
#include "backend/cuda/w4_gemm.cuh"
#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

// Where int4 x bf16/f16 leaves the 64-token fused kernels for a path of its own: on Hopper w4_wgmma.cu's wide
// kernel from M 65 (PEREGRINE_W4_WG_WIDE_FROM=m, 65..256, moves it; PEREGRINE_W4_WG_WIDE=0: none up to 256, so 257);
// elsewhere w4_gemm ends at 128 and the dequantize path starts at 129.
bool on_hopper() {
  int dev = 0, major = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major == 9;
}

int64_t w4_path_bound() {
  if (!on_hopper()) return 129;
  const char* wide = std::getenv("PEREGRINE_W4_WG_WIDE");
  if (wide && std::string(wide) == "0") return 257;
  const char* from = std::getenv("PEREGRINE_W4_WG_WIDE_FROM");
  return from && *from ? std::clamp<int64_t>(std::atoll(from), 65, 256) : 65;
}

// A WeightQuant over the scales (and, as asked, zeros, perm, g_idx) of a set of host or device tensors.
template <typename Tensors>
ops::WeightQuant quant_over(const Tensors& t, bool z, bool p, bool g, int64_t group) {
  ops::WeightQuant q;
  q.scales = t.scales.view();
  if (z) q.zeros = t.zeros.view();
  if (p) q.perm = t.perm.view();
  if (g) q.g_idx = t.g_idx.view();
  q.group_size = group;
  return q;
}

struct QuantInputs {
  HostTensor codes, scales, zeros, perm, g_idx;
  ops::WeightQuant host_quant(bool z, bool p, bool g, int64_t group) const { return quant_over(*this, z, p, g, group); }
};

// The same tensors on the GPU.
struct DeviceQuant {
  DeviceTensor codes, scales, zeros, perm, g_idx;
  explicit DeviceQuant(const QuantInputs& in)
      : codes(in.codes), scales(in.scales), zeros(in.zeros), perm(in.perm), g_idx(in.g_idx) {}
  ops::WeightQuant quant(bool z, bool p, bool g, int64_t group) const { return quant_over(*this, z, p, g, group); }
};

QuantInputs make_inputs(DType codes, int64_t n, int64_t k, int64_t group, std::mt19937& rng) {
  QuantInputs in;
  const int64_t groups = k / group;
  in.codes = HostTensor(codes, {n, k});
  for (auto& b : in.codes.bytes) b = static_cast<uint8_t>(rng());
  in.scales = HostTensor(DType::kF32, {n, groups});
  in.zeros = HostTensor(DType::kF32, {n, groups});
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double top = codes == DType::kI4 ? 15 : 255;
  for (int64_t i = 0; i < n * groups; ++i) {
    in.scales.set(i, (0.2 + u(rng)) / std::sqrt(static_cast<double>(k)) / (codes == DType::kI4 ? 4 : 64));
    in.zeros.set(i, std::round(u(rng) * top));
  }
  std::vector<int32_t> perm(static_cast<size_t>(k)), g_idx(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (auto& g : g_idx) g = static_cast<int32_t>(rng() % groups);
  in.perm = int_tensor(perm);
  in.g_idx = int_tensor(g_idx);
  return in;
}

TEST(CudaQuantMatmul, MatchesRefOnEveryElement) {
  std::mt19937 rng(21);
  struct Case { DType codes; int64_t n, k, group; bool zeros, perm, g_idx; };
  const Case cases[] = {{DType::kI4, 384, 512, 128, false, false, false}, {DType::kI4, 256, 256, 32, true, false, false},
                        {DType::kI4, 130, 1024, 64, true, true, false},   {DType::kI4, 64, 256, 256, false, false, false},
                        {DType::kI4, 96, 256, 64, true, false, true},     {DType::kI4, 200, 384, 128, true, false, false},
                        {DType::kU8, 200, 512, 128, false, false, false},
                        {DType::kU8, 128, 384, 128, true, true, false},   {DType::kU8, 64, 256, 256, true, false, false}};
  for (const Case& c : cases) {
    const QuantInputs in = make_inputs(c.codes, c.n, c.k, c.group, rng);
    const DeviceQuant dev(in);
    const ops::WeightQuant dq = dev.quant(c.zeros, c.perm, c.g_idx, c.group);
    const ops::WeightQuant hq = in.host_quant(c.zeros, c.perm, c.g_idx, c.group);
    HostTensor bias = random_tensor(DType::kBF16, {c.n}, rng);
    DeviceTensor d_bias(bias);
    for (DType act : {DType::kBF16, DType::kF16, DType::kF32})  // bf16/f16 at M <= 16: the skinny kernel; f32: GEMV
      for (int64_t m : {1, 3, 8, 9, 16, 17, 100}) {
        HostTensor x = random_tensor(act, {m, c.k}, rng);
        HostTensor want(act, {m, c.n});
        ref().matmul({x.view(), in.codes.view(), bias.view(), want.view(), hq});
        DeviceTensor d_x(x), d_out(want);
        d_out.poison();
        gpu().matmul({d_x.view(), dev.codes.view(), d_bias.view(), d_out.view(), dq});
        EXPECT_TRUE(all_close(d_out.to_host(), want, act == DType::kF32 ? 1e-4 : -1))
            << dtype_name(c.codes) << " N " << c.n << " K " << c.k << " G " << c.group << (c.zeros ? " zeros" : "")
            << (c.perm ? " perm" : "") << (c.g_idx ? " g_idx" : "") << " act " << dtype_name(act) << " M " << m;
      }
  }
}

// int4 and uint8 codes on the skinny kernel's factored path fold integer zeros into the code conversion (c - z
// exactly); zeros that are not integers, in some groups only, keep the zero's sums apart for the chunks that hold
// them. Both against the ref backend on every element, and rows of every M <= 16 bitwise the same.
TEST(CudaQuantMatmul, FoldedAndUnfoldedZerosMatchRef) {
  std::mt19937 rng(23);
  const int64_t n = 272, k = 1024, group = 128;
  for (DType codes : {DType::kI4, DType::kU8}) {
    for (bool integral : {true, false}) {
      QuantInputs in = make_inputs(codes, n, k, group, rng);
      if (!integral)
        for (int64_t i = 0; i < in.zeros.numel(); i += 3) in.zeros.set(i, in.zeros.get(i) + 0.37);
      const DeviceQuant dev(in);
      const ops::WeightQuant dq = dev.quant(true, false, false, group), hq = in.host_quant(true, false, false, group);
      for (DType act : {DType::kBF16, DType::kF16}) {
        HostTensor x = random_tensor(act, {16, k}, rng);
        DeviceTensor d_x(x);
        HostTensor full;
        for (int64_t m : {16, 1, 5, 9}) {
          HostTensor want(act, {m, n});
          HostTensor xm(act, {m, k});
          std::copy(x.bytes.begin(), x.bytes.begin() + static_cast<std::ptrdiff_t>(xm.bytes.size()), xm.bytes.begin());
          ref().matmul({xm.view(), in.codes.view(), TensorView(), want.view(), hq});
          DeviceTensor d_out(want);
          d_out.poison();
          gpu().matmul({d_x.view().slice_rows(0, m), dev.codes.view(), TensorView(), d_out.view(), dq});
          const HostTensor got = d_out.to_host();
          EXPECT_TRUE(all_close(got, want)) << dtype_name(codes) << (integral ? " integer" : " fractional")
                                            << " zeros, " << dtype_name(act) << " M " << m;
          if (m == 16) {
            full = got;
          } else {
            EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), full.bytes.begin())) << "M " << m;
          }
        }
      }
    }
  }
}

// Three blocks an SM or two (the symmetric factored kernels at M <= 8) change how loads are grouped, never a sum's
// order: the same bits, and the ref backend's values; symmetric codes and codes with zeros (two blocks either way),
// K of one round of chunks a warp to many.
TEST(CudaQuantMatmul, ThreeBlocksAnSmGiveTheSameBits) {
  std::mt19937 rng(24);
  struct Shape {
    int64_t k;
    std::vector<int64_t> ms;
  };
  for (DType codes : {DType::kI4, DType::kU8})
    for (bool zeros : {false, true})
      for (const Shape& shape : {Shape{4096, {1, 2, 4, 5, 8}}, Shape{14336, {1}}, Shape{1024, {8}}}) {
        const int64_t n = 400, k = shape.k, group = zeros ? 256 : 128;
        const QuantInputs in = make_inputs(codes, n, k, group, rng);
        const DeviceQuant dev(in);
        const ops::WeightQuant dq = dev.quant(zeros, false, false, group),
                               hq = in.host_quant(zeros, false, false, group);
        for (DType act : {DType::kBF16, DType::kF16})
          for (int64_t m : shape.ms) {
            HostTensor x = random_tensor(act, {m, k}, rng);
            HostTensor want(act, {m, n});
            ref().matmul({x.view(), in.codes.view(), TensorView(), want.view(), hq});
            DeviceTensor d_x(x);
            HostTensor got[2];
            for (int mode : {0, 1}) {
              cuda::set_skinny_fact3(mode);  // two blocks an SM, then three
              DeviceTensor d_out(want);
              d_out.poison();
              gpu().matmul({d_x.view(), dev.codes.view(), TensorView(), d_out.view(), dq});
              got[mode] = d_out.to_host();
            }
            cuda::set_skinny_fact3(2);  // the default
            const std::string what = std::string(dtype_name(codes)) + (zeros ? " zeros" : " sym") + " K " +
                                     std::to_string(k) + " " + std::string(dtype_name(act)) + " M " +
                                     std::to_string(m);
            EXPECT_TRUE(all_close(got[1], want)) << what;
            EXPECT_TRUE(std::equal(got[0].bytes.begin(), got[0].bytes.end(), got[1].bytes.begin())) << what;
          }
      }
}

TEST(CudaQuantMatmul, RowsDoNotDependOnMWithinAPath) {
  std::mt19937 rng(22);
  for (DType codes : {DType::kI4, DType::kU8}) {
    const int64_t n = 512, k = 1024;
    const QuantInputs in = make_inputs(codes, n, k, 128, rng);
    const DeviceQuant dev(in);
    const ops::WeightQuant dq = dev.quant(false, true, false, 128);
    HostTensor x = random_tensor(DType::kBF16, {256, k}, rng);
    DeviceTensor d_x(x);
    auto run = [&](int64_t m) {
      DeviceTensor d_out(HostTensor(DType::kBF16, {m, n}));
      gpu().matmul({d_x.view().slice_rows(0, m), dev.codes.view(), TensorView(), d_out.view(), dq});
      return d_out.to_host();
    };
    const HostTensor small = run(16);
    for (int64_t m : {1, 2, 5, 8}) {
      const HostTensor got = run(m);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), small.bytes.begin())) << "M " << m;
    }
    // Int4 from w4_path_bound() to 256 is a path of its own (the wide kernel on Hopper, the dequantize path
    // elsewhere): each M is checked against the largest M checked on its side of that bound (one side for uint8).
    const int64_t bound = codes == DType::kI4 ? w4_path_bound() : 257;
    const std::vector<int64_t> ms = {17, 64, 100, 128, 150, 200, 256};
    int64_t top_low = 256;
    for (int64_t m : ms)
      if (m < bound) top_low = m;
    const HostTensor low = run(top_low), high = run(256);
    for (int64_t m : ms) {
      const HostTensor got = run(m);
      const HostTensor& want = m < bound ? low : high;
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), want.bytes.begin())) << "M " << m << " bound " << bound;
    }
  }
}

// A W4A16 case (int4 codes [N, K / 2], groups of `group`, zeros or not) and its weights on both backends, with a
// bias drawn for it (used when `bias`).
struct W4Case { int64_t n, k, group; bool zeros, bias, f32_out; };
struct W4Weights {
  QuantInputs in;
  DeviceQuant dev;
  ops::WeightQuant dq, hq;
  HostTensor bias;
  DeviceTensor d_bias;
  TensorView hb, db;
  W4Weights(const W4Case& c, std::mt19937& rng)
      : in(make_inputs(DType::kI4, c.n, c.k, c.group, rng)),
        dev(in),
        dq(dev.quant(c.zeros, false, false, c.group)),
        hq(in.host_quant(c.zeros, false, false, c.group)),
        bias(random_tensor(DType::kBF16, {c.n}, rng)),
        d_bias(bias),
        hb(c.bias ? bias.view() : TensorView()),
        db(c.bias ? d_bias.view() : TensorView()) {}
};

// W4A16 at 16 < M on the fused tensor-core GEMM (w4_gemm.cuh: on Hopper the warpgroup-MMA kernel, 32- or 64-token
// tiles, up to M = 256; elsewhere, or with PEREGRINE_W4_WGMMA=0, mma.sync's w4_gemm, 32 / 64 / 128 rows, up to 128):
// every element against the ref backend for M across its tile sizes (M = 300 is past either path, on dequantize +
// cuBLASLt; M 160 and 256 on the wide kernel on Hopper), N tails, K
// tails of the 64-wide tile, groups 64 / 128 / per channel, with and without zeros, bf16 and f16 x, bias, f32 out,
// split counts 1 to 8; and rows of M = 17, 33, 64, 100 bitwise equal to the same rows at M = 128.
TEST(CudaQuantMatmul, W4GemmMatchesRefOnEveryElement) {
  std::mt19937 rng(31);
  const W4Case cases[] = {{256, 1024, 128, false, false, false}, {200, 576, 64, true, true, false},
                          {1000, 512, 512, true, true, false},   {384, 2048, 128, true, false, true},
                          {136, 4096, 128, true, false, false},  {72, 4096, 4096, false, true, false}};
  for (const W4Case& c : cases) {
    const W4Weights wt(c, rng);
    const QuantInputs& in = wt.in;
    const DeviceQuant& dev = wt.dev;
    const ops::WeightQuant &dq = wt.dq, &hq = wt.hq;
    const TensorView hb = wt.hb, db = wt.db;
    for (DType act : {DType::kBF16, DType::kF16})
      for (int64_t m : {17, 33, 64, 100, 128, 160, 256, 300}) {
        HostTensor x = random_tensor(act, {m, c.k}, rng);
        HostTensor want(c.f32_out ? DType::kF32 : act, {m, c.n});
        ref().matmul({x.view(), in.codes.view(), hb, want.view(), hq});
        DeviceTensor d_x(x), d_out(want);
        d_out.poison();
        gpu().matmul({d_x.view(), dev.codes.view(), db, d_out.view(), dq});
        // f32 out: on the 64-token fused kernels (below w4_path_bound(), at most 128) f32 sums of exact codes times
        // x against the ref's doubles; past it x's dtype's bound, as the wide kernel and the dequantize path round W
        // first.
        const int64_t exact_to = std::min<int64_t>(128, w4_path_bound() - 1);
        EXPECT_TRUE(all_close(d_out.to_host(), want, c.f32_out ? (m <= exact_to ? 1e-3 : default_rtol(act)) : -1))
            << "N " << c.n << " K " << c.k << " G " << c.group << (c.zeros ? " zeros" : "") << (c.bias ? " bias" : "")
            << " act " << dtype_name(act) << " M " << m;
      }
  }
}

// The stream-K form of the wide kernel (Hopper, 64 < M <= 256; by its cost rule only large shapes such as the 8B
// gate/up take it, so here it is forced on every shape): each (row tile, K tile) run of a block, tiles shared between
// blocks through the workspace and the flags — with one-tile runs, a tile of K = 4096 is 64 segments — every
// element against the ref backend (x's dtype's bound: W rounded first, as the wide kernel), zeros, bias, f32 out,
// N tails; rows bitwise equal for every M of the path; and a second launch of each (the flags it leaves zero).
TEST(CudaQuantMatmul, W4GemmStreamKMatchesRefOnEveryElement) {
  if (!on_hopper() || w4_path_bound() > 256) GTEST_SKIP() << "no wide path on this device / with these switches";
  struct Restore {
    ~Restore() { cuda::w4_wgmma_streamk_mode(-1); }
  } restore;
  cuda::w4_wgmma_streamk_mode(1);
  std::mt19937 rng(37);
  const W4Case cases[] = {{256, 1024, 128, false, false, false}, {200, 576, 64, true, true, false},
                          {1000, 512, 512, true, true, true}, {136, 4096, 128, true, false, false}};
  for (const W4Case& c : cases) {
    const W4Weights wt(c, rng);
    const QuantInputs& in = wt.in;
    const DeviceQuant& dev = wt.dev;
    const ops::WeightQuant &dq = wt.dq, &hq = wt.hq;
    const TensorView hb = wt.hb, db = wt.db;
    for (DType act : {DType::kBF16, DType::kF16}) {
      HostTensor x = random_tensor(act, {256, c.k}, rng);
      DeviceTensor d_x(x);
      const DType out_dtype = c.f32_out ? DType::kF32 : act;
      auto run = [&](int64_t m) {
        DeviceTensor d_out(HostTensor(out_dtype, {m, c.n}));
        d_out.poison();
        gpu().matmul({d_x.view().slice_rows(0, m), dev.codes.view(), db, d_out.view(), dq});
        return d_out.to_host();
      };
      const HostTensor top = run(256);
      for (int64_t m : {65, 100, 128, 160, 256}) {
        if (m < w4_path_bound()) continue;  // PEREGRINE_W4_WG_WIDE_FROM puts it on the 64-token kernels
        HostTensor xm = random_tensor(act, {m, c.k}, rng);
        std::copy(x.bytes.begin(), x.bytes.begin() + static_cast<std::ptrdiff_t>(xm.bytes.size()), xm.bytes.begin());
        HostTensor want(out_dtype, {m, c.n});
        ref().matmul({xm.view(), in.codes.view(), hb, want.view(), hq});
        const HostTensor got = run(m);
        const std::string what = "N " + std::to_string(c.n) + " K " + std::to_string(c.k) + " G " +
                                 std::to_string(c.group) + " act " + std::string(dtype_name(act)) + " M " + std::to_string(m);
        EXPECT_TRUE(all_close(got, want, c.f32_out ? default_rtol(act) : -1)) << what;
        EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), top.bytes.begin())) << what << ": rows vs M 256";
      }
    }
  }
}

TEST(CudaQuantMatmul, W4GemmRowsDoNotDependOnM) {
  std::mt19937 rng(32);
  struct Case { int64_t n, k, group; bool zeros; DType act; };
  const Case cases[] = {{512, 1024, 128, false, DType::kBF16}, {200, 4096, 64, true, DType::kF16},
                        {4096, 512, 512, true, DType::kBF16}};
  for (const Case& c : cases) {
    const QuantInputs in = make_inputs(DType::kI4, c.n, c.k, c.group, rng);
    const DeviceQuant dev(in);
    const ops::WeightQuant dq = dev.quant(c.zeros, false, false, c.group);
    HostTensor x = random_tensor(c.act, {128, c.k}, rng);
    DeviceTensor d_x(x);
    auto run = [&](int64_t m) {
      DeviceTensor d_out(HostTensor(c.act, {m, c.n}));
      gpu().matmul({d_x.view().slice_rows(0, m), dev.codes.view(), TensorView(), d_out.view(), dq});
      return d_out.to_host();
    };
    // From w4_path_bound() on (below 129 on Hopper) M runs the wide kernel, a path of its own: each M is checked
    // against the largest on its side.
    const int64_t from = w4_path_bound();
    const HostTensor large = run(128);
    const HostTensor below = from <= 128 ? run(from - 1) : large;
    for (int64_t m : {17, 33, 64, 100}) {
      const HostTensor got = run(m);
      const HostTensor& want = m >= from ? large : below;
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), want.bytes.begin()))
          << "N " << c.n << " K " << c.k << " G " << c.group << " M " << m;
    }
  }
}

// Timing, not a check (run by hand: --gtest_also_run_disabled_tests): W4A16 g128 at the Llama-3-8B projection
// shapes beside bf16 weights through the same Backend::matmul, M 32..1024, each the median of graph replays with
// weights rotated past L2. PEREGRINE_W4_MMA=0 in the environment times the dequantize + cuBLASLt path instead,
// PEREGRINE_W4_WGMMA=0 mma.sync's w4_gemm instead of the warpgroup-MMA kernel (Hopper).
TEST(CudaQuantMatmul, DISABLED_W4GemmTiming) {
  struct Shape { const char* name; int64_t n, k; };
  const Shape shapes[] = {{"q/o", 4096, 4096}, {"k/v", 1024, 4096}, {"gate/up", 14336, 4096}, {"down", 4096, 14336}};
  const int64_t per_layer[] = {2, 2, 2, 1};
  const int64_t ms[] = {32, 64, 128, 256, 512, 1024};
  uint64_t st = 0x9e3779b97f4a7c15ull;
  auto fill = [&](DeviceBuffer& b, bool bf16_weights) {
    std::vector<uint64_t> h((b.bytes() + 7) / 8);
    for (auto& v : h) {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      v = bf16_weights ? (st & 0x3c7f3c7f3c7f3c7full) : st;  // bf16: |w| < 2^-6, finite
    }
    gpu().copy_from_host(b.data(), h.data(), b.bytes());
  };
  auto time_us = [&](int calls, const std::function<void(int)>& body) {
    for (int i = 0; i < calls; ++i) body(i);
    gpu().synchronize();
    const int64_t graph = gpu().capture_graph([&] {
      for (int i = 0; i < calls; ++i) body(i);
    });
    std::vector<double> us;
    for (int r = 0; r < 5; ++r) {
      gpu().synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      gpu().replay_graph(graph);
      gpu().synchronize();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
    gpu().destroy_graph(graph);
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  const char* env = std::getenv("PEREGRINE_W4_MMA");
  const char* wg = std::getenv("PEREGRINE_W4_WGMMA");
  std::printf("| shape | N x K | M | W4A16%s us | bf16 us | bf16 / W4 |\n| --- | --- | --- | --- | --- | --- |\n",
              env && std::string(env) == "0" ? " (dequantize + cuBLASLt)"
              : wg && std::string(wg) == "0" ? " (w4_gemm, mma.sync)" : "");
  std::vector<double> layer_w4(std::size(ms)), layer_bf(std::size(ms));
  // PEREGRINE_W4_TIMING_M=m times that M alone on the first shape, or on PEREGRINE_W4_TIMING_SHAPE's (a name above),
  // for a profiler's first launches.
  const char* only_m = std::getenv("PEREGRINE_W4_TIMING_M");
  const char* only_shape = std::getenv("PEREGRINE_W4_TIMING_SHAPE");
  for (size_t si = 0; si < std::size(shapes); ++si) {
    const Shape& sh = shapes[si];
    if (only_m && (only_shape ? std::string(only_shape) != sh.name : si > 0)) continue;
    const int64_t groups = sh.k / 128;
    const size_t code_bytes = static_cast<size_t>(sh.n * sh.k / 2), w_bytes = static_cast<size_t>(sh.n * sh.k * 2);
    const int w4_sets = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / code_bytes, 2, 8));
    const int bf_sets = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / w_bytes, 2, 8));
    std::vector<DeviceBuffer> codes, scales, ws;
    for (int i = 0; i < w4_sets; ++i) {
      codes.emplace_back(gpu(), code_bytes);
      fill(codes.back(), false);
      HostTensor sc(DType::kF32, {sh.n, groups});
      for (int64_t j = 0; j < sh.n * groups; ++j) sc.set(j, 1e-3 * (1 + j % 7));
      scales.emplace_back(gpu(), sc.bytes.size());
      gpu().copy_from_host(scales.back().data(), sc.bytes.data(), sc.bytes.size());
    }
    for (int i = 0; i < bf_sets; ++i) {
      ws.emplace_back(gpu(), w_bytes);
      fill(ws.back(), true);
    }
    for (size_t mi = 0; mi < std::size(ms); ++mi) {
      const int64_t m = ms[mi];
      if (only_m && m != std::atoll(only_m)) continue;
      DeviceBuffer x(gpu(), static_cast<size_t>(m * sh.k * 2)), out(gpu(), static_cast<size_t>(m * sh.n * 2));
      fill(x, true);
      const double w4 = time_us(w4_sets * 3, [&](int i) {
        ops::WeightQuant q;
        q.scales = scales[i % w4_sets].view(DType::kF32, {sh.n, groups});
        q.group_size = 128;
        gpu().matmul({x.view(DType::kBF16, {m, sh.k}), codes[i % w4_sets].view(DType::kI4, {sh.n, sh.k}), TensorView(),
                      out.view(DType::kBF16, {m, sh.n}), q});
      });
      const double bf = time_us(bf_sets * 3, [&](int i) {
        gpu().matmul({x.view(DType::kBF16, {m, sh.k}), ws[i % bf_sets].view(DType::kBF16, {sh.n, sh.k}), TensorView(),
                      out.view(DType::kBF16, {m, sh.n})});
      });
      layer_w4[mi] += per_layer[si] * w4;
      layer_bf[mi] += per_layer[si] * bf;
      std::printf("| %s | %lldx%lld | %lld | %.1f | %.1f | %.2f |\n", sh.name, static_cast<long long>(sh.n),
                  static_cast<long long>(sh.k), static_cast<long long>(m), w4, bf, bf / w4);
      std::fflush(stdout);
    }
  }
  for (size_t mi = 0; mi < std::size(ms); ++mi)
    std::printf("| 8B layer (q,k,v,o,gate,up,down) | | %lld | %.1f | %.1f | %.2f |\n", static_cast<long long>(ms[mi]),
                layer_w4[mi], layer_bf[mi], layer_bf[mi] / layer_w4[mi]);
}

// q/k/v and gate/up of a W4A16 / W8A16 model go as one skinny launch (Backend::matmuls): each output bitwise equal
// to its own matmul's, on the factored (group 128) and the dequantize-per-code (group 64) paths, with and without
// zero points and bias; past M = 16 the group falls back to one matmul each.
TEST(CudaQuantMatmul, GroupedMatmulsEqualSeparateOnes) {
  std::mt19937 rng(23);
  for (DType codes : {DType::kI4, DType::kU8})
    for (int64_t group : {128, 64})
      for (bool zeros : {false, true})
        for (int64_t m : {1, 9, 16, 20}) {
          const int64_t k = 1024;
          const int64_t ns[3] = {512, 128, 144};
          std::vector<QuantInputs> in;
          std::vector<DeviceTensor> d_codes, d_scales, d_zeros, d_bias, d_sep, d_grp;
          for (int64_t n : ns) {
            in.push_back(make_inputs(codes, n, k, group, rng));
            d_codes.emplace_back(in.back().codes);
            d_scales.emplace_back(in.back().scales);
            d_zeros.emplace_back(in.back().zeros);
            d_bias.emplace_back(random_tensor(DType::kBF16, {n}, rng));
            d_sep.emplace_back(HostTensor(DType::kBF16, {m, n}));
            d_grp.emplace_back(HostTensor(DType::kBF16, {m, n}));
            d_grp.back().poison();
          }
          HostTensor x = random_tensor(DType::kBF16, {m, k}, rng);
          DeviceTensor d_x(x);
          std::vector<ops::MatmulParams> sep, grp;
          for (size_t i = 0; i < 3; ++i) {
            ops::WeightQuant q;
            q.scales = d_scales[i].view();
            if (zeros) q.zeros = d_zeros[i].view();
            q.group_size = group;
            const TensorView b = i == 1 ? d_bias[i].view() : TensorView();
            sep.push_back({d_x.view(), d_codes[i].view(), b, d_sep[i].view(), q});
            grp.push_back({d_x.view(), d_codes[i].view(), b, d_grp[i].view(), q});
          }
          for (const ops::MatmulParams& p : sep) gpu().matmul(p);
          gpu().matmuls(grp);
          for (size_t i = 0; i < 3; ++i)
            EXPECT_TRUE(bitwise_equal(d_grp[i].to_host(), d_sep[i].to_host()))
                << dtype_name(codes) << " G " << group << (zeros ? " zeros" : "") << " M " << m << " segment " << i;
        }
}

}  // namespace
}  // namespace peregrine::cuda_test
