// Weights of the Llama family (Llama, Mistral, Qwen2, Qwen3) as views on the backend: the checkpoint's mapped
// tensors used in place on host backends, or uploaded/converted copies owned here. HF names: model.layers.{i}.*.
#pragma once

#include <memory>
#include <vector>

#include "io/hf_config.h"
#include "io/weight_source.h"
#include "model/linear.h"
#include "model/model.h"
#include "ops/backend.h"

namespace peregrine::model {

struct LayerWeights {
  TensorView input_norm;  // [hidden]
  Linear q_proj;          // [num_heads * head_dim, hidden], bias when attention_bias
  Linear k_proj;          // [num_kv_heads * head_dim, hidden]
  Linear v_proj;          // [num_kv_heads * head_dim, hidden]
  Linear o_proj;          // [hidden, num_heads * head_dim]
  TensorView q_norm;      // [head_dim] (Qwen3) or empty
  TensorView k_norm;      // [head_dim] (Qwen3) or empty
  TensorView post_norm;   // [hidden]
  Linear gate_proj;       // [intermediate, hidden], bias when mlp_bias
  Linear up_proj;         // [intermediate, hidden]
  Linear down_proj;       // [hidden, intermediate]
};

struct LlamaWeights {
  TensorView embed_tokens;  // [vocab, hidden]; u8 [vocab, row bytes] of ggml blocks when embed_ggml is set
  GgmlType embed_ggml = GgmlType::kNone;
  std::vector<LayerWeights> layers;
  TensorView final_norm;    // [hidden]
  Linear lm_head;           // [vocab, hidden]; the embedding when tied

  // Owners of what the views point to.
  std::unique_ptr<io::WeightSource> source;     // the checkpoint (may be null for random weights)
  std::vector<ops::DeviceBuffer> buffers;       // uploaded or converted copies
  size_t total_bytes = 0;
};

// Loads weights from a checkpoint (it is kept alive by the result); every tensor is checked against the config's
// shapes. `where` names the checkpoint in errors (the model folder).
LlamaWeights load_llama_weights(const io::ModelConfig& config, std::unique_ptr<io::WeightSource> source,
                                const std::filesystem::path& where, ops::Backend& backend, const ModelOptions& options);
// --quantization against the checkpoint's quantization_config (vLLM's names; gptq_marlin = gptq, awq_marlin =
// awq): a mismatch or a dense checkpoint is an Error naming the file, the field and the value. Empty: no check.
void check_quantization_option(const io::ModelConfig& config, const std::filesystem::path& where,
                               const std::string& option);
std::string normalize_quantization(const std::string& name);
// Random weights (uniform, scaled by 1/sqrt(fan_in)) in the config's dtype, for benchmarks; with
// options.quantization (w4a16 | w8a16 | w4a8) every projection and the LM head (its own copy when tied) get random
// int4/uint8 codes, group 128 (w4a8: activations quantized to int8 per token), as the GGUF peers store every
// matrix in the benchmarked type; w8a8-int8 / fp8 give random 8-bit codes per channel.
LlamaWeights make_random_llama_weights(const io::ModelConfig& config, ops::Backend& backend,
                                       const ModelOptions& options);

}  // namespace peregrine::model
