// The CUDA decode attention's split policy (src/backend/cuda/decode_splits.h) is plain C++: checked here on the host.
#include "backend/cuda/decode_splits.h"

#include <gtest/gtest.h>

namespace peregrine::cuda {
namespace {

struct Split {
  int splits, per;
};
Split split(int n_tiles, int min_tiles, int max_splits, int kv_heads, int wave_ctas) {
  Split s{};
  s.splits = decode_num_splits(n_tiles, min_tiles, max_splits, kv_heads, wave_ctas, &s.per);
  return s;
}
// For the sequence alone: waves taken x (tiles a split + the fixed cost), in quarter tiles.
int64_t alone_cost(Split s, int kv_heads, int wave_ctas) {
  const int64_t waves = (static_cast<int64_t>(kv_heads) * s.splits + wave_ctas - 1) / wave_ctas;
  return waves * (4 * s.per + kDecodeSplitCostQuarters);
}

TEST(DecodeSplits, FirstRuleWithoutWaves) {
  EXPECT_EQ(split(1, 4, 64, 8, 0).splits, 1);
  EXPECT_EQ(split(16, 4, 64, 8, 0).splits, 4);   // 1K keys: 4 splits of 4 tiles
  EXPECT_EQ(split(17, 4, 64, 8, 0).splits, 5);
  const Split s32k = split(512, 4, 64, 8, 0);    // 32K keys: the 64-split cap
  EXPECT_EQ(s32k.splits, 64);
  EXPECT_EQ(s32k.per, 8);
}

TEST(DecodeSplits, LongSequenceAloneFillsOneWave) {
  // 8 KV heads, 396 CTAs at once (132 SMs x 3): 32K keys take 47 splits of 11 tiles (376 CTAs, one wave) rather
  // than 64 of 8 (512 CTAs, two waves); 16K keys 43 of 6.
  const Split a = split(512, 4, 64, 8, 396);
  EXPECT_EQ(a.per, 11);
  EXPECT_EQ(a.splits, 47);
  const Split b = split(256, 4, 64, 8, 396);
  EXPECT_EQ(b.per, 6);
  EXPECT_EQ(b.splits, 43);
  // Sequences that fit one wave under the first rule keep it.
  for (int n : {1, 16, 100, 196}) {
    EXPECT_EQ(split(n, 4, 64, 8, 396).splits, split(n, 4, 64, 8, 0).splits) << n;
  }
}

TEST(DecodeSplits, TheFixedCostWeighsSplitsAgainstWaves) {
  // 245 tiles, 16 KV heads, 396 CTAs at once: one wave of 11-tile splits (4 x 11 + c quarters), two of 5-tile splits
  // (2 x (4 x 5 + c)) or three of 4 (3 x (16 + c)). Two waves win while a split's fixed cost is under a tile.
  int per = 0;
  EXPECT_EQ(decode_num_splits(245, 4, 64, 16, 396, &per, 0), 49);
  EXPECT_EQ(per, 5);
  decode_num_splits(245, 4, 64, 16, 396, &per);  // the default: half a tile
  EXPECT_EQ(per, 5);
  EXPECT_EQ(decode_num_splits(245, 4, 64, 16, 396, &per, 8), 23);  // two tiles: one wave
  EXPECT_EQ(per, 11);
}

TEST(DecodeSplits, NeverMoreSplitsThanTheBoundAndNeverCostlierAlone) {
  for (int wave : {0, 132, 396, 528}) {
    for (int heads : {1, 2, 4, 8, 32}) {
      for (int min_tiles : {2, 4, 8}) {
        for (int max_splits : {64, 256}) {
          for (int n = 1; n <= 4096; n += (n < 600 ? 1 : 37)) {
            const Split s = split(n, min_tiles, max_splits, heads, wave);
            const Split first = split(n, min_tiles, max_splits, heads, 0);
            ASSERT_GE(s.per, 1);
            ASSERT_LE(s.splits, decode_split_bound(n, min_tiles, max_splits));
            ASSERT_GE(s.splits * s.per, n);        // every tile in some split
            ASSERT_LT((s.splits - 1) * s.per, n);  // and no split empty
            ASSERT_GE(s.per, first.per);
            if (wave > 0) {
              ASSERT_LE(alone_cost(s, heads, wave), alone_cost(first, heads, wave)) << n;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace peregrine::cuda
