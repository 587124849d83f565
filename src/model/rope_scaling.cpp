// RoPE inverse frequencies per scaling type (see rope_scaling.h). Formulas follow the published methods:
// linear position interpolation, dynamic NTK base rescaling, Llama 3.1 wavelength bands, YaRN ramps.
#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace peregrine::model {
namespace {

std::vector<double> base_inv_freq(double base, int64_t dim) {
  std::vector<double> out(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    // Hugging Face evaluates base ** (2i / dim) in float32.
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<size_t>(i)] = 1.0 / static_cast<double>(std::pow(static_cast<float>(base), exponent));
  }
  return out;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

RopeTables compute_rope_tables(const io::ModelConfig& c, int64_t seq_len) {
  const io::RopeConfig& r = c.rope;
  const int64_t dim = c.rotary_dim();
  RopeTables t;
  std::vector<double> inv = base_inv_freq(r.theta, dim);
  if (!r.freq_factors.empty()) {
    PEREGRINE_CHECK(r.freq_factors.size() == inv.size(), "rope freq_factors must hold rotary_dim / 2 values");
    for (size_t i = 0; i < inv.size(); ++i) inv[i] /= static_cast<double>(r.freq_factors[i]);
  }
  switch (r.type) {
    case io::RopeType::kDefault: break;
    case io::RopeType::kLinear:
      for (double& f : inv) f /= r.factor;
      break;
    case io::RopeType::kDynamic: {
      double max_pos = static_cast<double>(r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                                                 : c.max_position_embeddings);
      double len = std::max(static_cast<double>(seq_len), max_pos);
      double base = r.theta * std::pow(r.factor * len / max_pos - (r.factor - 1), static_cast<double>(dim) / (dim - 2));
      inv = base_inv_freq(base, dim);
      break;
    }
    case io::RopeType::kLlama3: {
      double old_len = static_cast<double>(r.original_max_position_embeddings);
      double low_wavelen = old_len / r.low_freq_factor;
      double high_wavelen = old_len / r.high_freq_factor;
      for (double& f : inv) {
        double wavelen = 2 * M_PI / f;
        if (wavelen > low_wavelen) {
          f = f / r.factor;
        } else if (wavelen >= high_wavelen) {
          double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          f = (1 - smooth) * f / r.factor + smooth * f;
        }
      }
      break;
    }
    case io::RopeType::kYarn: {
      double factor = r.factor;
      double original = static_cast<double>(c.max_position_embeddings);
      if (r.original_max_position_embeddings > 0) original = static_cast<double>(r.original_max_position_embeddings);
      double attention = 1.0;
      if (r.attention_factor) {
        attention = *r.attention_factor;
      } else if (r.mscale && r.mscale_all_dim && *r.mscale != 0 && *r.mscale_all_dim != 0) {
        attention = yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim);
      } else {
        attention = yarn_mscale(factor, 1.0);
      }
      auto correction_dim = [&](double rotations) {
        return (dim * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(r.theta));
      };
      double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
      if (r.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (size_t i = 0; i < inv.size(); ++i) {
        double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        double extrapolation_weight = 1.0 - ramp;
        double extrapolated = inv[i], interpolated = inv[i] / factor;
        inv[i] = interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight;
      }
      t.attention_scaling = static_cast<float>(attention);
      break;
    }
  }
  t.inv_freq.assign(inv.begin(), inv.end());
  return t;
}

}  // namespace peregrine::model
