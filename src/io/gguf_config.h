// ModelConfig from a GGUF file's metadata, as llama.cpp's converter writes it: `general.architecture` (llama,
// mistral, qwen2, qwen3) and its `<arch>.*` hyper-parameters, filled into the same struct the Hugging Face loader
// fills (hf_config.h). Errors name the file and the key (or tensor).
#pragma once

#include "io/gguf.h"
#include "io/hf_config.h"

namespace peregrine::io {

ModelConfig gguf_model_config(const GgufFile& file);

// Whether llama.cpp's converter permuted this architecture's q/k rows for its interleaved RoPE
// (`permute(w, n_head, n_head_kv)`: llama and mistral), so a loader must undo it for the half-split RoPE.
bool gguf_qk_permuted(const ModelConfig& config);

// The config of a model path: a GGUF file's metadata, or a Hugging Face folder's config.json.
ModelConfig load_model_config_any(const std::filesystem::path& path);

}  // namespace peregrine::io
