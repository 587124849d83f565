// ProgressBar: redraws at most once per percent.
#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace peregrine::cli {

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) != 0) {}

void ProgressBar::update(size_t done, size_t total) {
  if (!enabled_ || total == 0) return;
  int percent = static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
  if (percent == last_percent_) return;
  last_percent_ = percent;
  const int width = 30, filled = percent * width / 100;
  std::fprintf(stderr, "\r%s [", label_.c_str());
  for (int i = 0; i < width; ++i) std::fputc(i < filled ? '#' : ' ', stderr);
  std::fprintf(stderr, "] %3d%% (%.1f MB)", percent, static_cast<double>(done) / 1e6);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && last_percent_ >= 0) std::fprintf(stderr, "\n");
}

}  // namespace peregrine::cli
