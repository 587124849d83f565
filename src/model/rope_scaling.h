// RoPE frequencies for every scaling type the loader accepts (default, linear, dynamic NTK, llama3, YaRN),
// computed the way Hugging Face transformers computes them, so positions rotate identically.
#pragma once

#include <vector>

#include "io/hf_config.h"

namespace peregrine::model {

struct RopeTables {
  std::vector<float> inv_freq;      // [rotary_dim / 2]
  float attention_scaling = 1.0f;   // multiplies cos and sin (YaRN mscale)
};

// seq_len matters only for dynamic NTK (the longest context in the step; ignored by other types).
RopeTables compute_rope_tables(const io::ModelConfig& config, int64_t seq_len = 0);

}  // namespace peregrine::model
