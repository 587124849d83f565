// ModelConfig: what Peregrine needs from a Hugging Face config.json (classic form with rope_theta/rope_scaling/
// torch_dtype, and the transformers-5 form with rope_parameters/dtype) and generation_config.json.
// Parsing errors name the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace peregrine::io {

enum class RopeType { kDefault, kLinear, kDynamic, kLlama3, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  double partial_rotary_factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 / yarn / dynamic: the pre-training context; 0 when the config does not say (then max_position_embeddings).
  int64_t original_max_position_embeddings = 0;
  // yarn
  std::optional<double> attention_factor;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  bool truncate = true;
  // GGUF `rope_freqs.weight` (llama.cpp's precomputed Llama-3 factors): inv_freq[i] is divided by factor i.
  // Empty for Hugging Face configs.
  std::vector<float> freq_factors;
};

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

// A checkpoint's weight quantization, from config.json `quantization_config` (or quantize_config.json), read as
// vLLM reads it. Parsing records what the checkpoint says; the loader refuses what it cannot load (`unsupported`).
struct QuantConfig {
  std::string method;        // gptq | awq | compressed-tensors | fp8 | ... ; empty for a float checkpoint
  std::string file;          // the file it came from (errors name it)
  int bits = 0;              // weight bits: 4 or 8
  int64_t group_size = -1;   // input columns per scale; -1 = one group per output channel
  bool sym = true;           // no stored zero points (or all at the midpoint)
  bool desc_act = false;     // GPTQ act-order (g_idx) / compressed-tensors actorder
  bool gptq_v1_zeros = true; // GPTQ checkpoint_format gptq (stored zero = zero - 1); false for gptq_v2
  std::vector<std::string> ignore;   // modules left dense: names or "re:" patterns (compressed-tensors), substrings (awq)
  std::vector<std::string> targets;  // compressed-tensors targets: "Linear", names or "re:" patterns
  bool lm_head = false;      // GPTQ: lm_head quantized too
  // 8-bit schemes (compressed-tensors int-quantized / float-quantized, quant_method fp8):
  std::string format;               // compressed-tensors format (pack-quantized | int-quantized | float-quantized)
  std::string weight_type = "int";  // int | float (float8 e4m3)
  std::string strategy;             // compressed-tensors weights.strategy (channel | group | tensor | block); fp8: block or tensor
  int64_t block_n = 0, block_k = 0; // block-wise scales: output rows x input columns per scale (weight_block_size)
  int act_bits = 0;                 // 8: activations quantized dynamically per token (W8A8); 0: weight-only
  std::string act_type;             // int | float
  int64_t act_group = 0;            // input columns per activation scale (0: one per token)
  std::string unsupported;   // non-empty: why this checkpoint cannot be loaded (field and value named)
  bool quantized() const { return !method.empty(); }
  // True when the module (HF name without ".weight", e.g. "model.layers.0.mlp.down_proj") is quantized.
  bool applies_to(const std::string& module) const;
};

// Parses a quantization_config object (`file` names it in errors, `prefix` is the field path, e.g.
// "quantization_config.").
QuantConfig parse_quant_config(const std::string& json_text, const std::string& file, const std::string& prefix);

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as in config.json, e.g. "LlamaForCausalLM"
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;   // q/k/v biases (Qwen2 always; Llama when attention_bias is true)
  bool o_proj_bias = false;      // Llama attention_bias also biases o_proj
  bool mlp_bias = false;
  bool qk_norm = false;          // Qwen3 per-head RMSNorm on q and k
  int64_t sliding_window = 0;    // 0 = none
  DType torch_dtype = DType::kBF16;
  RopeConfig rope;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> pad_token_id;
  // quantization_config.quant_method (or quantize_config.json's), empty for a float checkpoint.
  std::string quant_method;
  QuantConfig quant;         // the rest of quantization_config

  int64_t rotary_dim() const { return static_cast<int64_t>(head_dim * rope.partial_rotary_factor); }
};

// Generation defaults from generation_config.json (all optional).
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Parses config.json text; `file` is used in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& file = "config.json");
// Reads dir/config.json (and dir/generation_config.json for extra eos ids, when present).
ModelConfig load_model_config(const std::filesystem::path& dir);
GenerationConfig parse_generation_config(const std::string& json_text, const std::string& file);
// Reads dir/generation_config.json; an absent file gives an empty config.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

std::string read_text_file(const std::filesystem::path& path);  // throws Error naming the path

}  // namespace peregrine::io
