// OutputStream (see streams.h).
#include "streams.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "peregrine/error.h"

namespace peregrine::python {

OutputStream::OutputStream() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw Error(ErrorCode::kResourceExhausted, std::string("eventfd: ") + std::strerror(errno));
}

OutputStream::~OutputStream() {
  if (fd_ >= 0) close(fd_);
}

void OutputStream::push(RequestOutput&& delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool was_empty = queue_.empty();
  queue_.push_back(std::move(delta));
  if (was_empty) {
    // Under the lock, so the fd is readable exactly while the queue is not empty. Non-blocking.
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof one);
    ready_.notify_all();
  }
}

std::vector<RequestOutput> OutputStream::drain() {
  std::deque<RequestOutput> taken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taken.swap(queue_);
    uint64_t count = 0;
    // Cleared under the lock, so a push after it writes again.
    [[maybe_unused]] const ssize_t n = read(fd_, &count, sizeof count);
  }
  return std::vector<RequestOutput>(std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
}

bool OutputStream::wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  return ready_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return !queue_.empty(); });
}

}  // namespace peregrine::python
