// Weights of the Llama family (Llama, Mistral, Qwen2, Qwen3) as views on the backend: mmapped safetensors
// used in place on host backends, or uploaded/converted copies owned here. HF names: model.layers.{i}.*.
#pragma once

#include <memory>
#include <vector>

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "ops/backend.h"

namespace peregrine::model {

struct LayerWeights {
  TensorView input_norm;  // [hidden]
  TensorView q_proj;      // [num_heads * head_dim, hidden]
  TensorView k_proj;      // [num_kv_heads * head_dim, hidden]
  TensorView v_proj;      // [num_kv_heads * head_dim, hidden]
  TensorView o_proj;      // [hidden, num_heads * head_dim]
  TensorView q_bias;      // [num_heads * head_dim] or empty
  TensorView k_bias;      // [num_kv_heads * head_dim] or empty
  TensorView v_bias;      // [num_kv_heads * head_dim] or empty
  TensorView o_bias;      // [hidden] or empty
  TensorView q_norm;      // [head_dim] (Qwen3) or empty
  TensorView k_norm;      // [head_dim] (Qwen3) or empty
  TensorView post_norm;   // [hidden]
  TensorView gate_proj;   // [intermediate, hidden]
  TensorView up_proj;     // [intermediate, hidden]
  TensorView down_proj;   // [hidden, intermediate]
  TensorView gate_bias;   // [intermediate] or empty (mlp_bias)
  TensorView up_bias;     // [intermediate] or empty
  TensorView down_bias;   // [hidden] or empty
};

struct LlamaWeights {
  TensorView embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  TensorView final_norm;    // [hidden]
  TensorView lm_head;       // [vocab, hidden]; the embedding when tied

  // Owners of what the views point to.
  std::unique_ptr<io::WeightStore> store;       // the mmapped files (may be null for random weights)
  std::vector<ops::DeviceBuffer> buffers;       // uploaded or converted copies
  size_t total_bytes = 0;
};

// Loads weights from safetensors; every tensor is checked against the config's shapes.
LlamaWeights load_llama_weights(const io::ModelConfig& config, const std::filesystem::path& dir,
                                ops::Backend& backend, const ModelOptions& options);
// Random weights (uniform, scaled by 1/sqrt(fan_in)) in the config's dtype, for benchmarks.
LlamaWeights make_random_llama_weights(const io::ModelConfig& config, ops::Backend& backend,
                                       const ModelOptions& options);

}  // namespace peregrine::model
