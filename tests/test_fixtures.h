// Locating the shared test fixtures (../shared next to the checkout, or $PEREGRINE_SHARED_DIR).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>

namespace peregrine::testing {

inline std::optional<std::filesystem::path> shared_dir() {
  if (const char* env = std::getenv("PEREGRINE_SHARED_DIR")) {
    std::filesystem::path p(env);
    if (std::filesystem::is_directory(p / "models")) return p;
  }
  std::filesystem::path p = std::filesystem::path(PEREGRINE_SOURCE_DIR) / ".." / "shared";
  if (std::filesystem::is_directory(p / "models")) return p;
  return std::nullopt;
}

inline std::filesystem::path source_dir() { return PEREGRINE_SOURCE_DIR; }

}  // namespace peregrine::testing

#define PEREGRINE_REQUIRE_SHARED(var)                                                     \
  auto var##_opt = ::peregrine::testing::shared_dir();                                   \
  if (!var##_opt) GTEST_SKIP() << "../shared (test fixtures) is absent; skipping";       \
  const std::filesystem::path var = *var##_opt
