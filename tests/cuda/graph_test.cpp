// CUDA graph capture and pinned staging (CudaBackend services): a decode-like step (pinned inputs copied
// in, rms_norm, matmul, rope, kv_write, attention) captured once and replayed with new inputs must equal
// the same step run eagerly, and run with the host waiting after every op (no programmatic-dependent overlap);
// forbidden calls inside a capture throw and leave the backend usable. Transfers of many small regions (the KV
// tiers' copies, staged through a device buffer) move exactly the bytes direct copies move.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/status.h"
#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

TEST(CudaGraph, ReplayEqualsEagerWithNewInputs) {
  ops::CudaBackend& cuda = gpu_services();
  std::mt19937 rng(81);
  const int batch = 4, hidden = 256, hq = 4, hkv = 1, hd = 64, bs = 16, max_blocks = 64;
  const int num_blocks = batch * max_blocks;
  HostTensor w_norm = random_tensor(DType::kBF16, {hidden}, rng);
  HostTensor w_q = random_tensor(DType::kBF16, {hq * hd, hidden}, rng, 0.06);
  HostTensor w_kv = random_tensor(DType::kBF16, {hkv * hd, hidden}, rng, 0.06);
  HostTensor inv_freq(DType::kF32, {hd / 2});
  for (int i = 0; i < hd / 2; ++i) inv_freq.set(i, std::pow(10000.0, -2.0 * i / hd));
  DeviceTensor d_wn(w_norm), d_wq(w_q), d_wkv(w_kv), d_if(inv_freq);
  DeviceTensor kc(random_tensor(DType::kBF16, {num_blocks, bs, hkv, hd}, rng));
  DeviceTensor vc(random_tensor(DType::kBF16, {num_blocks, bs, hkv, hd}, rng));
  std::vector<int32_t> table(batch * max_blocks);
  for (int i = 0; i < batch * max_blocks; ++i) table[i] = (i * 37) % num_blocks;  // a permutation
  DeviceTensor d_table(int_tensor(table));
  d_table.shape = {batch, max_blocks};

  // Per-step inputs: x [B, hidden] bf16, then positions, slots, seq_lens, qsl as i32, staged in pinned memory.
  const size_t x_bytes = batch * hidden * 2, ints = 4 * batch + 1;
  char* pinned = static_cast<char*>(cuda.allocate_pinned(x_bytes + ints * 4));
  DeviceBuffer d_inputs(gpu(), x_bytes + ints * 4);
  auto view_at = [&](size_t off, DType t, std::initializer_list<int64_t> dims) {
    return TensorView(static_cast<char*>(d_inputs.data()) + off, t, dims);
  };
  TensorView x = view_at(0, DType::kBF16, {batch, hidden});
  TensorView pos = view_at(x_bytes, DType::kI32, {batch});
  TensorView slots = view_at(x_bytes + 4 * batch, DType::kI32, {batch});
  TensorView lens = view_at(x_bytes + 8 * batch, DType::kI32, {batch});
  TensorView qsl = view_at(x_bytes + 12 * batch, DType::kI32, {batch + 1});
  DeviceTensor h(HostTensor(DType::kBF16, {batch, hidden})), q(HostTensor(DType::kBF16, {batch, hq, hd}));
  DeviceTensor kv(HostTensor(DType::kBF16, {batch, hkv, hd})), out(HostTensor(DType::kBF16, {batch, hq, hd}));

  auto fill_inputs = [&](int step) {
    HostTensor xs = random_tensor(DType::kBF16, {batch, hidden}, rng);
    std::memcpy(pinned, xs.bytes.data(), x_bytes);
    int32_t* iv = reinterpret_cast<int32_t*>(pinned + x_bytes);
    for (int b = 0; b < batch; ++b) {
      const int len = 100 + 37 * b + 150 * step;  // grows each step, up to ~ max_blocks * bs
      iv[b] = len - 1;                                                    // position
      iv[batch + b] = table[b * max_blocks + (len - 1) / bs] * bs + (len - 1) % bs;  // slot
      iv[2 * batch + b] = len;                                            // seq_len
      iv[3 * batch + b] = b;                                              // query_start_loc
    }
    iv[4 * batch] = batch;
  };
  // serialized: the host waits after every op, so no kernel overlaps the one before it (the kernels launched as
  // dependents, launch_dependent, otherwise start while their predecessor finishes).
  auto run_step = [&](bool serialized) {
    auto sep = [&] {
      if (serialized) gpu().synchronize();
    };
    cuda.copy_from_host_async(d_inputs.data(), pinned, x_bytes + ints * 4);
    sep();
    gpu().rms_norm({x, TensorView(), d_wn.view(), h.view(), 1e-5f});
    sep();
    gpu().matmul({h.view(), d_wq.view(), TensorView(), q.view().reshaped({batch, hq * hd})});
    sep();
    gpu().matmul({h.view(), d_wkv.view(), TensorView(), kv.view().reshaped({batch, hkv * hd})});
    sep();
    gpu().rope({q.view(), kv.view(), pos, d_if.view(), 1.0f, hd});
    sep();
    gpu().kv_write({kv.view(), kv.view(), slots, kc.view(), vc.view()});
    sep();
    gpu().attention({q.view(), kc.view(), vc.view(), out.view(), qsl, lens, d_table.view(), 0.125f, 0, 1,
                     max_blocks * bs, {}, {}, {}, {}, {}});
    sep();
  };
  auto step = [&] { run_step(false); };

  fill_inputs(0);
  step();  // eager warm-up: plans and workspaces exist before capture
  gpu().synchronize();
  const int64_t graph = cuda.capture_graph(step);
  for (int s = 1; s <= 3; ++s) {
    fill_inputs(s);
    DeviceTensor kc_copy(kc.to_host()), vc_copy(vc.to_host());
    step();  // eager on the current inputs
    HostTensor eager = out.to_host();
    // Restore the caches, then the same step with every op waited for, then the graph replayed.
    auto restore = [&] {
      gpu().copy_on_device(kc.buffer.data(), kc_copy.buffer.data(), kc.buffer.bytes());
      gpu().copy_on_device(vc.buffer.data(), vc_copy.buffer.data(), vc.buffer.bytes());
      out.poison();
    };
    restore();
    run_step(true);
    HostTensor serialized = out.to_host();
    restore();
    cuda.replay_graph(graph);
    HostTensor replayed = out.to_host();
    EXPECT_TRUE(bitwise_equal(eager, replayed)) << "step " << s;
    EXPECT_TRUE(bitwise_equal(serialized, replayed)) << "step " << s;
  }
  cuda.destroy_graph(graph);

  // Calls that cannot be captured throw, and the backend stays usable.
  EXPECT_THROW(cuda.capture_graph([&] { gpu().synchronize(); }), Error);
  EXPECT_THROW(cuda.capture_graph([&] { gpu().copy_from_host(d_inputs.data(), pinned, 16); }), Error);
  step();
  EXPECT_NO_THROW(gpu().synchronize());
  cuda.deallocate_pinned(pinned);
}

// Many small regions each way, of every size and alignment (a KV block's pages, odd sizes, unaligned starts, runs
// that continue each other on one side only, one region larger than the staging buffer), across several staging
// rounds (over 64 MiB in all): every byte lands where a direct copy would put it, and nothing else is touched.
TEST(CudaCopies, ManySmallRegionsMoveExactlyEachWay) {
  Backend& dev = gpu();
  std::mt19937_64 rng(2026);
  const size_t device_bytes = size_t{200} << 20, host_bytes = size_t{200} << 20;
  DeviceBuffer d_src(dev, device_bytes), d_back(dev, device_bytes);
  auto* h = static_cast<std::byte*>(dev.allocate_pinned(host_bytes));
  std::vector<std::byte> want_host(host_bytes), src(device_bytes);
  for (size_t i = 0; i < device_bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(src.data() + i, &v, 8);
  }
  dev.copy_from_host(d_src.data(), src.data(), device_bytes);
  std::memset(h, 0x5a, host_bytes);
  std::memset(want_host.data(), 0x5a, host_bytes);
  // Regions: device offsets scattered, host offsets mostly consecutive (as a host slot lays a block out).
  std::vector<ops::Backend::CopyRegion> down;
  std::vector<std::pair<size_t, size_t>> spans;  // (device offset, host offset) per region, with its size below
  std::vector<size_t> sizes;
  size_t host_at = 0;
  std::uniform_int_distribution<int> kind(0, 9);
  while (host_at < host_bytes - (size_t{72} << 20)) {
    const int k = kind(rng);
    size_t n = k < 6 ? 32768 : k < 8 ? 1 + rng() % 70000 : k == 8 ? 16 * (1 + rng() % 4096) : 1 + rng() % 15;
    if (spans.size() == 500) n = size_t{65} << 20;  // larger than the staging buffer: a DMA copy of its own
    const size_t dev_at = (rng() % ((device_bytes - n) / 16)) * 16 + (k == 7 ? rng() % 16 : 0);
    if (kind(rng) == 0) host_at += 1 + rng() % 4096;  // a gap on the host side now and then
    if (host_at + n > host_bytes) break;
    down.push_back({h + host_at, static_cast<std::byte*>(d_src.data()) + dev_at, n});
    spans.emplace_back(dev_at, host_at);
    sizes.push_back(n);
    std::memcpy(want_host.data() + host_at, src.data() + dev_at, n);
    host_at += n;
  }
  ASSERT_GT(down.size(), 2000u);
  dev.wait_transfer(dev.copy_async(ops::Backend::CopyDirection::kDeviceToHost, down));
  size_t wrong = 0;
  for (size_t i = 0; i < host_bytes; ++i) wrong += h[i] != want_host[i] ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << "bytes wrong on the host after the copy down";
  // Back up into a second buffer at the same device offsets (regions overlapping on the device are dropped, so the
  // expected content is well defined).
  std::vector<std::byte> want_back(device_bytes, std::byte{0x33}), mark(device_bytes, std::byte{0});
  std::vector<ops::Backend::CopyRegion> up;
  for (size_t r = 0; r < spans.size(); ++r) {
    const auto [dev_at, h_at] = spans[r];
    const auto first = mark.begin() + static_cast<ptrdiff_t>(dev_at);
    if (std::any_of(first, first + static_cast<ptrdiff_t>(sizes[r]), [](std::byte b) { return b != std::byte{0}; }))
      continue;
    std::memset(mark.data() + dev_at, 1, sizes[r]);
    up.push_back({static_cast<std::byte*>(d_back.data()) + dev_at, h + h_at, sizes[r]});
    std::memcpy(want_back.data() + dev_at, h + h_at, sizes[r]);
  }
  ASSERT_GT(up.size(), 1000u);
  std::vector<std::byte> fill(device_bytes, std::byte{0x33});
  dev.copy_from_host(d_back.data(), fill.data(), device_bytes);
  dev.wait_transfer(dev.copy_async(ops::Backend::CopyDirection::kHostToDevice, up));
  std::vector<std::byte> back(device_bytes);
  dev.copy_to_host(back.data(), d_back.data(), device_bytes);
  wrong = 0;
  for (size_t i = 0; i < device_bytes; ++i) wrong += back[i] != want_back[i] ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << "bytes wrong on the device after the copy up";
  dev.deallocate_pinned(h);
}

}  // namespace
}  // namespace peregrine::cuda_test
