// The GGUF fuzz seeds (tests/fuzz/gguf_seeds, written by tests/fuzz/make_gguf_seeds.py) through the fuzz body, with
// their truncations and a few thousand deterministic mutations: in CI every error path of the reader is reached
// quickly and each must end in a peregrine::Error (the 1M-input libFuzzer run is tests/fuzz/gguf_fuzz.sh).
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "../../fuzz/gguf_fuzz_body.h"
#include "test_fixtures.h"

namespace fs = std::filesystem;

TEST(GgufSeeds, TruncatedAndMutatedSeedsEndInErrors) {
  const fs::path dir = peregrine::testing::source_dir() / "tests" / "fuzz" / "gguf_seeds";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::mt19937_64 rng(17);
  int seeds = 0, parsed = 0, refused = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++seeds;
    EXPECT_EQ(peregrine::fuzz::gguf_one(bytes.data(), bytes.size()), 1) << entry.path() << " must parse";
    // Truncations: every length in the header region, then strided.
    for (size_t n = 0; n < bytes.size(); n += n < 2048 ? 1 : 61) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      (peregrine::fuzz::gguf_one(cut.data(), cut.size()) ? parsed : refused)++;
    }
    // Mutations: 1-4 random bytes set to random or boundary values, mostly within the header.
    for (int m = 0; m < 1500 && !bytes.empty(); ++m) {
      std::vector<uint8_t> mut = bytes;
      const int count = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < count; ++k) {
        const size_t limit = rng() % 4 ? std::min<size_t>(mut.size(), 1024) : mut.size();
        const size_t at = rng() % limit;
        static const uint8_t kValues[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x20, 0x09, 0x0d};
        mut[at] = rng() % 2 ? kValues[rng() % 8] : static_cast<uint8_t>(rng());
      }
      (peregrine::fuzz::gguf_one(mut.data(), mut.size()) ? parsed : refused)++;
    }
  }
  EXPECT_GE(seeds, 6);
  EXPECT_GT(refused, 1000);
  std::printf("%d seeds: %d variants parsed, %d refused with an Error\n", seeds, parsed, refused);
}
