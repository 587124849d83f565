// OutputStream: where the engine loop thread leaves streamed RequestOutput deltas for Python. The loop thread only
// locks a mutex, appends and (when the queue was empty) writes to an eventfd, so it never waits for the GIL;
// asyncio watches fileno() with loop.add_reader and drains the queue on its own thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "peregrine/outputs.h"

namespace peregrine::python {

class OutputStream {
 public:
  OutputStream();  // throws Error(kResourceExhausted) when no eventfd can be made
  ~OutputStream();
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;

  // Readable while deltas are waiting.
  int fileno() const { return fd_; }
  // Engine loop thread.
  void push(RequestOutput&& delta);
  // Everything waiting, oldest first; empties the queue and the eventfd.
  std::vector<RequestOutput> drain();
  // Blocks until something is waiting or timeout_s passes (call without the GIL). True when non-empty.
  bool wait(double timeout_s);

 private:
  int fd_ = -1;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
};

}  // namespace peregrine::python
