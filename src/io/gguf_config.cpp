// GGUF metadata -> ModelConfig (see gguf_config.h).
#include "io/gguf_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"

namespace peregrine::io {

ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.string("general.architecture");
  if (arch == "llama") c.architecture = Architecture::kLlama;
  else if (arch == "mistral" || arch == "mistral3") c.architecture = Architecture::kMistral;  // mistral3: its text model
  else if (arch == "qwen2") c.architecture = Architecture::kQwen2;
  else if (arch == "qwen3") c.architecture = Architecture::kQwen3;
  else
    f.fail(ErrorCode::kUnsupported,
           "key 'general.architecture' is '" + arch + "'; supported: llama, mistral, mistral3, qwen2, qwen3");
  c.model_type = arch;
  c.architecture_name = arch;
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key) -> int64_t {
    const uint64_t v = f.uint(key);
    if (v == 0 || v > (1ull << 31)) f.fail(ErrorCode::kFormatError, "key '" + key + "': " + std::to_string(v) + " is out of range");
    return static_cast<int64_t>(v);
  };
  auto positive_or = [&](const std::string& key, int64_t fallback) -> int64_t {
    return f.contains(key) ? positive(key) : fallback;
  };
  // head_count_kv may be an array (one per layer) in some files: accept it when every layer agrees.
  auto per_layer = [&](const std::string& key, int64_t fallback) -> int64_t {
    const GgufValue* v = f.find(key);
    if (!v) return fallback;
    if (v->type != GgufType::kArray) return positive(key);
    const std::vector<int64_t> all = f.int_array(key);
    if (all.empty()) f.fail(ErrorCode::kFormatError, "key '" + key + "': empty array");
    for (int64_t x : all)
      if (x != all[0]) f.fail(ErrorCode::kUnsupported, "key '" + key + "': layers with different values are not supported");
    if (all[0] <= 0) f.fail(ErrorCode::kFormatError, "key '" + key + "': must be positive");
    return all[0];
  };
  c.hidden_size = positive(p + "embedding_length");
  c.num_hidden_layers = positive(p + "block_count");
  c.intermediate_size = per_layer(p + "feed_forward_length", 0);
  if (c.intermediate_size <= 0) f.fail(ErrorCode::kNotFound, "key '" + p + "feed_forward_length' is missing");
  c.num_attention_heads = per_layer(p + "attention.head_count", 0);
  if (c.num_attention_heads <= 0) f.fail(ErrorCode::kNotFound, "key '" + p + "attention.head_count' is missing");
  c.num_key_value_heads = per_layer(p + "attention.head_count_kv", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail(ErrorCode::kFormatError, "key '" + p + "attention.head_count_kv': " + std::to_string(c.num_key_value_heads) +
                                        " does not divide attention.head_count " + std::to_string(c.num_attention_heads));
  if (f.contains(p + "attention.key_length")) {
    c.head_dim = positive(p + "attention.key_length");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      f.fail(ErrorCode::kFormatError, "key '" + p + "embedding_length' is not a multiple of attention.head_count");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) f.fail(ErrorCode::kFormatError, "key '" + p + "attention.key_length': head dimension must be even");
  if (positive_or(p + "attention.value_length", c.head_dim) != c.head_dim)
    f.fail(ErrorCode::kUnsupported, "key '" + p + "attention.value_length' differs from attention.key_length");
  c.max_position_embeddings = positive_or(p + "context_length", 2048);
  c.rms_norm_eps = f.number_opt(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1))
    f.fail(ErrorCode::kFormatError, "key '" + p + "attention.layer_norm_rms_epsilon' is out of range");

  // Vocabulary: the key, else the token list, else the embedding's rows.
  if (f.contains(p + "vocab_size")) {
    c.vocab_size = positive(p + "vocab_size");
  } else if (const GgufValue* toks = f.array("tokenizer.ggml.tokens", GgufType::kString)) {
    c.vocab_size = static_cast<int64_t>(toks->count);
  } else if (const GgufTensor* e = f.tensor("token_embd.weight"); e && e->ne.size() == 2) {
    c.vocab_size = e->ne[1];
  }
  if (c.vocab_size <= 0) f.fail(ErrorCode::kNotFound, "no vocabulary size ('" + p + "vocab_size', tokenizer.ggml.tokens)");

  // Tensors decide the optional parts.
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  c.attention_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
  c.o_proj_bias = f.tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = f.tensor("blk.0.ffn_down.bias") != nullptr;
  c.qk_norm = f.tensor("blk.0.attn_q_norm.weight") != nullptr;
  if (c.architecture == Architecture::kQwen2 && !c.attention_bias)
    f.fail(ErrorCode::kFormatError, "tensor 'blk.0.attn_q.bias' is missing (qwen2 has q/k/v biases)");
  if (c.architecture == Architecture::kQwen3 && !c.qk_norm)
    f.fail(ErrorCode::kFormatError, "tensor 'blk.0.attn_q_norm.weight' is missing (qwen3 normalizes q and k)");
  if (c.attention_bias && f.tensor("blk.0.attn_k.bias") == nullptr)
    f.fail(ErrorCode::kFormatError, "tensor 'blk.0.attn_k.bias' is missing (attn_q has a bias)");
  if (c.mlp_bias && f.tensor("blk.0.ffn_gate.bias") == nullptr)
    f.fail(ErrorCode::kUnsupported, "tensor 'blk.0.ffn_down.bias' without ffn_gate/ffn_up biases is not supported");
  // A sliding window wherever the file gives one for a Llama-family model: Mistral 7B v0.1 converted as "llama"
  // included (transformers applies its window; llama.cpp does not for "llama", so outputs past the window differ
  // from llama.cpp's). Qwen2/Qwen3 files carry the key although their models do not use a window: ignored.
  if (f.contains(p + "attention.sliding_window") &&
      (c.architecture == Architecture::kMistral || c.architecture == Architecture::kLlama)) {
    const uint64_t w = f.uint(p + "attention.sliding_window");
    if (w > (1ull << 31)) f.fail(ErrorCode::kFormatError, "key '" + p + "attention.sliding_window': " + std::to_string(w) + " is out of range");
    c.sliding_window = static_cast<int64_t>(w);
  }

  // Weights' float type (what --dtype auto follows): F32/F16 files keep theirs, everything else runs in bf16.
  c.torch_dtype = DType::kBF16;
  if (const GgufTensor* t = f.tensor("blk.0.attn_q.weight")) {
    if (t->type == GgmlType::kF32) c.torch_dtype = DType::kF32;
    if (t->type == GgmlType::kF16) c.torch_dtype = DType::kF16;
  }

  // RoPE.
  RopeConfig& r = c.rope;
  r.theta = f.number_opt(p + "rope.freq_base").value_or(10000.0);
  if (!(r.theta > 1)) f.fail(ErrorCode::kFormatError, "key '" + p + "rope.freq_base' must be greater than 1");
  const int64_t rot = positive_or(p + "rope.dimension_count", c.head_dim);
  if (rot > c.head_dim || rot % 2 != 0)
    f.fail(ErrorCode::kFormatError, "key '" + p + "rope.dimension_count': " + std::to_string(rot) +
                                        " is not even and within the head dimension " + std::to_string(c.head_dim));
  r.partial_rotary_factor = static_cast<double>(rot) / static_cast<double>(c.head_dim);
  std::string scaling = f.string_opt(p + "rope.scaling.type").value_or("none");
  const double factor = f.number_opt(p + "rope.scaling.factor").value_or(f.number_opt(p + "rope.scale_linear").value_or(1.0));
  if (scaling == "none" && factor != 1.0 && f.contains(p + "rope.scale_linear")) scaling = "linear";
  if (scaling == "linear") {
    if (!(factor > 0)) f.fail(ErrorCode::kFormatError, "key '" + p + "rope.scaling.factor' must be positive");
    r.type = RopeType::kLinear;
    r.factor = factor;
  } else if (scaling == "yarn") {
    if (!(factor >= 1)) f.fail(ErrorCode::kFormatError, "key '" + p + "rope.scaling.factor' must be at least 1");
    r.type = RopeType::kYarn;
    r.factor = factor;
    const int64_t orig = positive_or(p + "rope.scaling.original_context_length", c.max_position_embeddings);
    r.original_max_position_embeddings = orig;  // the ramps are computed from the pre-training length
    if (auto af = f.number_opt(p + "rope.scaling.attn_factor")) r.attention_factor = *af;
  } else if (scaling != "none") {
    f.fail(ErrorCode::kUnsupported, "key '" + p + "rope.scaling.type' is '" + scaling + "'; supported: none, linear, yarn");
  }
  if (const GgufTensor* t = f.tensor("rope_freqs.weight")) {
    if (t->type != GgmlType::kF32 || t->ne.size() != 1 || t->ne[0] != rot / 2)
      f.fail(ErrorCode::kFormatError, "tensor 'rope_freqs.weight' must be F32 [" + std::to_string(rot / 2) + "]");
    r.freq_factors.resize(static_cast<size_t>(rot / 2));
    std::memcpy(r.freq_factors.data(), t->data, r.freq_factors.size() * sizeof(float));
    for (float x : r.freq_factors)
      if (!(x > 0) || !std::isfinite(x)) f.fail(ErrorCode::kFormatError, "tensor 'rope_freqs.weight' holds a non-positive factor");
  }

  // Special ids (the tokenizer reads them too; the engine stops on eos).
  auto id = [&](const char* key) -> std::optional<int32_t> {
    auto v = f.int_opt(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v >= c.vocab_size) return std::nullopt;  // llama.cpp writes -1 / out-of-range for "none"
    return static_cast<int32_t>(*v);
  };
  c.bos_token_id = id("tokenizer.ggml.bos_token_id");
  c.pad_token_id = id("tokenizer.ggml.padding_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto e = id(key); e && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *e) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(*e);
  return c;
}

ModelConfig load_model_config_any(const std::filesystem::path& path) {
  if (is_gguf_path(path)) return gguf_model_config(GgufFile(path));
  return load_model_config(path);
}

bool gguf_qk_permuted(const ModelConfig& c) {
  return c.architecture == Architecture::kLlama || c.architecture == Architecture::kMistral;
}

}  // namespace peregrine::io
