// Model: a loaded decoder-only transformer (Llama, Mistral, Qwen2, Qwen3) bound to one backend, and the
// paged KV cache it reads and writes. The engine hands it one flattened ForwardBatch per step; the model
// makes one host→device copy of the batch, runs every layer through the op interface and returns the
// logits of the rows asked for.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "io/hf_config.h"
#include "ops/backend.h"

namespace peregrine::model {

// One step, flattened on the host. S sequences, T tokens in all, R logits rows wanted.
struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [T]
  std::vector<int32_t> positions;        // [T] position of each token in its sequence
  std::vector<int32_t> slot_mapping;     // [T] KV slot (block * block_size + offset) each token writes
  std::vector<int32_t> query_start_loc;  // [S + 1] token rows of sequence s: [qsl[s], qsl[s+1])
  std::vector<int32_t> seq_lens;         // [S] context length of s after this step (cached + new)
  std::vector<int32_t> block_tables;     // [S * max_blocks_per_seq], -1/0 padded
  int max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;   // [R] token rows whose logits are returned, in order

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
};

// The paged KV cache: per layer K and V pools [num_blocks][block_size][num_kv_heads][head_dim].
struct KvCacheSpec {
  int num_blocks = 0;
  int block_size = 16;
  DType dtype = DType::kF32;
};

struct ModelOptions {
  // Activation dtype on the backend (f32 on CPU backends). Weights keep their stored dtype where the backend
  // computes with it directly, else they are converted once at load.
  DType activation_dtype = DType::kF32;
  int max_num_batched_tokens = 2048;  // sizes the activation workspace
  int max_num_seqs = 256;
  int max_model_len = 0;   // longest sequence (sizes block-table rows); 0 = max_position_embeddings
  int min_block_size = 16; // smallest KV block size the caller will use (block-table rows hold max_model_len of them)
  bool use_graphs = true;  // capture and replay decode steps as graphs where the backend supports them
  // Called with (bytes_done, bytes_total) while weights load (progress bars).
  std::function<void(size_t, size_t)> on_load_progress;
  // Build weights in memory from the config with this seed instead of reading safetensors (benchmarks).
  bool random_weights = false;
  uint64_t random_seed = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual ops::Backend& backend() const = 0;
  // Bytes one token of KV takes over all layers.
  virtual size_t kv_bytes_per_token(DType kv_dtype) const = 0;
  // Total bytes of weights as the model holds them.
  virtual size_t weight_bytes() const = 0;
  // (Re)allocates the KV cache; invalidates any previous one.
  virtual void allocate_kv_cache(const KvCacheSpec& spec) = 0;
  virtual const KvCacheSpec& kv_cache_spec() const = 0;
  // Runs one step. logits is resized to [R * vocab] f32 on the host. Throws Error on bad input.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Runs a largest-prefill step and every decode bucket once (capturing decode graphs where the backend has
  // them), so the first real requests pay no first-use costs. Needs an allocated KV cache; writes no KV.
  virtual void warm_up() {}
};

// Loads a Hugging Face folder (config.json, safetensors) onto the backend. Throws Error naming the file
// and field or tensor at fault.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, ops::Backend& backend,
                                  const ModelOptions& options);
// Builds a model with random weights from a config (no weight files needed).
std::unique_ptr<Model> make_random_model(const io::ModelConfig& config, ops::Backend& backend,
                                         const ModelOptions& options);

}  // namespace peregrine::model
