// Linear: one projection of a model (y = x · Wᵀ + b) as the backend computes it: the weight (float, or
// quantized codes with their scales, zeros and permutation), an optional bias, and how it is quantized. Every
// projection of an architecture is one, so a quantized checkpoint changes what the loader fills in, not the
// layers.
#pragma once

#include "ops/ops.h"

namespace peregrine::model {

struct Linear {
  TensorView weight;       // [N, K]: float values, or codes when quant.quantized() (see ops::WeightQuant)
  TensorView bias;         // [N] or empty
  ops::WeightQuant quant;  // not quantized unless scales are set

  int64_t out_features() const { return weight.dim(0); }
  int64_t in_features() const {
    if (!quant.ggml_blocks()) return weight.dim(1);
    const GgmlBlockInfo b = *ggml_block_info(quant.ggml);
    return weight.dim(1) / b.type_size * b.block_size;
  }
  // The matmul out = x · Wᵀ (+ bias).
  ops::MatmulParams operator()(const TensorView& x, const TensorView& out) const { return {x, weight, bias, out, quant}; }
};

}  // namespace peregrine::model
