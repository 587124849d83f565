// Default implementations of the Backend's optional services (host backends).
#include "ops/backend.h"

#include <chrono>
#include <cstring>

#include "core/status.h"
#include "ops/host_memory.h"

namespace peregrine::ops {

void* Backend::allocate_pinned(size_t bytes) { return host_allocate(bytes); }
void Backend::deallocate_pinned(void* ptr) { host_deallocate(ptr); }
DeviceBuffer Backend::pack_weight(const TensorView&, const WeightQuant&) { return {}; }

int64_t Backend::capture_graph(const std::function<void()>&) {
  throw Error(ErrorCode::kUnsupported, name() + ": graph capture is not supported");
}
void Backend::replay_graph(int64_t) { throw Error(ErrorCode::kUnsupported, name() + ": graph replay is not supported"); }
void Backend::destroy_graph(int64_t) {}

void Backend::sample(const SampleParams&) {
  throw Error(ErrorCode::kUnsupported, name() + ": sampling on the backend is not supported");
}

bool Backend::fuses_matmuls(std::span<const MatmulParams>, const MatmulFusion&) const { return false; }
void Backend::matmuls_fused(std::span<const MatmulParams>, const MatmulFusion&) {
  throw Error(ErrorCode::kUnsupported, name() + ": fused matmuls are not supported");
}

void Backend::rope_kv_write(const RopeParams& r, const KvWriteParams& kv) {
  rope(r);
  kv_write(kv);
}

uint64_t Backend::copy_async(CopyDirection direction, std::span<const CopyRegion> regions) {
  // Host memory on both sides: ordered after prior work by finishing it first.
  synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (const CopyRegion& r : regions) {
    if (r.bytes) std::memcpy(r.dst, r.src, r.bytes);
    bytes += r.bytes;
  }
  const int d = static_cast<int>(direction);
  transfer_totals_.bytes[d] += bytes;
  transfer_totals_.seconds[d] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ++host_transfers_;
}
bool Backend::transfer_done(uint64_t) { return true; }
void Backend::wait_transfer(uint64_t) {}
void Backend::compute_waits_for(uint64_t) {}

}  // namespace peregrine::ops
