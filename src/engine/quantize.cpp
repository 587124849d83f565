// quantize_model (include/peregrine/quantize.h): dense checkpoint → compressed-tensors pack-quantized W4A16/W8A16,
// int-quantized / float-quantized W8A8, and W4A8 (int4 weights, int8 activations per token; int- or pack-quantized).
//
// Methods (each written here from the papers' descriptions):
//  - rtn: round to nearest per group (compressed-tensors' observer: symmetric scale max|w| / 7.5 (int4) or / 127.5
//    (int8); asymmetric (max - min) / (2^bits - 1) with zero round(-min / scale); ranges include 0).
//  - gptq (Frantar et al.): per projection, H = sum of x xᵀ over calibration inputs (+1% mean-diagonal damping);
//    columns are quantized left to right and each one's error is spread over the columns not yet quantized
//    through the upper Cholesky factor of H⁻¹; group scales are taken when a group's first column is reached.
//    Hessians come from the float model in one pass; with gptq_sequential ("true sequential") each layer input's H
//    is collected again with every projection before it already quantized (q/k/v, then o, then gate/up, then down,
//    layer after layer), one calibration pass per input.
//  - awq (Lin et al.): per input of a group of projections (q/k/v after the input norm, gate/up after the post-
//    attention norm, down after up), input channels are scaled by s = mean|x|^a before quantization and the
//    inverse is folded into the norm weight (or up_proj's rows); a in {0, 0.05, ..., 1} minimises the expected
//    output error tr(ΔW H ΔWᵀ) over the group; then, except for q and k, each output row's range per group is
//    clipped by the ratio in {1, 0.95, ..., 0.5} that minimises that group's output error (AWQ's clipping search).
// Calibration inputs are captured by running the dense model on the CPU backend through a backend that also
// records each projection's input (the decoder calls its 7 projections in order q, k, v, o, gate, up, down).
#include "peregrine/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/device_setup.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/quant_weights.h"
#include "peregrine/tokenizer.h"

namespace peregrine {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// Input statistics of one projection input: H = sum x xᵀ (K x K, double) and sum |x| per channel.
struct InputStats {
  int64_t k = 0;
  std::vector<double> h, abs_sum, abs_max;  // abs_max: max |x| per channel (SmoothQuant)
  int64_t rows = 0;
};

// Forwards every op to the CPU backend; matmuls of the decoder's projections also add their inputs to the stats.
class CaptureBackend final : public ops::Backend {
 public:
  CaptureBackend(ops::Backend& inner, int64_t layers) : inner_(inner), stats_(static_cast<size_t>(layers * 4)) {}
  std::string name() const override { return "capture(" + inner_.name() + ")"; }
  ops::DeviceKind kind() const override { return inner_.kind(); }
  bool is_host() const override { return inner_.is_host(); }
  bool supports_activation(DType act) const override { return inner_.supports_activation(act); }
  void* allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) override { inner_.deallocate(p); }
  void copy_from_host(void* d, const void* s, size_t n) override { inner_.copy_from_host(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { inner_.copy_to_host(d, s, n); }
  void copy_on_device(void* d, const void* s, size_t n) override { inner_.copy_on_device(d, s, n); }
  void fill_zero(void* d, size_t n) override { inner_.fill_zero(d, n); }
  void synchronize() override { inner_.synchronize(); }
  size_t free_memory() const override { return inner_.free_memory(); }
  void embedding(const ops::EmbeddingParams& p) override { inner_.embedding(p); }
  void rms_norm(const ops::RmsNormParams& p) override { inner_.rms_norm(p); }
  void rope(const ops::RopeParams& p) override { inner_.rope(p); }
  void silu_mul(const ops::SiluMulParams& p) override { inner_.silu_mul(p); }
  void kv_write(const ops::KvWriteParams& p) override { inner_.kv_write(p); }
  void attention(const ops::AttentionParams& p) override { inner_.attention(p); }
  void gather_rows(const ops::GatherRowsParams& p) override { inner_.gather_rows(p); }
  void matmul(const ops::MatmulParams& p) override {
    const int64_t call = call_;
    if (capturing_) ++call_;
    auto sub = capturing_ ? substitutes_.find(call) : substitutes_.end();
    if (sub == substitutes_.end()) {
      inner_.matmul(p);
    } else {  // a projection already quantized (sequential GPTQ): its codes, through the exact W4A16/W8A16 op
      const model::HostQuantLinear& q = sub->second;
      ops::MatmulParams qp = p;
      qp.w = TensorView(const_cast<uint8_t*>(q.codes.data()), q.codes_dtype, {q.n, q.k});
      qp.quant = {};
      qp.quant.scales = TensorView(const_cast<float*>(q.scales.data()), DType::kF32, {q.n, q.groups});
      qp.quant.zeros = TensorView(const_cast<float*>(q.zeros.data()), DType::kF32, {q.n, q.groups});
      qp.quant.group_size = q.group_size;
      inner_.matmul(qp);
    }
    if (!capturing_) return;
    const int64_t slot = call % 7, layer = call / 7;
    static constexpr int kInput[7] = {0, -1, -1, 1, 2, -1, 3};  // q (k, v share it), o, gate (up shares), down
    if (kInput[slot] < 0 || layer * 4 + kInput[slot] >= static_cast<int64_t>(stats_.size())) return;
    if (only_ >= 0 && layer * 4 + kInput[slot] != only_) return;
    accumulate(stats_[static_cast<size_t>(layer * 4 + kInput[slot])], p.x);
  }
  void begin_forward() {
    call_ = 0;
    capturing_ = true;
  }
  void end_forward() { capturing_ = false; }
  std::vector<InputStats>& stats() { return stats_; }
  // Capture only this stats slot (layer * 4 + input), or every slot with -1; the slot starts empty.
  void capture_only(int64_t slot) {
    only_ = slot;
    if (slot >= 0) stats_[static_cast<size_t>(slot)] = InputStats{};
  }
  // From now on, projection `index` (layer * 7 + q, k, v, o, gate, up, down) computes with these codes.
  void substitute(int64_t index, model::HostQuantLinear q) { substitutes_[index] = std::move(q); }

 private:
  static void accumulate(InputStats& s, const TensorView& x) {
    const int64_t m = x.dim(0), k = x.dim(1);
    const float* xf = x.as<const float>();
    if (s.k == 0) {
      s.k = k;
      s.h.assign(static_cast<size_t>(k * k), 0.0);
      s.abs_sum.assign(static_cast<size_t>(k), 0.0);
      s.abs_max.assign(static_cast<size_t>(k), 0.0);
    }
    std::vector<double> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) row[static_cast<size_t>(i)] = xf[r * k + i];
      for (int64_t i = 0; i < k; ++i) {
        const double xi = row[static_cast<size_t>(i)];
        s.abs_sum[static_cast<size_t>(i)] += std::fabs(xi);
        s.abs_max[static_cast<size_t>(i)] = std::max(s.abs_max[static_cast<size_t>(i)], std::fabs(xi));
        double* hi = s.h.data() + i * k;
        for (int64_t j = 0; j <= i; ++j) hi[j] += xi * row[static_cast<size_t>(j)];
      }
    }
    s.rows += m;
  }

  ops::Backend& inner_;
  std::vector<InputStats> stats_;  // [layer][attn_in, o_in, mlp_in, down_in]
  std::map<int64_t, model::HostQuantLinear> substitutes_;
  int64_t call_ = 0;
  int64_t only_ = -1;
  bool capturing_ = false;
};

std::string read_calibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, "--calibration: " + path + ": not found");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw Error(ErrorCode::kFormatError, "--calibration: " + path + ": not valid JSON: " + e.what());
    }
    if (!j.is_array()) throw Error(ErrorCode::kFormatError, "--calibration: " + path + ": expected a list of {\"text\": ...}");
    std::string joined;
    for (const json& e : j)
      if (e.is_object() && e.contains("text") && e["text"].is_string()) joined += (joined.empty() ? "" : "\n\n") + e["text"].get<std::string>();
    return joined;
  }
  return text;
}

// Fills lower-triangle-accumulated H to a full symmetric matrix.
void symmetrize(InputStats& s) {
  for (int64_t i = 0; i < s.k; ++i)
    for (int64_t j = i + 1; j < s.k; ++j) s.h[static_cast<size_t>(i * s.k + j)] = s.h[static_cast<size_t>(j * s.k + i)];
}

// In-place lower Cholesky of a K x K SPD matrix; false when not positive definite.
bool cholesky(std::vector<double>& a, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    double d = a[static_cast<size_t>(j * k + j)];
    for (int64_t p = 0; p < j; ++p) d -= a[static_cast<size_t>(j * k + p)] * a[static_cast<size_t>(j * k + p)];
    if (!(d > 0)) return false;
    d = std::sqrt(d);
    a[static_cast<size_t>(j * k + j)] = d;
    for (int64_t i = j + 1; i < k; ++i) {
      double v = a[static_cast<size_t>(i * k + j)];
      for (int64_t p = 0; p < j; ++p) v -= a[static_cast<size_t>(i * k + p)] * a[static_cast<size_t>(j * k + p)];
      a[static_cast<size_t>(i * k + j)] = v / d;
    }
    for (int64_t i = 0; i < j; ++i) a[static_cast<size_t>(i * k + j)] = 0;
  }
  return true;
}

// Upper factor U of H⁻¹ = Uᵀ U (GPTQ's Hinv), with damping; dead inputs (zero diagonal) get 1.
std::vector<double> gptq_hinv_upper(const InputStats& s) {
  const int64_t k = s.k;
  std::vector<double> h = s.h;
  double mean_diag = 0;
  for (int64_t i = 0; i < k; ++i) mean_diag += h[static_cast<size_t>(i * k + i)];
  mean_diag /= static_cast<double>(k);
  for (double damp = 0.01;; damp *= 10) {
    std::vector<double> a = h;
    for (int64_t i = 0; i < k; ++i) {
      double& d = a[static_cast<size_t>(i * k + i)];
      if (d == 0) d = 1;
      d += damp * (mean_diag > 0 ? mean_diag : 1);
    }
    if (!cholesky(a, k)) {
      if (damp > 10) throw Error(ErrorCode::kInternal, "gptq: the calibration Hessian is not positive definite");
      continue;
    }
    // Linv = L⁻¹ (lower), then Hinv = Linvᵀ Linv, then its Cholesky, transposed to upper.
    std::vector<double> linv(static_cast<size_t>(k * k), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      linv[static_cast<size_t>(j * k + j)] = 1.0 / a[static_cast<size_t>(j * k + j)];
      for (int64_t i = j + 1; i < k; ++i) {
        double v = 0;
        for (int64_t p = j; p < i; ++p) v -= a[static_cast<size_t>(i * k + p)] * linv[static_cast<size_t>(p * k + j)];
        linv[static_cast<size_t>(i * k + j)] = v / a[static_cast<size_t>(i * k + i)];
      }
    }
    std::vector<double> hinv(static_cast<size_t>(k * k), 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double v = 0;
        for (int64_t p = i; p < k; ++p) v += linv[static_cast<size_t>(p * k + i)] * linv[static_cast<size_t>(p * k + j)];
        hinv[static_cast<size_t>(i * k + j)] = hinv[static_cast<size_t>(j * k + i)] = v;
      }
    if (!cholesky(hinv, k)) continue;
    std::vector<double> u(static_cast<size_t>(k * k), 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j <= i; ++j) u[static_cast<size_t>(j * k + i)] = hinv[static_cast<size_t>(i * k + j)];
    return u;
  }
}

float round_to(DType t, float v) {
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// Scale and zero of one group's values (compressed-tensors' minmax observer), the scale rounded to the checkpoint dtype.
// `clip` < 1 shrinks the range first (AWQ's clipping search); values outside it take the end codes.
void group_params(const float* v, int64_t count, int64_t stride, int bits, bool asym, DType scale_dtype, float* scale,
                  float* zero, float clip = 1.0f) {
  const float qmax = static_cast<float>((1 << bits) - 1);
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < count; ++i) {
    lo = std::min(lo, v[i * stride]);
    hi = std::max(hi, v[i * stride]);
  }
  lo *= clip;
  hi *= clip;
  float s = asym ? (hi - lo) / qmax : std::max(hi, -lo) / (qmax / 2.0f);
  s = round_to(scale_dtype, s);
  if (!(s > 0)) s = 1;
  *scale = s;
  *zero = asym ? std::clamp(std::nearbyint(-lo / s), 0.0f, qmax) : static_cast<float>(1 << (bits - 1));
}

uint32_t quantize_value(float w, float scale, float zero, int bits) {
  const float qmax = static_cast<float>((1 << bits) - 1);
  return static_cast<uint32_t>(std::clamp(std::nearbyint(w / scale) + zero, 0.0f, qmax));
}

void set_code(model::HostQuantLinear& q, int64_t n, int64_t k, uint32_t code) {
  const int64_t i = n * q.k + k;
  if (q.codes_dtype == DType::kU8) {
    q.codes[static_cast<size_t>(i)] = static_cast<uint8_t>(code);
  } else {
    uint8_t& b = q.codes[static_cast<size_t>(i / 2)];
    b = (i % 2 == 0) ? static_cast<uint8_t>((b & 0xf0) | code) : static_cast<uint8_t>((b & 0x0f) | (code << 4));
  }
}

model::HostQuantLinear blank(int bits, int64_t n, int64_t k, int64_t group) {
  model::HostQuantLinear q;
  q.codes_dtype = bits == 4 ? DType::kI4 : DType::kU8;
  q.n = n;
  q.k = k;
  q.group_size = group <= 0 ? k : group;
  q.groups = (k + q.group_size - 1) / q.group_size;
  q.codes.assign(dtype_bytes(q.codes_dtype, static_cast<size_t>(n * k)), 0);
  q.scales.assign(static_cast<size_t>(n * q.groups), 0.0f);
  q.zeros.assign(static_cast<size_t>(n * q.groups), 0.0f);
  return q;
}

model::HostQuantLinear rtn(const std::vector<float>& w, int64_t n, int64_t k, int bits, int64_t group, bool asym,
                           DType scale_dtype) {
  model::HostQuantLinear q = blank(bits, n, k, group);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < q.groups; ++g) {
      const int64_t k0 = g * q.group_size, cnt = std::min(k, k0 + q.group_size) - k0;
      float s, z;
      group_params(w.data() + r * k + k0, cnt, 1, bits, asym, scale_dtype, &s, &z);
      q.scales[static_cast<size_t>(r * q.groups + g)] = s;
      q.zeros[static_cast<size_t>(r * q.groups + g)] = z;
      for (int64_t c = k0; c < k0 + cnt; ++c) set_code(q, r, c, quantize_value(w[static_cast<size_t>(r * k + c)], s, z, bits));
    }
  return q;
}

model::HostQuantLinear gptq(std::vector<float> w, int64_t n, int64_t k, int bits, int64_t group, bool asym,
                            DType scale_dtype, const InputStats& stats) {
  model::HostQuantLinear q = blank(bits, n, k, group);
  const std::vector<double> u = gptq_hinv_upper(stats);
  for (int64_t kk = 0; kk < k; ++kk)
    if (stats.h[static_cast<size_t>(kk * k + kk)] == 0)
      for (int64_t r = 0; r < n; ++r) w[static_cast<size_t>(r * k + kk)] = 0;
  std::vector<double> err(static_cast<size_t>(n));
  for (int64_t c = 0; c < k; ++c) {
    const int64_t g = c / q.group_size;
    if (c % q.group_size == 0) {
      const int64_t cnt = std::min(k, c + q.group_size) - c;
      for (int64_t r = 0; r < n; ++r)
        group_params(w.data() + r * k + c, cnt, 1, bits, asym, scale_dtype, &q.scales[static_cast<size_t>(r * q.groups + g)],
                     &q.zeros[static_cast<size_t>(r * q.groups + g)]);
    }
    const double d = u[static_cast<size_t>(c * k + c)];
    for (int64_t r = 0; r < n; ++r) {
      const float s = q.scales[static_cast<size_t>(r * q.groups + g)], z = q.zeros[static_cast<size_t>(r * q.groups + g)];
      const float v = w[static_cast<size_t>(r * k + c)];
      const uint32_t code = quantize_value(v, s, z, bits);
      set_code(q, r, c, code);
      err[static_cast<size_t>(r)] = (v - (static_cast<float>(code) - z) * s) / d;
    }
    const double* urow = u.data() + c * k;
    for (int64_t r = 0; r < n; ++r) {
      float* wr = w.data() + r * k;
      const double e = err[static_cast<size_t>(r)];
      for (int64_t j = c + 1; j < k; ++j) wr[j] -= static_cast<float>(e * urow[j]);
    }
  }
  return q;
}

// total + the quadratic form d·H·dᵀ over n entries, H row-major with leading dimension ld (each row's term added
// to total in order).
double quadratic_form(const double* h, int64_t ld, const double* d, int64_t n, double total = 0) {
  for (int64_t i = 0; i < n; ++i) {
    const double* hi = h + i * ld;
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += hi[j] * d[j];
    total += acc * d[i];
  }
  return total;
}

// AWQ's clipping search on RTN: per output row and group, the range max|w| (or [min, max]) is shrunk by the ratio
// in {1, 0.95, ..., 0.5} that minimises that group's own output error Δ H_gg Δᵀ, with H the input statistics of the
// scaled weights (H_ij / (s_i s_j) for AWQ's column scales s).
model::HostQuantLinear rtn_clipped(const std::vector<float>& w, int64_t n, int64_t k, int bits, int64_t group, bool asym,
                                   DType scale_dtype, const InputStats& stats, const std::vector<double>& col_scale) {
  model::HostQuantLinear q = blank(bits, n, k, group);
  std::vector<double> delta(static_cast<size_t>(q.group_size));
  for (int64_t g = 0; g < q.groups; ++g) {
    const int64_t k0 = g * q.group_size, cnt = std::min(k, k0 + q.group_size) - k0;
    std::vector<double> hg(static_cast<size_t>(cnt * cnt));  // the group's block of H, for the scaled inputs
    for (int64_t i = 0; i < cnt; ++i)
      for (int64_t j = 0; j < cnt; ++j)
        hg[static_cast<size_t>(i * cnt + j)] = stats.h[static_cast<size_t>((k0 + i) * k + k0 + j)] /
                                               (col_scale[static_cast<size_t>(k0 + i)] * col_scale[static_cast<size_t>(k0 + j)]);
    for (int64_t r = 0; r < n; ++r) {
      const float* v = w.data() + r * k + k0;
      double best = -1;
      float best_s = 1, best_z = 0;
      for (int step = 0; step <= 10; ++step) {
        float sc, z;
        group_params(v, cnt, 1, bits, asym, scale_dtype, &sc, &z, 1.0f - 0.05f * static_cast<float>(step));
        for (int64_t i = 0; i < cnt; ++i)
          delta[static_cast<size_t>(i)] = v[i] - (static_cast<float>(quantize_value(v[i], sc, z, bits)) - z) * sc;
        const double err = quadratic_form(hg.data(), cnt, delta.data(), cnt);
        if (best < 0 || err < best) {
          best = err;
          best_s = sc;
          best_z = z;
        }
      }
      q.scales[static_cast<size_t>(r * q.groups + g)] = best_s;
      q.zeros[static_cast<size_t>(r * q.groups + g)] = best_z;
      for (int64_t c = k0; c < k0 + cnt; ++c)
        set_code(q, r, c, quantize_value(w[static_cast<size_t>(r * k + c)], best_s, best_z, bits));
    }
  }
  return q;
}

// tr((W - Q(W)) H (W - Q(W))ᵀ) for a dequantized Q(W) (rows of W scaled by `col_scale` per column, then unscaled).
double output_error(const std::vector<float>& w, int64_t n, int64_t k, const std::vector<double>& col_scale, int bits,
                    int64_t group, bool asym, DType scale_dtype, const InputStats& stats) {
  std::vector<float> scaled(w.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      scaled[static_cast<size_t>(r * k + c)] = static_cast<float>(w[static_cast<size_t>(r * k + c)] * col_scale[static_cast<size_t>(c)]);
  const model::HostQuantLinear q = rtn(scaled, n, k, bits, group, asym, scale_dtype);
  double total = 0;
  std::vector<double> d(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t g = c / q.group_size;
      const double deq = (model::code_at(q, r, c) - q.zeros[static_cast<size_t>(r * q.groups + g)]) *
                         static_cast<double>(q.scales[static_cast<size_t>(r * q.groups + g)]) / col_scale[static_cast<size_t>(c)];
      d[static_cast<size_t>(c)] = w[static_cast<size_t>(r * k + c)] - deq;
    }
    total = quadratic_form(stats.h.data(), k, d.data(), k, total);
  }
  return total;
}

// AWQ's per-input-channel scales for projections sharing one input.
std::vector<double> awq_scales(const std::vector<const std::vector<float>*>& ws, const std::vector<int64_t>& ns,
                               int64_t k, int bits, int64_t group, bool asym, DType scale_dtype, const InputStats& stats) {
  std::vector<double> mean(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c)
    mean[static_cast<size_t>(c)] = std::max(stats.abs_sum[static_cast<size_t>(c)] / std::max<int64_t>(1, stats.rows), 1e-8);
  std::vector<double> best(static_cast<size_t>(k), 1.0);
  double best_err = -1;
  for (int step = 0; step <= 20; step += 2) {
    const double alpha = step / 20.0;
    std::vector<double> s(static_cast<size_t>(k));
    double lo = 1e300, hi = 0;
    for (int64_t c = 0; c < k; ++c) {
      s[static_cast<size_t>(c)] = std::pow(mean[static_cast<size_t>(c)], alpha);
      lo = std::min(lo, s[static_cast<size_t>(c)]);
      hi = std::max(hi, s[static_cast<size_t>(c)]);
    }
    const double norm = std::sqrt(lo * hi);
    for (double& v : s) v /= norm;
    double err = 0;
    for (size_t i = 0; i < ws.size(); ++i) err += output_error(*ws[i], ns[i], k, s, bits, group, asym, scale_dtype, stats);
    if (best_err < 0 || err < best_err) {
      best_err = err;
      best = s;
    }
  }
  return best;
}

std::vector<float> to_f32(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  convert_to_f32(v.dtype, v.data, out.data(), out.size());
  return out;
}

struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::string st_dtype(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kF8E4M3: return "F8_E4M3";
    default: throw Error(ErrorCode::kInternal, "quantize: no safetensors name for a dtype");
  }
}

size_t write_safetensors(const fs::path& path, const std::vector<OutTensor>& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const OutTensor& t : tensors) {
    header[t.name] = {{"dtype", st_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::kIoError, path.string() + ": cannot be written");
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const OutTensor& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!out) throw Error(ErrorCode::kIoError, path.string() + ": write failed");
  return 8 + h.size() + offset;
}

template <typename T>
OutTensor make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  OutTensor t{name, dtype, std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

OutTensor float_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<float>& v) {
  OutTensor t{name, dtype, std::move(shape), {}};
  t.bytes.resize(dtype_bytes(dtype, v.size()));
  convert_from_f32(dtype, v.data(), t.bytes.data(), v.size());
  return t;
}

// compressed-tensors pack-quantized tensors of one projection (codes stored as unsigned = signed + 2^(bits-1)).
void pack_linear(const std::string& prefix, const model::HostQuantLinear& q, int bits, bool asym, DType scale_dtype,
                 std::vector<OutTensor>& out) {
  const int pack = 32 / bits;
  const int64_t words = q.k / pack;
  std::vector<int32_t> packed(static_cast<size_t>(q.n * words), 0);
  for (int64_t r = 0; r < q.n; ++r)
    for (int64_t w = 0; w < words; ++w) {
      uint32_t v = 0;
      for (int j = 0; j < pack; ++j) v |= static_cast<uint32_t>(model::code_at(q, r, w * pack + j)) << (bits * j);
      packed[static_cast<size_t>(r * words + w)] = static_cast<int32_t>(v);
    }
  out.push_back(make_tensor(prefix + ".weight_packed", DType::kI32, {q.n, words}, packed));
  out.push_back(float_tensor(prefix + ".weight_scale", scale_dtype, {q.n, q.groups}, q.scales));
  out.push_back(make_tensor(prefix + ".weight_shape", DType::kI64, {2}, std::vector<int64_t>{q.n, q.k}));
  if (asym) {
    const int64_t rows = (q.n + pack - 1) / pack;
    std::vector<int32_t> zp(static_cast<size_t>(rows * q.groups), 0);
    for (int64_t r = 0; r < q.n; ++r)
      for (int64_t g = 0; g < q.groups; ++g) {
        const uint32_t z = static_cast<uint32_t>(q.zeros[static_cast<size_t>(r * q.groups + g)]);
        zp[static_cast<size_t>((r / pack) * q.groups + g)] |= static_cast<int32_t>(z << (bits * (r % pack)));
      }
    out.push_back(make_tensor(prefix + ".weight_zero_point", DType::kI32, {rows, q.groups}, zp));
  }
}

// W8A8 per output channel, as compressed-tensors' minmax observer: int8 scale = max|row| / 127.5 and codes
// clamp(rint(w / s), -128, 127); fp8 scale = max|row| / 448 and codes e4m3(w / s); the scale rounded to the
// checkpoint dtype first (it is stored so), codes computed with the rounded scale.
model::HostQuantLinear rtn_8bit(const std::vector<float>& w, int64_t n, int64_t k, bool fp8, DType scale_dtype) {
  model::HostQuantLinear q;
  q.codes_dtype = fp8 ? DType::kF8E4M3 : DType::kI8;
  q.n = n;
  q.k = k;
  q.group_size = k;
  q.groups = 1;
  q.codes.resize(static_cast<size_t>(n * k));
  q.scales.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * k + c)]));
    float s = round_to(scale_dtype, amax / (fp8 ? 448.0f : 127.5f));
    if (!(s > 0)) s = 1;
    q.scales[static_cast<size_t>(r)] = s;
    for (int64_t c = 0; c < k; ++c) {
      const float v = w[static_cast<size_t>(r * k + c)] / s;
      q.codes[static_cast<size_t>(r * k + c)] =
          fp8 ? f32_to_fp8_e4m3(std::clamp(v, -448.0f, 448.0f))
              : static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(v), -128.0f, 127.0f)));
    }
  }
  return q;
}

// SmoothQuant's migration strength: s_j = max|X_j|^a / max|W_j|^(1 - a), a = 0.5 (the paper's default for
// Llama-like models); X / s is folded into the producer of the input, W * s into the consumers.
constexpr double kSmoothAlpha = 0.5;

std::vector<double> smooth_scales(const std::vector<const std::vector<float>*>& ws, int64_t k, const InputStats& st) {
  std::vector<double> wmax(static_cast<size_t>(k), 0.0), s(static_cast<size_t>(k), 1.0);
  for (const std::vector<float>* w : ws)
    for (size_t i = 0; i < w->size(); ++i)
      wmax[i % static_cast<size_t>(k)] = std::max(wmax[i % static_cast<size_t>(k)], std::fabs(static_cast<double>((*w)[i])));
  for (int64_t j = 0; j < k; ++j) {
    const double x = st.abs_max[static_cast<size_t>(j)], wm = wmax[static_cast<size_t>(j)];
    if (x > 0 && wm > 0) s[static_cast<size_t>(j)] = std::clamp(std::pow(x, kSmoothAlpha) / std::pow(wm, 1 - kSmoothAlpha), 1e-5, 1e5);
  }
  return s;
}

}  // namespace

QuantizeReport quantize_model(const QuantizeConfig& cfg) {
  const fs::path dir = cfg.model, out_dir = cfg.out;
  int bits = 0;
  const bool w8a8 = cfg.scheme == "w8a8-int8" || cfg.scheme == "fp8";
  const bool fp8 = cfg.scheme == "fp8";
  const bool w4a8 = cfg.scheme == "w4a8";
  if (cfg.scheme == "w4a16" || w4a8) bits = 4;
  else if (cfg.scheme == "w8a16" || w8a8) bits = 8;
  else throw Error(ErrorCode::kInvalidArgument, "--scheme '" + cfg.scheme + "': expected w4a16, w8a16, w4a8, w8a8-int8 or fp8");
  std::string format = w4a8 ? (cfg.format.empty() ? "int-quantized" : cfg.format) : cfg.format;
  if (!format.empty() && !(w4a8 && (format == "int-quantized" || format == "pack-quantized")))
    throw Error(ErrorCode::kInvalidArgument, "--format '" + cfg.format + "' with --scheme " + cfg.scheme +
                                                 (w4a8 ? ": expected int-quantized or pack-quantized"
                                                       : ": the scheme has one format (--format is for w4a8)"));
  if (w4a8) {
    if (cfg.method != "rtn" && cfg.method != "smoothquant" && cfg.method != "gptq" && cfg.method != "awq")
      throw Error(ErrorCode::kInvalidArgument, "--method '" + cfg.method + "' with --scheme w4a8: expected rtn, smoothquant, gptq or awq");
    if (!cfg.symmetric) throw Error(ErrorCode::kInvalidArgument, "--asymmetric: --scheme w4a8 is symmetric");
  } else if (w8a8) {
    if (cfg.method != "rtn" && !(cfg.method == "smoothquant" && !fp8))
      throw Error(ErrorCode::kInvalidArgument, "--method '" + cfg.method + "' with --scheme " + cfg.scheme + ": expected rtn" +
                                                   (fp8 ? "" : " or smoothquant"));
    if (!cfg.symmetric) throw Error(ErrorCode::kInvalidArgument, "--asymmetric: --scheme " + cfg.scheme + " is symmetric");
  } else if (cfg.method != "rtn" && cfg.method != "awq" && cfg.method != "gptq") {
    throw Error(ErrorCode::kInvalidArgument, "--method '" + cfg.method + "': expected rtn, awq or gptq");
  }
  if (cfg.gptq_sequential && cfg.method != "gptq")
    throw Error(ErrorCode::kInvalidArgument, "--gptq-sequential: --method is '" + cfg.method + "', not gptq");
  if (cfg.group_size != -1 && cfg.group_size <= 0)
    throw Error(ErrorCode::kInvalidArgument, "--group-size must be positive or -1");
  if (cfg.method != "rtn" && cfg.calibration.empty())
    throw Error(ErrorCode::kInvalidArgument, "--method " + cfg.method + " needs --calibration FILE");
  if (out_dir.empty()) throw Error(ErrorCode::kInvalidArgument, "--out is required");
  if (fs::exists(out_dir) && fs::equivalent(out_dir, dir))
    throw Error(ErrorCode::kInvalidArgument, "--out must differ from --model");
  const io::ModelConfig mc = io::load_model_config(dir);
  if (mc.quant.quantized())
    throw Error(ErrorCode::kInvalidArgument, (dir / "config.json").string() + " is already quantized (quant_method '" +
                                                 mc.quant_method + "')");
  const int64_t h = mc.hidden_size, f = mc.intermediate_size, hd = mc.head_dim;
  const int64_t nq = mc.num_attention_heads * hd, nkv = mc.num_key_value_heads * hd;
  const int64_t group = w8a8 ? -1 : cfg.group_size;  // W8A8: one scale per output channel
  for (int64_t k : {h, f, nq})
    if (k % (32 / bits) != 0 || (group > 0 && k % group != 0))
      throw Error(ErrorCode::kInvalidArgument, "--group-size " + std::to_string(group) + ": input size " + std::to_string(k) +
                                                   " of a projection is not a multiple of it (or of " + std::to_string(32 / bits) + ")");
  const io::WeightStore src = io::WeightStore::open(dir);
  const DType scale_dtype = mc.torch_dtype;
  const bool asym = !cfg.symmetric;
  QuantizeReport report;

  // Calibration statistics: the dense model run over the calibration text on the CPU backend, each projection's
  // input captured. Sequential GPTQ re-runs it per layer input, with the projections quantized so far computing
  // from their codes (the inputs a quantized model really sees, as GPTQ's "true sequential" order does).
  std::vector<InputStats> stats;
  const bool sequential = cfg.method == "gptq" && cfg.gptq_sequential;
  std::unique_ptr<ops::Backend> cpu;
  std::unique_ptr<CaptureBackend> cap;
  std::unique_ptr<model::Model> calib_model;
  std::vector<ops::DeviceBuffer> pools;
  std::vector<model::KvLayer> kv;
  std::vector<int32_t> ids;
  const int64_t ctx = std::max(16, cfg.calibration_context), block = 16, nb = (ctx + block - 1) / block;
  auto run_calibration = [&](size_t pass, size_t passes) {
    const size_t windows = (ids.size() + static_cast<size_t>(ctx) - 1) / static_cast<size_t>(ctx);
    for (size_t wi = 0; wi < windows; ++wi) {
      const size_t b = wi * static_cast<size_t>(ctx), e = std::min(ids.size(), b + static_cast<size_t>(ctx));
      const int32_t t = static_cast<int32_t>(e - b);
      std::vector<int32_t> tokens(ids.begin() + static_cast<std::ptrdiff_t>(b), ids.begin() + static_cast<std::ptrdiff_t>(e));
      std::vector<int32_t> pos(static_cast<size_t>(t)), qsl = {0, t}, lens = {t}, table(static_cast<size_t>(nb));
      for (int32_t i = 0; i < t; ++i) pos[static_cast<size_t>(i)] = i;
      for (int64_t i = 0; i < nb; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      model::StepInputs in;
      in.token_ids = TensorView(tokens.data(), DType::kI32, {t});
      in.positions = TensorView(pos.data(), DType::kI32, {t});
      in.slot_mapping = TensorView(pos.data(), DType::kI32, {t});
      in.query_start_loc = TensorView(qsl.data(), DType::kI32, {2});
      in.seq_lens = TensorView(lens.data(), DType::kI32, {1});
      in.block_tables = TensorView(table.data(), DType::kI32, {1, nb});
      in.max_query_len = t;
      in.max_seq_len = t;
      calib_model->prepare_step(t);
      cap->begin_forward();
      calib_model->forward(in, kv);
      cap->synchronize();
      cap->end_forward();
      if (pass == 0) report.calibration_tokens += t;
      if (cfg.on_progress) cfg.on_progress("calibrating", pass * windows + wi + 1, passes * windows);
    }
  };
  if (cfg.method != "rtn") {
    const std::string text = read_calibration(cfg.calibration);
    auto tok = Tokenizer::load(cfg.model);
    ids = tok->encode(text, true);
    if (static_cast<int64_t>(ids.size()) > cfg.calibration_tokens) ids.resize(static_cast<size_t>(cfg.calibration_tokens));
    if (ids.size() < 16) throw Error(ErrorCode::kInvalidArgument, "--calibration: " + cfg.calibration + " has too little text");
    cpu = engine::create_backend(engine::resolve_device("cpu", "float32", mc.torch_dtype), cfg.num_threads);
    cap = std::make_unique<CaptureBackend>(*cpu, mc.num_hidden_layers);
    model::ModelOptions mo;
    mo.max_num_tokens = static_cast<int>(ctx);
    mo.max_logits_rows = 1;
    calib_model = model::load_model(dir, *cap, mo);
    for (int64_t l = 0; l < mc.num_hidden_layers; ++l) {
      model::KvLayer layer;
      for (TensorView* t : {&layer.k, &layer.v}) {
        pools.emplace_back(*cap, static_cast<size_t>(nb * block * mc.num_key_value_heads * hd * 4));
        *t = TensorView(pools.back().data(), DType::kF32, {nb, block, mc.num_key_value_heads, hd});
      }
      kv.push_back(layer);
    }
    if (!sequential) {
      run_calibration(0, 1);
      stats = std::move(cap->stats());
      for (InputStats& s : stats) {
        if (s.k == 0) throw Error(ErrorCode::kInternal, "quantize: a projection's input was not captured");
        symmetrize(s);
      }
    } else {
      stats.resize(static_cast<size_t>(mc.num_hidden_layers * 4));
    }
  }
  size_t pass = 0;
  int64_t slot_ready = -1;
  // Sequential GPTQ: the statistics of one layer input, captured with every projection before it quantized.
  auto sequential_stats = [&](int64_t slot) {
    if (slot == slot_ready) return;
    if (slot_ready >= 0) stats[static_cast<size_t>(slot_ready)] = InputStats{};  // its projections are done
    cap->capture_only(slot);
    run_calibration(pass++, static_cast<size_t>(mc.num_hidden_layers * 4));
    InputStats& st = cap->stats()[static_cast<size_t>(slot)];
    if (st.k == 0) throw Error(ErrorCode::kInternal, "quantize: a projection's input was not captured");
    symmetrize(st);
    stats[static_cast<size_t>(slot)] = std::move(st);
    slot_ready = slot;
  };

  // Dense tensors (norms possibly rescaled by AWQ), then the projections.
  std::map<std::string, std::vector<float>> modified;  // AWQ: norm weights and up_proj with folded scales
  std::vector<OutTensor> out;
  const int64_t layers = mc.num_hidden_layers;
  const size_t total_linears = static_cast<size_t>(layers * 7);
  size_t done = 0;
  std::vector<std::pair<std::string, model::HostQuantLinear>> quantized;
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    struct Proj {
      std::string name;
      int64_t n, k;
      int input;  // stats slot: 0 attn_in, 1 o_in, 2 mlp_in, 3 down_in
    };
    const Proj projs[7] = {{"self_attn.q_proj", nq, h, 0}, {"self_attn.k_proj", nkv, h, 0}, {"self_attn.v_proj", nkv, h, 0},
                           {"self_attn.o_proj", h, nq, 1},  {"mlp.gate_proj", f, h, 2},     {"mlp.up_proj", f, h, 2},
                           {"mlp.down_proj", h, f, 3}};
    std::map<std::string, std::vector<float>> w;
    for (const Proj& pr : projs) w[pr.name] = to_f32(src.view(p + pr.name + ".weight", {pr.n, pr.k}));
    std::map<int, std::vector<double>> col_scales;  // AWQ: each scaled input's channel scales (o_proj's: none)
    if (cfg.method == "awq" || cfg.method == "smoothquant") {
      auto fold = [&](const std::vector<std::string>& names, int input, const std::string& into, int64_t k) {
        std::vector<const std::vector<float>*> ws;
        std::vector<int64_t> ns;
        for (const std::string& nm : names) {
          ws.push_back(&w[nm]);
          for (const Proj& pr : projs)
            if (pr.name == nm) ns.push_back(pr.n);
        }
        const InputStats& st = stats[static_cast<size_t>(l * 4 + input)];
        const std::vector<double> s = cfg.method == "smoothquant" ? smooth_scales(ws, k, st)
                                                                  : awq_scales(ws, ns, k, bits, group, asym, scale_dtype, st);
        col_scales[input] = s;
        for (const std::string& nm : names)
          for (int64_t r = 0; r < static_cast<int64_t>(w[nm].size()) / k; ++r)
            for (int64_t c = 0; c < k; ++c) w[nm][static_cast<size_t>(r * k + c)] = static_cast<float>(w[nm][static_cast<size_t>(r * k + c)] * s[static_cast<size_t>(c)]);
        // The inverse goes into the producer of the input: a norm weight ([k]) or up_proj's rows ([k, h]).
        std::vector<float>& target = into == "mlp.up_proj" ? w["mlp.up_proj"] : modified[p + into];
        if (into != "mlp.up_proj") target = to_f32(src.view(p + into, {k}));
        const int64_t cols = static_cast<int64_t>(target.size()) / k;
        for (int64_t r = 0; r < k; ++r)
          for (int64_t c = 0; c < cols; ++c) target[static_cast<size_t>(r * cols + c)] = static_cast<float>(target[static_cast<size_t>(r * cols + c)] / s[static_cast<size_t>(r)]);
      };
      fold({"mlp.down_proj"}, 3, "mlp.up_proj", f);  // before gate/up are scaled: up's rows carry 1/s
      fold({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, 0, "input_layernorm.weight", h);
      fold({"mlp.gate_proj", "mlp.up_proj"}, 2, "post_attention_layernorm.weight", h);
    }
    for (size_t pi = 0; pi < 7; ++pi) {
      const Proj& pr = projs[pi];
      if (sequential) sequential_stats(l * 4 + pr.input);
      // AWQ clips every projection but q and k (whose errors the attention scores amplify), as its authors do.
      const bool clip = cfg.method == "awq" && !w8a8 && pr.name != "self_attn.q_proj" && pr.name != "self_attn.k_proj";
      static const InputStats kNone;
      const InputStats& st = stats.empty() ? kNone : stats[static_cast<size_t>(l * 4 + pr.input)];
      model::HostQuantLinear q =
          w8a8                 ? rtn_8bit(w[pr.name], pr.n, pr.k, fp8, scale_dtype)
          : cfg.method == "gptq" ? gptq(w[pr.name], pr.n, pr.k, bits, group, asym, scale_dtype, st)
          : clip ? rtn_clipped(w[pr.name], pr.n, pr.k, bits, group, asym, scale_dtype, st,
                               col_scales.count(pr.input) ? col_scales[pr.input]
                                                          : std::vector<double>(static_cast<size_t>(pr.k), 1.0))
                 : rtn(w[pr.name], pr.n, pr.k, bits, group, asym, scale_dtype);
      if (sequential) cap->substitute(l * 7 + static_cast<int64_t>(pi), q);
      quantized.emplace_back(p + pr.name, std::move(q));
      if (cfg.on_progress) cfg.on_progress("quantizing", ++done, total_linears);
    }
  }
  std::vector<std::string> names = src.names();
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    bool is_proj = false;
    for (const auto& [pn, q] : quantized)
      if (name == pn + ".weight") is_proj = true;
    if (is_proj) continue;
    const io::TensorInfo& t = src.get(name);
    auto it = modified.find(name);
    if (it != modified.end()) {
      out.push_back(float_tensor(name, t.dtype, t.shape, it->second));
    } else {
      OutTensor o{name, t.dtype, t.shape, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(t.data),
                                                                reinterpret_cast<const uint8_t*>(t.data) + t.bytes)};
      out.push_back(std::move(o));
    }
  }
  for (const auto& [pn, q] : quantized) {
    if (w8a8) {  // naive_quantized: the codes as they are, one scale per output channel
      out.push_back(make_tensor(pn + ".weight", q.codes_dtype, {q.n, q.k}, q.codes));
      out.push_back(float_tensor(pn + ".weight_scale", scale_dtype, {q.n, 1}, q.scales));
    } else if (w4a8 && format == "int-quantized") {  // one int8 per int4 value (code - 8), scales per group
      std::vector<int8_t> v(static_cast<size_t>(q.n * q.k));
      for (int64_t r = 0; r < q.n; ++r)
        for (int64_t c = 0; c < q.k; ++c) v[static_cast<size_t>(r * q.k + c)] = static_cast<int8_t>(model::code_at(q, r, c) - 8);
      out.push_back(make_tensor(pn + ".weight", DType::kI8, {q.n, q.k}, v));
      out.push_back(float_tensor(pn + ".weight_scale", scale_dtype, {q.n, q.groups}, q.scales));
    } else {
      pack_linear(pn, q, bits, asym, scale_dtype, out);
    }
  }
  report.quantized_linears = static_cast<int>(quantized.size());

  fs::create_directories(out_dir);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string fname = entry.path().filename().string();
    if (!entry.is_regular_file() || fname == "config.json" || entry.path().extension() == ".safetensors" ||
        fname == "model.safetensors.index.json" || fname == "reference.json" || fname.find("reference") != std::string::npos)
      continue;
    fs::copy_file(entry.path(), out_dir / fname, fs::copy_options::overwrite_existing);
  }
  json config = json::parse(io::read_text_file(dir / "config.json"));
  json weights = {{"num_bits", bits},        {"type", "int"},        {"symmetric", !asym},
                  {"group_size", group > 0 ? json(group) : json(nullptr)},
                  {"strategy", group > 0 ? "group" : "channel"},     {"block_structure", nullptr},
                  {"dynamic", false},        {"actorder", nullptr},  {"observer", "minmax"},
                  {"observer_kwargs", json::object()}};
  json acts = nullptr;
  if (!w4a8) format = "pack-quantized";
  if (w4a8) {  // compressed-tensors' W4A8 preset (int4 symmetric weights, int8 activations dynamic per token)
    acts = {{"num_bits", 8},        {"type", "int"},        {"symmetric", true}, {"group_size", nullptr},
            {"strategy", "token"},  {"block_structure", nullptr}, {"dynamic", true}, {"actorder", nullptr},
            {"observer", nullptr},  {"observer_kwargs", json::object()}};
  }
  if (w8a8) {  // compressed-tensors INT8_W8A8 / FP8_DYNAMIC presets
    const char* type = fp8 ? "float" : "int";
    format = fp8 ? "float-quantized" : "int-quantized";
    weights["type"] = type;
    acts = {{"num_bits", 8},        {"type", type},         {"symmetric", true}, {"group_size", nullptr},
            {"strategy", "token"},  {"block_structure", nullptr}, {"dynamic", true}, {"actorder", nullptr},
            {"observer", nullptr},  {"observer_kwargs", json::object()}};
  }
  config["quantization_config"] = {
      {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", acts},
                                      {"output_activations", nullptr}, {"format", format}}}}},
      {"format", format}, {"global_compression_ratio", nullptr}, {"ignore", {"lm_head"}},
      {"kv_cache_scheme", nullptr}, {"quant_method", "compressed-tensors"}, {"quantization_status", "compressed"}};
  {
    std::ofstream cf(out_dir / "config.json", std::ios::trunc);
    cf << config.dump(2) << "\n";
    if (!cf) throw Error(ErrorCode::kIoError, (out_dir / "config.json").string() + ": write failed");
  }
  report.bytes_in = src.total_bytes();
  report.bytes_out = write_safetensors(out_dir / "model.safetensors", out);
  return report;
}

}  // namespace peregrine
