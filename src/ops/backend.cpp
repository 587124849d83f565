// Default implementations of the Backend's optional services (host backends).
#include "ops/backend.h"

#include "core/status.h"
#include "ops/host_memory.h"

namespace peregrine::ops {

void* Backend::allocate_pinned(size_t bytes) { return host_allocate(bytes); }
void Backend::deallocate_pinned(void* ptr) { host_deallocate(ptr); }

int64_t Backend::capture_graph(const std::function<void()>&) {
  throw Error(ErrorCode::kUnsupported, name() + ": graph capture is not supported");
}
void Backend::replay_graph(int64_t) { throw Error(ErrorCode::kUnsupported, name() + ": graph replay is not supported"); }
void Backend::destroy_graph(int64_t) {}

}  // namespace peregrine::ops
