// Generic paged attention over the TU's `Simd`: an item is (sequence, query rows, key segments) over every
// head; each K/V tile (one block: all KV heads of block_size tokens, contiguous) is read once per item and used
// by every query head, with an online softmax per segment. NOTE: include only from a kernels_<isa>.cpp.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/simd_common.h"

namespace {

// Softmax state of nr (row, head) pairs: running max m, running sum l, unnormalised output acc.
struct SoftmaxState {
  float* m;    // [nr]
  float* l;    // [nr]
  float* acc;  // [nr, hd_pad]
};

inline SoftmaxState state_at(float* base, int64_t nr) {
  return {base, base + nr, base + 2 * nr};
}
inline int64_t pad16(int64_t hd) {
  return (hd + 15) / 16 * 16;
}

inline void reset_state(const SoftmaxState& s, int64_t nr, int64_t hd_pad) {
  fill_f(s.m, nr, kNegInf);
  fill_f(s.l, nr, 0.0f);
  fill_f(s.acc, nr * hd_pad, 0.0f);
}

// dst ⊕= src for pair r (src non-empty). The only way states are combined, so every path folds alike.
inline void merge_state(const SoftmaxState& dst, const SoftmaxState& src, int64_t r, int64_t hd_pad) {
  float* da = dst.acc + r * hd_pad;
  const float* sa = src.acc + r * hd_pad;
  if (dst.m[r] == kNegInf) {
    dst.m[r] = src.m[r];
    dst.l[r] = src.l[r];
    for (int64_t d = 0; d < hd_pad; d += kLanes) Simd::store(da + d, Simd::load(sa + d));
    return;
  }
  const float m = max_f(dst.m[r], src.m[r]);
  const float a = exp_s(dst.m[r] - m), b = exp_s(src.m[r] - m);
  dst.l[r] = dst.l[r] * a + src.l[r] * b;
  dst.m[r] = m;
  const V va = Simd::set1(a), vb = Simd::set1(b);
  for (int64_t d = 0; d < hd_pad; d += kLanes)
    Simd::store(da + d, Simd::fma(Simd::load(sa + d), vb, Simd::mul(Simd::load(da + d), va)));
}

// out rows of the item from a final state.
inline void write_out(const peregrine::cpu::AttentionArgs& a, const peregrine::cpu::AttentionItem& it,
                      const SoftmaxState& s, int64_t hd_pad) {
  const int64_t q_start = a.query_start_loc[it.seq];
  for (int64_t i = 0; i < it.row_end - it.row_begin; ++i)
    for (int64_t h = 0; h < a.hq; ++h) {
      const int64_t r = i * a.hq + h;
      float* out = a.out + ((q_start + it.row_begin + i) * a.hq + h) * a.hd;
      const V inv = Simd::set1(1.0f / s.l[r]);
      const float* acc = s.acc + r * hd_pad;
      int64_t d = 0;
      for (; d + kLanes <= a.hd; d += kLanes) Simd::store(out + d, Simd::mul(Simd::load(acc + d), inv));
      if (d < a.hd) store_partial<ElemF32>(out + d, Simd::mul(Simd::load(acc + d), inv), a.hd - d);
    }
}

// Scores of eight keys k[0..8) against q (both f32, zero-padded to hd_pad), times scale: eight independent FMA
// chains reduced through hsum8, so every score is reduced the same way wherever it sits.
inline void score8(const float* q, const float* const* k, int64_t hd_pad, float scale, float* out) {
  V a[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) a[j] = Simd::zero();
#pragma GCC unroll 2
  for (int64_t d = 0; d < hd_pad; d += kLanes) {
    const V qv = Simd::load(q + d);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) a[j] = Simd::fma(qv, Simd::load(k[j] + d), a[j]);
  }
  float sums[8];
  Simd::hsum8(a, sums);
  for (int j = 0; j < 8; ++j) out[j] = sums[j] * scale;
}

// Scores of cnt keys (rows kt + o * hd_pad); a short last group repeats its last key.
inline void score_keys(const float* q, const float* kt, int64_t cnt, int64_t hd_pad, float scale, float* scores) {
  const float* k[8];
  int64_t o = 0;
  for (; o + 8 <= cnt; o += 8) {
    for (int j = 0; j < 8; ++j) k[j] = kt + (o + j) * hd_pad;
    score8(q, k, hd_pad, scale, scores + o);
  }
  if (o < cnt) {
    float tail[8];
    for (int j = 0; j < 8; ++j) k[j] = kt + min_i(o + j, cnt - 1) * hd_pad;
    score8(q, k, hd_pad, scale, tail);
    for (int64_t j = 0; o + j < cnt; ++j) scores[o + j] = tail[j];
  }
}

// acc[0 .. C lanes-chunks) = acc * factor + sum_o p_o * v_o, accumulators in registers.
template <int C>
inline void accumulate_values(float* acc, const float* vt, int64_t hd_pad, const float* p, int64_t cnt, V factor) {
  V a[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) a[c] = Simd::mul(Simd::load(acc + c * kLanes), factor);
  for (int64_t o = 0; o < cnt; ++o) {
    const V po = Simd::set1(p[o]);
    const float* v = vt + o * hd_pad;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) a[c] = Simd::fma(po, Simd::load(v + c * kLanes), a[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) Simd::store(acc + c * kLanes, a[c]);
}

// Online-softmax update of pair r with the tile's keys kt[0..cnt) and values vt[0..cnt) (f32, hd_pad apart).
// NOTE: the padded score lanes are -inf, so they add exp = 0 exactly to the fixed-order tile sum.
inline void update_pair(const SoftmaxState& s, int64_t r, int64_t hd_pad, const float* q, const float* kt,
                        const float* vt, int64_t cnt, float scale, float* scores, int64_t scores_pad) {
  score_keys(q, kt, cnt, hd_pad, scale, scores);
  for (int64_t o = cnt; o < scores_pad; ++o) scores[o] = kNegInf;
  V vmax = Simd::load(scores);
  for (int64_t o = kLanes; o < scores_pad; o += kLanes) vmax = Simd::max(vmax, Simd::load(scores + o));
  const float new_max = max_f(s.m[r], Simd::hmax(vmax));
  const float factor = exp_s(s.m[r] - new_max);  // 0 on the segment's first tile (m was -inf)
  const V bmax = Simd::set1(new_max);
  V vsum = Simd::zero();
  for (int64_t o = 0; o < scores_pad; o += kLanes) {
    const V e = exp_v(Simd::sub(Simd::load(scores + o), bmax));
    vsum = Simd::add(vsum, e);
    Simd::store(scores + o, e);
  }
  s.l[r] = s.l[r] * factor + Simd::hsum(vsum);
  s.m[r] = new_max;
  float* acc = s.acc + r * hd_pad;
  const V vfactor = Simd::set1(factor);
  for (int64_t d = 0; d < hd_pad; d += 8 * kLanes) {
    switch (min_i(8, (hd_pad - d) / kLanes)) {
      case 1:
        accumulate_values<1>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      case 2:
        accumulate_values<2>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      case 3:
        accumulate_values<3>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      case 4:
        accumulate_values<4>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      case 5:
        accumulate_values<5>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      case 6:
        accumulate_values<6>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      case 7:
        accumulate_values<7>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
      default:
        accumulate_values<8>(acc + d, vt + d, hd_pad, scores, cnt, vfactor);
        break;
    }
  }
}

// Keys [lo, hi] of tile t for every KV head at once, read token by token: a token's heads lie side by side in the
// cache, so the reads are one contiguous run per token (reading one head's 128-256 bytes from every token,
// a KV head at a time, left the core waiting on a cache miss per token). Head h's rows land at
// dst + h * head_stride, hd_pad apart, zero-padded.
// Quantized caches (ElemI8 / ElemFp8): each head's codes are widened and multiplied by that (slot, head)'s scale.
template <class E>
inline void load_tile_heads(const typename E::T* cache, const int32_t* table, int64_t bs, int64_t hkv, int64_t hd,
                            int64_t hd_pad, int64_t first_key, int64_t lo, int64_t hi, float* dst,
                            int64_t head_stride, const peregrine::cpu::AttentionItem& it, const float* scales) {
  const int64_t slot_elems = hkv * hd;
  for (int64_t j = first_key + lo; j <= first_key + hi; ++j) {
    // A tree row reads its path's keys where they are (the same values a chain would have at these positions).
    const int64_t slot = it.tail != nullptr && j >= it.tail_from ? it.tail[j - it.tail_from] : j;
    const int64_t phys = static_cast<int64_t>(table[slot / bs]) * bs + slot % bs;
    const typename E::T* row = cache + phys * slot_elems;
    float* out = dst + (j - first_key) * hd_pad;
    if constexpr (ElemIsQuantized<E>::value) {
      const float* s = scales + phys * hkv;
      for (int64_t h = 0; h < hkv; ++h, row += hd, out += head_stride) {
        const V sv = Simd::set1(s[h]);
        int64_t d = 0;
        for (; d + kLanes <= hd; d += kLanes) Simd::store(out + d, Simd::mul(E::load(row + d), sv));
        if (d < hd) Simd::store(out + d, Simd::mul(load_partial<E>(row + d, hd - d), sv)), d += kLanes;
        for (; d < hd_pad; d += kLanes) Simd::store(out + d, Simd::zero());
      }
      continue;
    }
    if (hd % (2 * kLanes) == 0) {  // the common head sizes (64, 128): whole vectors, no padding
      for (int64_t h = 0; h < hkv; ++h, row += hd, out += head_stride)
        for (int64_t d = 0; d < hd; d += 2 * kLanes) {
          Simd::store(out + d, E::load(row + d));
          Simd::store(out + d + kLanes, E::load(row + d + kLanes));
        }
      continue;
    }
    for (int64_t h = 0; h < hkv; ++h, row += hd, out += head_stride) {
      int64_t d = 0;
      for (; d + kLanes <= hd; d += kLanes) Simd::store(out + d, E::load(row + d));
      if (d < hd) Simd::store(out + d, load_partial<E>(row + d, hd - d)), d += kLanes;
      for (; d < hd_pad; d += kLanes) Simd::store(out + d, Simd::zero());
    }
  }
}

// Asks for the blocks holding keys [lo, hi] to be brought into cache (the next tile, while this one is computed).
template <class T>
inline void prefetch_keys(const T* cache, const int32_t* table, int64_t bs, int64_t row_elems, int64_t lo, int64_t hi) {
  const int64_t bytes = row_elems * static_cast<int64_t>(sizeof(T));
  for (int64_t b = lo / bs; b <= hi / bs; ++b) {
    const char* base = reinterpret_cast<const char*>(cache + static_cast<int64_t>(table[b]) * bs * row_elems);
    const int64_t from = (b == lo / bs ? lo % bs : 0) * bytes, to = ((b == hi / bs ? hi % bs : bs - 1) + 1) * bytes;
    for (int64_t off = from; off < to; off += 64) Simd::prefetch(base + off);
  }
}

// NOTE determinism: a query's result depends only on its row, its position and the cache: tiles follow the
// block table, segments are fixed runs of tiles, only the keys the query may see are touched (ascending), each
// segment starts from an empty state and segments are merged left to right (merge_state).
template <class E>
void attention_typed(const peregrine::cpu::AttentionArgs& a, const peregrine::cpu::AttentionItem& it, float* scratch,
                     float* partial) {
  using T = typename E::T;
  const auto* k_cache = static_cast<const T*>(a.k_cache);
  const auto* v_cache = static_cast<const T*>(a.v_cache);
  const int64_t group = a.hq / a.hkv, hd = a.hd, bs = a.block_size, hd_pad = pad16(hd);
  const int64_t q_start = a.query_start_loc[it.seq];
  const int64_t q_len = a.query_start_loc[it.seq + 1] - q_start;
  const int64_t rows = it.row_end - it.row_begin, nr = rows * a.hq;
  const int64_t stride = a.hkv * hd;  // elements between consecutive token slots of one head
  const int64_t window = a.sliding_window;
  const int64_t tile = peregrine::cpu::attention_tile_keys(bs);
  const int64_t seg_tiles = peregrine::cpu::attention_segment_keys(bs) / tile;
  // Position of the item's first row (a tree row's is its depth past the context).
  const int64_t pos0 = it.tail != nullptr ? it.tail_from + it.tail_len - 1 : a.seq_lens[it.seq] - q_len + it.row_begin;
  const int64_t pos_last = pos0 + rows - 1;
  const int64_t first_lo = window > 0 ? max_i(0, pos0 - window + 1) : 0;
  const int64_t t_lo = first_lo / tile, t_hi = pos_last / tile;
  const int32_t* table = a.block_tables + (a.table_index ? a.table_index[it.seq] : it.seq) * a.max_blocks;

  // Scratch: segment state, total state, q rows, K and V tiles, scores (see attention_scratch_floats).
  const int64_t state_floats = nr * (hd_pad + 2);
  const SoftmaxState seg = state_at(partial ? partial : scratch, nr);
  const SoftmaxState total = state_at(scratch + state_floats, nr);
  float* q_pad = scratch + 2 * state_floats;  // [nr, hd_pad]
  const int64_t head_stride = tile * hd_pad;
  float* k_tile = q_pad + nr * hd_pad;          // [hkv, tile, hd_pad]
  float* v_tile = k_tile + a.hkv * head_stride;  // [hkv, tile, hd_pad]
  float* scores = v_tile + a.hkv * head_stride;  // [tile rounded up to lanes]
  const int64_t scores_pad = (tile + kLanes - 1) / kLanes * kLanes;
  for (int64_t r = 0; r < nr; ++r) {
    const float* q = a.q + (q_start + it.row_begin) * a.hq * hd + r * hd;
    int64_t d = 0;
    for (; d + kLanes <= hd; d += kLanes) Simd::store(q_pad + r * hd_pad + d, Simd::load(q + d));
    if (d < hd) Simd::store(q_pad + r * hd_pad + d, load_partial<ElemF32>(q + d, hd - d)), d += kLanes;
    for (; d < hd_pad; d += kLanes) Simd::store(q_pad + r * hd_pad + d, Simd::zero());
  }
  if (!partial) reset_state(total, nr, hd_pad);

  for (int64_t g = it.seg_begin; g < it.seg_end; ++g) {
    reset_state(seg, nr, hd_pad);
    const int64_t t0 = max_i(g * seg_tiles, t_lo), t1 = min_i((g + 1) * seg_tiles - 1, t_hi);
    for (int64_t t = t0; t <= t1; ++t) {
      // Keys of this tile that some row of the item sees, and the next tile's, to prefetch.
      const int64_t o_lo = max_i(t * tile, first_lo) - t * tile, o_hi = min_i(t * tile + tile - 1, pos_last) - t * tile;
      if (t < t1 && it.tail == nullptr) {
        const int64_t next_hi = min_i((t + 2) * tile - 1, pos_last);
        prefetch_keys(k_cache, table, bs, stride, (t + 1) * tile, next_hi);
        prefetch_keys(v_cache, table, bs, stride, (t + 1) * tile, next_hi);
      }
      load_tile_heads<E>(k_cache, table, bs, a.hkv, hd, hd_pad, t * tile, o_lo, o_hi, k_tile, head_stride, it, a.k_scales);
      load_tile_heads<E>(v_cache, table, bs, a.hkv, hd, hd_pad, t * tile, o_lo, o_hi, v_tile, head_stride, it, a.v_scales);
      for (int64_t kvh = 0; kvh < a.hkv; ++kvh) {
        const float* kt = k_tile + kvh * head_stride;
        const float* vt = v_tile + kvh * head_stride;
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t pos = pos0 + i;
          const int64_t first = window > 0 ? max_i(0, pos - window + 1) : 0;
          const int64_t j_lo = max_i(t * tile, first), j_hi = min_i(t * tile + tile - 1, pos);
          if (j_lo > j_hi) continue;
          const int64_t o = j_lo - t * tile;
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            const int64_t r = i * a.hq + h;
            update_pair(seg, r, hd_pad, q_pad + r * hd_pad, kt + o * hd_pad, vt + o * hd_pad, j_hi - j_lo + 1, a.scale,
                        scores, scores_pad);
          }
        }
      }
    }
    if (partial) return;  // one segment: its state is the result
    for (int64_t r = 0; r < nr; ++r)
      if (seg.m[r] != kNegInf) merge_state(total, seg, r, hd_pad);
  }
  write_out(a, it, total, hd_pad);
}

void attention_kernel(const peregrine::cpu::AttentionArgs& a, const peregrine::cpu::AttentionItem& it, float* scratch,
                      float* partial) {
  switch (a.cache_dtype) {
    case peregrine::DType::kBF16:
      return attention_typed<ElemBF16>(a, it, scratch, partial);
    case peregrine::DType::kF16:
      return attention_typed<ElemF16>(a, it, scratch, partial);
    case peregrine::DType::kI8:
      return attention_typed<ElemI8>(a, it, scratch, partial);
    case peregrine::DType::kF8E4M3:
      return attention_typed<ElemFp8>(a, it, scratch, partial);
    default:
      return attention_typed<ElemF32>(a, it, scratch, partial);
  }
}

void attention_merge_kernel(const peregrine::cpu::AttentionArgs& a, const peregrine::cpu::AttentionItem& it,
                            const float* partials, float* scratch) {
  const int64_t nr = (it.row_end - it.row_begin) * a.hq, hd_pad = pad16(a.hd);
  const int64_t state_floats = nr * (hd_pad + 2);
  const SoftmaxState total = state_at(scratch, nr);
  reset_state(total, nr, hd_pad);
  for (int64_t g = it.seg_begin; g < it.seg_end; ++g) {
    const SoftmaxState seg = state_at(const_cast<float*>(partials) + (g - it.seg_begin) * state_floats, nr);
    for (int64_t r = 0; r < nr; ++r)
      if (seg.m[r] != kNegInf) merge_state(total, seg, r, hd_pad);
  }
  write_out(a, it, total, hd_pad);
}

}  // namespace
