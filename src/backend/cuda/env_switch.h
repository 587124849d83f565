// A process-wide on/off switch for a form of a kernel that waits for its measurements: read once from the environment
// (NAME=1 on; unset or anything else off) and settable by tests, which run both forms in one process and compare.
#pragma once

#include <atomic>
#include <cstdlib>

namespace peregrine::cuda {

class EnvSwitch {
 public:
  explicit EnvSwitch(const char* name) : name_(name) {}
  bool on() {
    int mode = mode_.load(std::memory_order_relaxed);
    if (mode < 0) {
      mode = from_env();
      mode_.store(mode, std::memory_order_relaxed);
    }
    return mode == 1;
  }
  // 1 on, 0 off, anything else back to the environment.
  void set(int mode) { mode_.store(mode == 0 || mode == 1 ? mode : from_env(), std::memory_order_relaxed); }

 private:
  int from_env() const {
    const char* v = std::getenv(name_);
    return v && std::atoi(v) == 1 ? 1 : 0;
  }
  const char* name_;
  std::atomic<int> mode_{-1};  // not yet read
};

}  // namespace peregrine::cuda
