// The decode attention kernel's split policy (attention_decode.cu), plain C++ so host code and tests share it with
// the device: how many splits (each a run of 64-key tiles) a decoding sequence's keys are cut into. Every input is a
// property of the sequence (its tiles), the model (KV heads, cache dtype) or the device (how many CTAs it runs at
// once), never of the batch, so a sequence's splits -- and its result's bits -- are the same alone and in any batch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PEREGRINE_HD __host__ __device__
#else
#define PEREGRINE_HD
#endif

namespace peregrine::cuda {

constexpr int kDecodeTileKeys = 64;
constexpr int kDecodeMaxSplits = 64;
constexpr int kDecodeSplitsLimit = 256;  // the combine kernel's shared weights hold this many a row
// Four tiles a split trade batch 1 for batches 8-64: two were +2-5% at bs 1 and -1.5-2% at bs 8-64 on the H100 (8B
// shape, 1K context; one tile -11% at bs 64; docs/BENCHMARKS.md, 2026-12-06).
constexpr int kDecodeMinTilesPerSplit = 4;
// A split's fixed costs (Q, the pipeline's fill, the warps' merge, its partial and its share of the combine) in
// quarters of a tile, for the wave rule below: half a tile.
constexpr int kDecodeSplitCostQuarters = 2;

// The most splits the first rule gives: one per min_tiles tiles, at most max_splits, at least one.
PEREGRINE_HD inline int decode_split_bound(int n_tiles, int min_tiles, int max_splits) {
  int s = (n_tiles + min_tiles - 1) / min_tiles;
  return s < 1 ? 1 : (s > max_splits ? max_splits : s);
}

// Splits for a sequence of n_tiles KV tiles; every split takes tiles_per_split tiles (the last fewer), never more
// splits than decode_split_bound. First rule: as many splits as that bound. The wave rule (wave_ctas > 0, the CTAs
// the device runs at once): where the sequence alone -- kv_heads CTAs a split -- would fill more than one wave of
// them, the split size is the one whose waves x (tiles a split + its fixed cost) is least for the sequence alone
// (ties: fewer splits; cost_quarters: that fixed cost, for comparisons), so a long sequence decoding alone does not
// leave most of its last wave idle (32K keys at 8 KV heads: 47 splits of 11 tiles in one wave of 396 CTAs instead of
// 64 of 8 in two).
PEREGRINE_HD inline int decode_num_splits(int n_tiles, int min_tiles, int max_splits, int kv_heads, int wave_ctas,
                                          int* tiles_per_split, int cost_quarters = kDecodeSplitCostQuarters) {
  const int bound = decode_split_bound(n_tiles, min_tiles, max_splits);
  const int p0 = (n_tiles + bound - 1) / bound < 1 ? 1 : (n_tiles + bound - 1) / bound;
  int per = p0;
  if (wave_ctas > 0 && kv_heads > 0 && static_cast<int64_t>(kv_heads) * ((n_tiles + p0 - 1) / p0) > wave_ctas) {
    int64_t best = -1;
    for (int w = 1;; ++w) {
      // The largest split count that w waves hold, and the tiles a split then takes (never fewer than p0).
      int64_t sw = static_cast<int64_t>(w) * wave_ctas / kv_heads;
      if (sw < 1) sw = 1;
      int p = static_cast<int>((n_tiles + sw - 1) / sw);
      if (p < p0) p = p0;
      const int64_t splits = (n_tiles + p - 1) / p;
      const int64_t waves = (kv_heads * splits + wave_ctas - 1) / wave_ctas;
      const int64_t cost = waves * (4 * static_cast<int64_t>(p) + cost_quarters);
      if (best < 0 || cost < best) {
        best = cost;
        per = p;
      }
      if (p == p0) break;
    }
  }
  *tiles_per_split = per;
  return (n_tiles + per - 1) / per;
}

}  // namespace peregrine::cuda
