// Generic paged attention over the TU's `Simd`: one work item is (sequence, KV head, query rows); every query
// head of the KV head is processed against each K/V tile while it is in L1, with an online softmax.
// NOTE: include only from a kernels_<isa>.cpp.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"

namespace {

// dot(q, k) over hd elements: one accumulator, full vectors then a zero-padded tail, fixed hsum.
template <class E> inline float dot_row(const float* q, const typename E::T* k, int64_t hd) {
  V acc = Simd::zero();
  int64_t d = 0;
  for (; d + kLanes <= hd; d += kLanes) acc = Simd::fma(Simd::load(q + d), E::load(k + d), acc);
  if (d < hd) acc = Simd::fma(load_partial<ElemF32>(q + d, hd - d), load_partial<E>(k + d, hd - d), acc);
  return Simd::hsum(acc);
}

// The same computation for four keys at once (independent accumulators, bit-identical to dot_row).
template <class E>
inline void dot_rows4(const float* q, const typename E::T* k, int64_t stride, int64_t hd, float* out) {
  V a0 = Simd::zero(), a1 = Simd::zero(), a2 = Simd::zero(), a3 = Simd::zero();
  int64_t d = 0;
  for (; d + kLanes <= hd; d += kLanes) {
    V qv = Simd::load(q + d);
    a0 = Simd::fma(qv, E::load(k + d), a0);
    a1 = Simd::fma(qv, E::load(k + stride + d), a1);
    a2 = Simd::fma(qv, E::load(k + 2 * stride + d), a2);
    a3 = Simd::fma(qv, E::load(k + 3 * stride + d), a3);
  }
  if (d < hd) {
    V qv = load_partial<ElemF32>(q + d, hd - d);
    a0 = Simd::fma(qv, load_partial<E>(k + d, hd - d), a0);
    a1 = Simd::fma(qv, load_partial<E>(k + stride + d, hd - d), a1);
    a2 = Simd::fma(qv, load_partial<E>(k + 2 * stride + d, hd - d), a2);
    a3 = Simd::fma(qv, load_partial<E>(k + 3 * stride + d, hd - d), a3);
  }
  out[0] = Simd::hsum(a0);
  out[1] = Simd::hsum(a1);
  out[2] = Simd::hsum(a2);
  out[3] = Simd::hsum(a3);
}

// NOTE determinism: a query's result depends only on its own row, its position and the cache. Keys are
// visited in tiles that follow the block table (tile t = positions [t*bs, (t+1)*bs)); within a tile only the
// keys the query may see are touched, in ascending order, so neither the other rows of the item nor other
// sequences change a bit of it.
template <class E>
void attention_typed(const peregrine::cpu::AttentionArgs& a, const peregrine::cpu::AttentionItem& it,
                     float* scratch) {
  using T = typename E::T;
  const auto* k_cache = static_cast<const T*>(a.k_cache);
  const auto* v_cache = static_cast<const T*>(a.v_cache);
  const int64_t group = a.hq / a.hkv, hd = a.hd, bs = a.block_size;
  const int64_t hd_pad = (hd + kLanes - 1) / kLanes * kLanes;
  const int64_t q_start = a.query_start_loc[it.seq];
  const int64_t q_len = a.query_start_loc[it.seq + 1] - q_start;
  const int64_t seq_len = a.seq_lens[it.seq];
  const int64_t rows = it.row_end - it.row_begin;
  const int64_t nr = rows * group;
  const int64_t kv_stride = a.hkv * hd;  // elements between consecutive token slots of one head
  const int64_t window = a.sliding_window;
  
  float* acc = scratch;                 // [nr, hd_pad]
  float* row_max = acc + nr * hd_pad;   // [nr]
  float* row_sum = row_max + nr;        // [nr]
  float* scores = row_sum + nr;         // [bs rounded up to lanes]
  fill_f(acc, nr * hd_pad, 0.0f);
  fill_f(row_max, nr, kNegInf);
  fill_f(row_sum, nr, 0.0f);
  const int64_t bs_pad = (bs + kLanes - 1) / kLanes * kLanes;

  const int64_t pos0 = seq_len - q_len + it.row_begin;  // position of the item's first row
  const int64_t pos_last = pos0 + rows - 1;
  const int64_t first_lo = window > 0 ? max_i(0, pos0 - window + 1) : 0;
  const int32_t* table = a.block_tables + it.seq * a.max_blocks;

  for (int64_t t = first_lo / bs; t <= pos_last / bs; ++t) {
    const int64_t block = table[t];
    const T* kb = k_cache + (block * bs * a.hkv + it.kv_head) * hd;
    const T* vb = v_cache + (block * bs * a.hkv + it.kv_head) * hd;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t pos = pos0 + i;
      const int64_t first = window > 0 ? max_i(0, pos - window + 1) : 0;
      const int64_t j_lo = max_i(t * bs, first), j_hi = min_i(t * bs + bs - 1, pos);
      if (j_lo > j_hi) continue;
      const int64_t o_lo = j_lo - t * bs, cnt = j_hi - j_lo + 1;
      const T* kt = kb + o_lo * kv_stride;
      const T* vt = vb + o_lo * kv_stride;
      for (int64_t h = 0; h < group; ++h) {
        const int64_t r = i * group + h;
        const float* q = a.q + ((q_start + it.row_begin + i) * a.hq + it.kv_head * group + h) * hd;
        int64_t o = 0;
        for (; o + 4 <= cnt; o += 4) dot_rows4<E>(q, kt + o * kv_stride, kv_stride, hd, scores + o);
        for (; o < cnt; ++o) scores[o] = dot_row<E>(q, kt + o * kv_stride, hd);
        float tile_max = kNegInf;
        for (o = 0; o < cnt; ++o) {
          scores[o] *= a.scale;
          tile_max = max_f(tile_max, scores[o]);
        }
        for (o = cnt; o < bs_pad; ++o) scores[o] = kNegInf;
        const float new_max = max_f(row_max[r], tile_max);
        const float factor = exp_s(row_max[r] - new_max);  // 0 on the first tile (max was -inf)
        const V vmax = Simd::set1(new_max);
        for (o = 0; o < cnt; o += kLanes)
          Simd::store(scores + o, exp_v(Simd::sub(Simd::load(scores + o), vmax)));
        float sum = row_sum[r] * factor;
        for (o = 0; o < cnt; ++o) sum += scores[o];
        row_sum[r] = sum;
        row_max[r] = new_max;
        // acc = acc * factor + sum_o p_o * v_o, one pass per lane chunk of the head dimension.
        float* acc_r = acc + r * hd_pad;
        const V vfactor = Simd::set1(factor);
        int64_t d = 0;
        for (; d + kLanes <= hd; d += kLanes) {
          V av = Simd::mul(Simd::load(acc_r + d), vfactor);
          for (o = 0; o < cnt; ++o) av = Simd::fma(Simd::set1(scores[o]), E::load(vt + o * kv_stride + d), av);
          Simd::store(acc_r + d, av);
        }
        if (d < hd) {
          V av = Simd::mul(Simd::load(acc_r + d), vfactor);
          for (o = 0; o < cnt; ++o)
            av = Simd::fma(Simd::set1(scores[o]), load_partial<E>(vt + o * kv_stride + d, hd - d), av);
          Simd::store(acc_r + d, av);
        }
      }
    }
  }

  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = 0; h < group; ++h) {
      const int64_t r = i * group + h;
      float* out = a.out + ((q_start + it.row_begin + i) * a.hq + it.kv_head * group + h) * hd;
      const V inv_sum = Simd::set1(1.0f / row_sum[r]);
      const float* acc_r = acc + r * hd_pad;
      int64_t d = 0;
      for (; d + kLanes <= hd; d += kLanes) Simd::store(out + d, Simd::mul(Simd::load(acc_r + d), inv_sum));
      if (d < hd) store_partial<ElemF32>(out + d, Simd::mul(Simd::load(acc_r + d), inv_sum), hd - d);
    }
}

void attention_kernel(const peregrine::cpu::AttentionArgs& a, const peregrine::cpu::AttentionItem& it,
                      float* scratch) {
  switch (a.cache_dtype) {
    case peregrine::DType::kBF16: return attention_typed<ElemBF16>(a, it, scratch);
    case peregrine::DType::kF16: return attention_typed<ElemF16>(a, it, scratch);
    default: return attention_typed<ElemF32>(a, it, scratch);
  }
}

}  // namespace
