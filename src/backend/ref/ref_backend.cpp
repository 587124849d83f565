// Reference implementations of every op (see ops.h); element loads and stores go through double.
#include "backend/ref/ref_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "core/status.h"
#include "ops/host_memory.h"
#include "ops/act_quant.h"
#include "ops/host_sampling.h"
#include "ops/op_checks.h"

namespace peregrine::ops {
namespace {

double load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: return static_cast<const float*>(t.data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: throw Error(ErrorCode::kUnsupported, "ref backend: unsupported dtype " + std::string(dtype_name(t.dtype)));
  }
}

void store(const TensorView& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::kF32: static_cast<float*>(t.data)[i] = static_cast<float>(v); return;
    case DType::kBF16: static_cast<uint16_t*>(t.data)[i] = f32_to_bf16(static_cast<float>(v)); return;
    case DType::kF16: static_cast<uint16_t*>(t.data)[i] = f32_to_f16(static_cast<float>(v)); return;
    default: throw Error(ErrorCode::kUnsupported, "ref backend: unsupported dtype " + std::string(dtype_name(t.dtype)));
  }
}

// Element i of a KV cache: the float value, or code * the scale of its (slot, head) for quantized caches.
double load_kv(const TensorView& cache, const TensorView& scales, int64_t i, int64_t head_dim) {
  switch (cache.dtype) {
    case DType::kI8: return static_cast<double>(static_cast<const int8_t*>(cache.data)[i]) * scales.as<const float>()[i / head_dim];
    case DType::kF8E4M3:
      return static_cast<double>(fp8_e4m3_to_f32(static_cast<const uint8_t*>(cache.data)[i])) * scales.as<const float>()[i / head_dim];
    default: return load(cache, i);
  }
}

class RefBackend final : public Backend {
 public:
  std::string name() const override { return "ref"; }
  DeviceKind kind() const override { return DeviceKind::kRef; }
  bool is_host() const override { return true; }
  bool supports_activation(DType act) const override { return is_float_dtype(act); }

  void* allocate(size_t bytes) override { return host_allocate(bytes); }
  void deallocate(void* p) override { host_deallocate(p); }
  void copy_from_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_on_device(void* d, const void* s, size_t n) override { std::memmove(d, s, n); }
  void fill_zero(void* d, size_t n) override { std::memset(d, 0, n); }
  void synchronize() override {}
  size_t free_memory() const override { return host_available_memory(); }

  bool supports_sampling() const override { return true; }
  void sample(const SampleParams& p) override { host_sample(p); }

  void embedding(const EmbeddingParams& p) override {
    check_embedding(p);
    const int64_t hidden = p.hidden(), vocab = p.table.dim(0);
    std::vector<float> row(static_cast<size_t>(hidden));
    for (int64_t t = 0; t < p.token_ids.dim(0); ++t) {
      int32_t id = p.token_ids.as<const int32_t>()[t];
      if (id < 0 || id >= vocab)
        throw Error(ErrorCode::kInvalidArgument, "embedding: token id " + std::to_string(id) + " out of range");
      if (p.table_ggml != GgmlType::kNone) {
        ggml_dequantize_row(p.table_ggml, static_cast<const uint8_t*>(p.table.data) + id * p.table.dim(1), row.data(),
                            hidden);
        for (int64_t h = 0; h < hidden; ++h) store(p.out, t * hidden + h, row[static_cast<size_t>(h)]);
        continue;
      }
      for (int64_t h = 0; h < hidden; ++h) store(p.out, t * hidden + h, load(p.table, id * hidden + h));
    }
  }

  void matmul(const MatmulParams& p) override {
    check_matmul(p);
    if (is_w4a8(p)) return w4a8_matmul(p);
    int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0);
    // W8A8: x quantized per row (and activation group) as ops.h defines it, then used as q * s.
    std::vector<double> xq;
    if (p.quant.act != ActQuant::kNone) {
      const int64_t gs = p.quant.act_group > 0 ? p.quant.act_group : k;
      xq.resize(static_cast<size_t>(m * k));
      std::vector<float> xf(static_cast<size_t>(gs));
      std::vector<int8_t> qi(static_cast<size_t>(gs));
      std::vector<uint8_t> qf(static_cast<size_t>(gs));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c0 = 0; c0 < k; c0 += gs) {
          const int64_t len = std::min(gs, k - c0);
          for (int64_t c = 0; c < len; ++c) xf[static_cast<size_t>(c)] = static_cast<float>(load(p.x, i * k + c0 + c));
          if (p.quant.act == ActQuant::kInt8) {
            const double s = quantize_act_int8(xf.data(), len, qi.data());
            for (int64_t c = 0; c < len; ++c) xq[static_cast<size_t>(i * k + c0 + c)] = qi[static_cast<size_t>(c)] * s;
          } else {
            const double s = quantize_act_fp8(xf.data(), len, qf.data());
            for (int64_t c = 0; c < len; ++c)
              xq[static_cast<size_t>(i * k + c0 + c)] = static_cast<double>(fp8_e4m3_to_f32(qf[static_cast<size_t>(c)])) * s;
          }
        }
    }
    auto x_at = [&](int64_t idx) { return xq.empty() ? load(p.x, idx) : xq[static_cast<size_t>(idx)]; };
    std::vector<double> row(static_cast<size_t>(k));
    std::vector<float> blocks(p.quant.ggml_blocks() ? static_cast<size_t>(k) : 0);
    for (int64_t j = 0; j < n; ++j) {
      if (p.quant.ggml_blocks()) {  // dequantized as gguf-py's reference does
        ggml_dequantize_row(p.quant.ggml, static_cast<const uint8_t*>(p.w.data) + j * p.w.dim(1), blocks.data(), k);
        for (int64_t kk = 0; kk < k; ++kk) row[static_cast<size_t>(kk)] = blocks[static_cast<size_t>(kk)];
      } else if (p.quant.perm.empty()) {
        for (int64_t kk = 0; kk < k; ++kk) row[static_cast<size_t>(kk)] = weight(p, j, kk);
      } else {
        const int32_t* perm = p.quant.perm.as<const int32_t>();
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t kk = 0; kk < k; ++kk) {
          if (perm[kk] < 0 || perm[kk] >= k)
            throw Error(ErrorCode::kInvalidArgument, "matmul: quant.perm[" + std::to_string(kk) + "] is outside [0, K)");
          row[static_cast<size_t>(perm[kk])] += weight(p, j, kk);
        }
      }
      for (int64_t i = 0; i < m; ++i) {
        double acc = p.bias.empty() ? 0.0 : load(p.bias, j);
        for (int64_t kk = 0; kk < k; ++kk) acc += x_at(i * k + kk) * row[static_cast<size_t>(kk)];
        store(p.out, i * n + j, acc);
      }
    }
  }

  // W4A8 (ops.h: symmetric kI4 codes in contiguous groups, x quantized to int8 per row) written as its definition
  // reads: per row the int8 codes q and scale s of x, per output and group the exact integer sum of
  // q * (code - 8), then out = s * sum_g scale[n, g] * sum_g (+ bias), in double.
  static bool is_w4a8(const MatmulParams& p) {
    const WeightQuant& q = p.quant;
    return q.quantized() && p.w.dtype == DType::kI4 && q.act == ActQuant::kInt8 && q.zeros.empty() && q.g_idx.empty() &&
           q.perm.empty() && (q.act_group == 0 || q.act_group == p.x.dim(1));
  }
  void w4a8_matmul(const MatmulParams& p) {
    const WeightQuant& q = p.quant;
    const int64_t m = p.x.dim(0), k = p.x.dim(1), n = p.w.dim(0), gs = q.group_size, groups = q.scales.dim(1);
    const auto* codes = static_cast<const uint8_t*>(p.w.data);
    std::vector<float> xf(static_cast<size_t>(k));
    std::vector<int8_t> xq(static_cast<size_t>(k));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < k; ++c) xf[static_cast<size_t>(c)] = static_cast<float>(load(p.x, i * k + c));
      const double s = quantize_act_int8(xf.data(), k, xq.data());
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t g = 0; g < groups; ++g) {
          int64_t dot = 0;
          for (int64_t c = g * gs; c < std::min(k, (g + 1) * gs); ++c) {
            const int64_t idx = j * k + c;
            const int code = (idx % 2 == 0) ? (codes[idx / 2] & 0xf) : (codes[idx / 2] >> 4);
            dot += static_cast<int64_t>(xq[static_cast<size_t>(c)]) * (code - 8);
          }
          acc += load(q.scales, (j / q.block_rows) * groups + g) * static_cast<double>(dot);
        }
        store(p.out, i * n + j, s * acc + (p.bias.empty() ? 0.0 : load(p.bias, j)));
      }
    }
  }

  // W[n, k] of a matmul, dequantized as ops.h defines it.
  static double weight(const MatmulParams& p, int64_t n, int64_t k) {
    const int64_t cols = p.w.dim(1);
    if (!p.quant.quantized()) return load(p.w, n * cols + k);
    const WeightQuant& q = p.quant;
    const int64_t i = n * cols + k;
    double code = 0, zero = 0;
    switch (p.w.dtype) {
      case DType::kI4: {
        const uint8_t byte = static_cast<const uint8_t*>(p.w.data)[i / 2];
        code = (i % 2 == 0) ? (byte & 0xf) : (byte >> 4);
        zero = 8;
        break;
      }
      case DType::kU8:
        code = static_cast<const uint8_t*>(p.w.data)[i];
        zero = 128;
        break;
      case DType::kI8: code = static_cast<const int8_t*>(p.w.data)[i]; break;
      case DType::kF8E4M3: code = fp8_e4m3_to_f32(static_cast<const uint8_t*>(p.w.data)[i]); break;
      default: throw Error(ErrorCode::kUnsupported, "ref matmul: unsupported weight codes");
    }
    const int64_t groups = q.scales.dim(1);
    const int64_t g = q.g_idx.empty() ? k / q.group_size : q.g_idx.as<const int32_t>()[k];
    if (g < 0 || g >= groups)
      throw Error(ErrorCode::kInvalidArgument, "matmul: quant.g_idx[" + std::to_string(k) + "] = " + std::to_string(g) +
                                                   " is outside [0, " + std::to_string(groups) + ")");
    if (!q.zeros.empty()) zero = q.zeros.as<const float>()[n * groups + g];
    return (code - zero) * load(q.scales, (n / q.block_rows) * groups + g);
  }

  // MatmulFusion as ops.h defines it: the plain matmuls on x̂ (rounded in x's dtype) into f32 scratch, then
  // inv, bias, the roundings and the residual / SiLU·mul, in double.
  void matmuls_fused(std::span<const MatmulParams> ps, const MatmulFusion& f) override {
    check_matmul_fusion(ps, f);
    const MatmulParams& first = ps.front();
    const int64_t m = first.x.dim(0), k = first.x.dim(1);
    const bool norm = !f.norm_weight.empty();
    std::vector<uint8_t> xhat_bytes(norm ? dtype_bytes(first.x.dtype, static_cast<size_t>(m * k)) : 0);
    TensorView xhat = first.x;
    std::vector<double> inv(static_cast<size_t>(m), 1.0);
    if (norm) {
      xhat = TensorView(xhat_bytes.data(), first.x.dtype, {m, k});
      for (int64_t i = 0; i < m; ++i) {
        double ss = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double v = load(first.x, i * k + c);
          ss += v * v;
          store(xhat, i * k + c, v * load(f.norm_weight, c));
        }
        inv[static_cast<size_t>(i)] = 1.0 / std::sqrt(ss / static_cast<double>(k) + f.eps);
      }
    }
    // Each product, rounded to its out dtype (kept in double).
    std::vector<std::vector<double>> prod;
    for (const MatmulParams& p : ps) {
      const int64_t n = p.w.dim(0);
      std::vector<float> acc(static_cast<size_t>(m * n));
      MatmulParams q = p;
      q.x = xhat;
      q.bias = TensorView();
      q.out = TensorView(acc.data(), DType::kF32, {m, n});
      matmul(q);
      std::vector<uint8_t> one(dtype_bytes(p.out.dtype, 1));
      const TensorView cell(one.data(), p.out.dtype, {1});
      std::vector<double> r(static_cast<size_t>(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double v = inv[static_cast<size_t>(i)] * acc[static_cast<size_t>(i * n + j)];
          if (!p.bias.empty()) v += load(p.bias, j);
          store(cell, 0, v);
          r[static_cast<size_t>(i * n + j)] = load(cell, 0);
        }
      prod.push_back(std::move(r));
    }
    if (f.silu_mul) {
      const TensorView& out = ps[0].out;
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double g = prod[0][static_cast<size_t>(i)], u = prod[1][static_cast<size_t>(i)];
        store(out, i, g / (1.0 + std::exp(-g)) * u);
      }
      return;
    }
    for (size_t s = 0; s < ps.size(); ++s) {
      const TensorView& out = ps[s].out;
      for (int64_t i = 0; i < out.numel(); ++i) {
        double v = prod[s][static_cast<size_t>(i)];
        if (!f.residual.empty()) v += load(f.residual, i);
        store(out, i, v);
      }
    }
  }

  void rms_norm(const RmsNormParams& p) override {
    check_rms_norm(p);
    int64_t rows = p.x.dim(0), h = p.x.dim(1);
    std::vector<double> row(static_cast<size_t>(h));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < h; ++i) {
        double v = load(p.x, r * h + i);
        if (!p.residual.empty()) {
          v += load(p.residual, r * h + i);
          store(p.residual, r * h + i, v);
          v = load(p.residual, r * h + i);  // the stored (rounded) sum is what later layers see
        }
        row[i] = v;
      }
      double ss = 0;
      for (double v : row) ss += v * v;
      double inv = 1.0 / std::sqrt(ss / static_cast<double>(h) + p.eps);
      for (int64_t i = 0; i < h; ++i) {
        // Hugging Face rounds the normalised value to the activation dtype before the weight multiply.
        double normed = row[i] * inv;
        store(p.out, r * h + i, normed * load(p.weight, i));
      }
    }
  }

  void rope(const RopeParams& p) override {
    check_rope(p);
    int half = p.rotary_dim / 2;
    auto apply = [&](const TensorView& x) {
      int64_t tokens = x.dim(0), heads = x.dim(1), hd = x.dim(2);
      for (int64_t t = 0; t < tokens; ++t) {
        float pos = static_cast<float>(p.positions.as<const int32_t>()[t]);
        for (int64_t h = 0; h < heads; ++h) {
          int64_t base = (t * heads + h) * hd;
          for (int i = 0; i < half; ++i) {
            float angle = pos * p.inv_freq.as<const float>()[i];  // f32 product, as Hugging Face computes it
            double c = std::cos(static_cast<double>(angle)) * p.attention_scaling;
            double s = std::sin(static_cast<double>(angle)) * p.attention_scaling;
            double a = load(x, base + i), b = load(x, base + i + half);
            store(x, base + i, a * c - b * s);
            store(x, base + i + half, b * c + a * s);
          }
        }
      }
    };
    apply(p.q);
    apply(p.k);
  }

  void silu_mul(const SiluMulParams& p) override {
    check_silu_mul(p);
    for (int64_t i = 0; i < p.gate.numel(); ++i) {
      double g = load(p.gate, i);
      store(p.out, i, g / (1.0 + std::exp(-g)) * load(p.up, i));
    }
  }

  void kv_write(const KvWriteParams& p) override {
    check_kv_write(p);
    int64_t row = p.k.dim(1) * p.k.dim(2);
    int64_t slots = p.k_cache.dim(0) * p.k_cache.dim(1);
    const bool quantized = kv_cache_quantized(p.k_cache.dtype);
    const int64_t heads = p.k.dim(1), hd = p.k.dim(2);
    std::vector<float> head(static_cast<size_t>(hd));
    for (int64_t t = 0; t < p.k.dim(0); ++t) {
      int32_t slot = p.slot_mapping.as<const int32_t>()[t];
      if (slot < 0) continue;
      if (slot >= slots) throw Error(ErrorCode::kInvalidArgument, "kv_write: slot out of range");
      if (quantized) {  // each (token, head) vector with its own scale (ops.h)
        for (int64_t h = 0; h < heads; ++h) {
          for (int which = 0; which < 2; ++which) {
            const TensorView& src = which ? p.v : p.k;
            const TensorView& cache = which ? p.v_cache : p.k_cache;
            float* scales = (which ? p.v_scales : p.k_scales).as<float>();
            for (int64_t d = 0; d < hd; ++d) head[static_cast<size_t>(d)] = static_cast<float>(load(src, t * row + h * hd + d));
            auto* codes = static_cast<uint8_t*>(cache.data) + slot * row + h * hd;
            scales[slot * heads + h] = cache.dtype == DType::kI8
                                           ? quantize_act_int8(head.data(), hd, reinterpret_cast<int8_t*>(codes))
                                           : quantize_act_fp8(head.data(), hd, codes);
          }
        }
        continue;
      }
      for (int64_t i = 0; i < row; ++i) {
        store(p.k_cache, slot * row + i, load(p.k, t * row + i));
        store(p.v_cache, slot * row + i, load(p.v, t * row + i));
      }
    }
  }

  void attention(const AttentionParams& p) override {
    check_attention(p);
    int64_t num_seqs = p.seq_lens.dim(0);
    int64_t hq = p.q.dim(1), hd = p.q.dim(2);
    int64_t block_size = p.k_cache.dim(1), hkv = p.k_cache.dim(2);
    int64_t group = hq / hkv;
    int64_t max_blocks = p.block_tables.dim(1);
    const int32_t* qsl = p.query_start_loc.as<const int32_t>();
    const int32_t* lens = p.seq_lens.as<const int32_t>();
    const int32_t* tables = p.block_tables.as<const int32_t>();
    check_tree_parents(p);
    check_attention_indices(p);
    const int32_t* parents = p.tree_parents.empty() ? nullptr : p.tree_parents.as<const int32_t>();
    const int32_t* table_index = p.block_table_index.empty() ? nullptr : p.block_table_index.as<const int32_t>();
    const int32_t* tail_from = p.key_tail_from.empty() ? nullptr : p.key_tail_from.as<const int32_t>();
    std::vector<double> scores;
    std::vector<int64_t> keys;  // the sequence slots a row attends to, in position order
    for (int64_t s = 0; s < num_seqs; ++s) {
      int64_t q_len = qsl[s + 1] - qsl[s];
      int64_t seq_len = lens[s];
      const int64_t ctx = seq_len - q_len;
      for (int64_t i = 0; i < q_len; ++i) {
        int64_t row = qsl[s] + i;
        int64_t pos = seq_len - q_len + i;
        int64_t first = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
        keys.clear();
        if (parents) {
          for (int64_t j = 0; j < ctx; ++j) keys.push_back(j);
          std::vector<int64_t> path;
          for (int64_t r = i; r >= 0; r = parents[qsl[s] + r]) path.push_back(ctx + r);
          keys.insert(keys.end(), path.rbegin(), path.rend());
          first = 0;
          pos = static_cast<int64_t>(keys.size()) - 1;
        } else {
          for (int64_t j = 0; j <= pos; ++j) keys.push_back(j);
          if (tail_from && tail_from[s] < seq_len) {
            const int32_t* tail = p.key_tail.as<const int32_t>() + p.key_tail_offset.as<const int32_t>()[s];
            for (int64_t j = tail_from[s]; j <= pos; ++j) keys[static_cast<size_t>(j)] = tail[j - tail_from[s]];
          }
        }
        const int64_t trow = table_index ? table_index[s] : s;
        for (int64_t h = 0; h < hq; ++h) {
          int64_t kvh = h / group;
          scores.assign(static_cast<size_t>(pos + 1 - first), 0.0);
          double max_score = -std::numeric_limits<double>::infinity();
          for (int64_t j = first; j <= pos; ++j) {
            const int64_t slot = keys[static_cast<size_t>(j)];
            int64_t block = tables[trow * max_blocks + slot / block_size];
            int64_t base = ((block * block_size + slot % block_size) * hkv + kvh) * hd;
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d) dot += load(p.q, (row * hq + h) * hd + d) * load_kv(p.k_cache, p.k_scales, base + d, hd);
            scores[j - first] = dot * p.scale;
            max_score = std::max(max_score, scores[j - first]);
          }
          double sum = 0;
          for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
          for (int64_t d = 0; d < hd; ++d) {
            double acc = 0;
            for (int64_t j = first; j <= pos; ++j) {
              const int64_t slot = keys[static_cast<size_t>(j)];
              int64_t block = tables[trow * max_blocks + slot / block_size];
              int64_t base = ((block * block_size + slot % block_size) * hkv + kvh) * hd;
              acc += scores[j - first] * load_kv(p.v_cache, p.v_scales, base + d, hd);
            }
            store(p.out, (row * hq + h) * hd + d, acc / sum);
          }
        }
      }
    }
  }

  void gather_rows(const GatherRowsParams& p) override {
    check_gather_rows(p);
    size_t row_bytes = dtype_bytes(p.x.dtype, static_cast<size_t>(p.x.dim(1)));
    for (int64_t r = 0; r < p.indices.dim(0); ++r) {
      int32_t src = p.indices.as<const int32_t>()[r];
      if (src < 0 || src >= p.x.dim(0)) throw Error(ErrorCode::kInvalidArgument, "gather_rows: index out of range");
      std::memcpy(static_cast<char*>(p.out.data) + r * row_bytes, static_cast<const char*>(p.x.data) + src * row_bytes,
                  row_bytes);
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

}  // namespace peregrine::ops
