// Model: a loaded decoder-only transformer (Llama, Mistral, Qwen2, Qwen3) bound to one backend. It maps the
// weights and runs the layers on tensors the engine's ModelRunner prepared: the step's int32 inputs on the device
// and the KV pools of every layer. It holds no KV cache, no input staging and no graphs (those are the runner's,
// src/engine/model_runner.h); it owns only its weights and its activation workspace.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>

#include "core/status.h"
#include "io/hf_config.h"
#include "ops/backend.h"

namespace peregrine::model {

// One layer's paged KV pools, [num_blocks][block_size][num_kv_heads][head_dim] each, plus optional per-token
// scale pools [num_blocks][block_size][num_kv_heads][scales] for quantized caches (empty for float caches).
struct KvLayer {
  TensorView k, v;
  TensorView k_scales, v_scales;
};

// One step's inputs, on the device. S sequences, T tokens.
struct StepInputs {
  TensorView token_ids;        // [T] int32
  TensorView positions;        // [T] int32, position of each token in its sequence
  TensorView slot_mapping;     // [T] int32, KV slot (block * block_size + offset) each token writes; -1 = none
  TensorView query_start_loc;  // [S + 1] int32: token rows of sequence s are [qsl[s], qsl[s+1])
  TensorView seq_lens;         // [S] int32, context of s after this step (cached + new)
  TensorView block_tables;     // [S, max_blocks_per_seq] int32 (any rows with block_table_index)
  TensorView tree_parents;     // [T] int32 when a sequence verifies a token tree (ops.h AttentionParams), else empty
  // Attention's row-exact layout (ops.h AttentionParams), each optional: block-table row per sequence, key tails.
  TensorView block_table_index;
  TensorView key_tail_from, key_tail_offset, key_tail;
  int max_query_len = 0;       // true maxima over the step (bounds for kernel grids)
  int max_seq_len = 0;
  // Called (when set) as each decoder layer starts, before its work is enqueued, with the layer's index: the runner
  // makes that layer's work wait for the KV copies it reads (loads overlapped with the prefill, layer by layer).
  std::function<void(int)> before_layer;
};

struct ModelOptions {
  // Activation dtype on the backend (f32 on CPU backends). Weights keep their stored dtype where the backend
  // computes with it directly, else they are converted once at load.
  DType activation_dtype = DType::kF32;
  int max_num_tokens = 2048;   // rows of the activation workspace: the most tokens one step may carry
  int max_logits_rows = 256;   // rows one compute_logits call may ask for
  // Called with (bytes_done, bytes_total) while weights load (progress bars).
  std::function<void(size_t, size_t)> on_load_progress;
  // Build weights in memory from the config with this seed instead of reading safetensors (benchmarks).
  bool random_weights = false;
  uint64_t random_seed = 0;
  // --quantization: the method the checkpoint must declare (vLLM's names), or the scheme of random weights.
  std::string quantization;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual ops::Backend& backend() const = 0;
  // Total bytes of weights as the model holds them.
  virtual size_t weight_bytes() const = 0;
  // Bytes of weights a decode step reads: all of them but an embedding table that is not also the LM head (its
  // rows are gathered, not streamed).
  virtual size_t decode_weight_bytes() const { return weight_bytes(); }
  // Whether forward() calls StepInputs::before_layer as each layer starts (else the runner makes the whole step
  // wait for its KV copies before it starts).
  virtual bool calls_before_layer() const { return false; }
  virtual int max_num_tokens() const = 0;
  virtual int max_logits_rows() const = 0;
  // The dtype activations (and so attention's queries) have on the backend.
  virtual DType activation_dtype() const { return DType::kF32; }
  // Host work a step needs before forward, outside any graph: positions [0, num_positions) will be used
  // (dynamic-NTK RoPE rebuilds its tables from the longest context).
  virtual void prepare_step(int64_t num_positions) { (void)num_positions; }
  // Whether forward's work depends only on the shapes of its inputs, so a captured graph may replay it.
  virtual bool graph_safe() const { return true; }
  // Enqueues every layer over the step (KV written at slot_mapping, attention over the paged cache); the final
  // normed hidden states stay in the model's workspace for compute_logits. No host synchronisation, so it can
  // be captured into a graph. Inputs are trusted: the runner validated them.
  virtual void forward(const StepInputs& inputs, std::span<const KvLayer> kv) = 0;
  // out[r, :] = lm_head(final hidden of token row rows[r]) as f32, for the last forward's rows.
  // rows: [R] int32 on the device, R <= max_logits_rows(); out: [R, vocab] f32 on the device.
  virtual void compute_logits(const TensorView& rows, const TensorView& out) = 0;
  // Logits over a subset of the vocabulary (speculative drafters, FR-Spec's reduced LM head): after
  // use_logits_subset(rows), compute_logits writes [R, rows] instead of [R, vocab], column j being the logit of the
  // token set_logits_tokens last put in row j of a compact LM head, a copy of those rows of this model's LM head
  // (the LM head itself is untouched, so a model sharing it, self-speculation's target, is not affected). The
  // compact head's rows all hold token 0 until set. Call before a ModelRunner is built on the model: the runner
  // sizes its logits by logits_width(). Dense heads, GGUF blocks and W4A16 / W8A16 codes (with their scale and zero
  // rows) are copied by rows, and re-packed group by group where the backend reads a packed copy; throws
  // Error(kUnsupported) where the LM head cannot be copied by rows (a bias, a layout only the backend has, scales
  // shared across rows).
  virtual void use_logits_subset(int64_t rows) {
    (void)rows;
    throw Error(ErrorCode::kUnsupported, "this architecture cannot compute logits over a subset of its vocabulary");
  }
  // Rows [first, first + ids.size()) of the compact head become the LM head's rows of tokens ids. Enqueued on the
  // backend's queue (ordered before the next forward; not while a graph is being captured); a captured graph keeps
  // reading the same buffer, so it sees the new rows. Throws Error(kInvalidArgument) for an id outside the
  // vocabulary or rows past the compact head.
  virtual void set_logits_tokens(std::span<const int32_t> ids, int64_t first) {
    (void)ids;
    (void)first;
    throw Error(ErrorCode::kUnsupported, "this model has no compact LM head (use_logits_subset)");
  }
  // Columns compute_logits writes: the vocabulary, or the compact head's rows.
  virtual int64_t logits_width() const { return config().vocab_size; }
  // A model of only these layers (increasing indices) followed by this model's final norm and LM head, sharing its
  // weights (self-speculation drafts with it; this model must outlive it). Its forward takes KV for those layers
  // only. Throws Error(kUnsupported) when the architecture cannot.
  virtual std::unique_ptr<Model> layer_subset(std::span<const int> layers, const ModelOptions& options) const {
    (void)layers;
    (void)options;
    throw Error(ErrorCode::kUnsupported, "this architecture cannot run a subset of its layers");
  }
};

// Loads a Hugging Face folder (config.json, safetensors) or a GGUF file (io/gguf.h; its metadata as the config,
// model/gguf_weights.h for the tensors) onto the backend. Throws Error naming the file and field, key or tensor
// at fault.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, ops::Backend& backend,
                                  const ModelOptions& options);
// Builds a model with random weights from a config (no weight files needed).
std::unique_ptr<Model> make_random_model(const io::ModelConfig& config, ops::Backend& backend,
                                         const ModelOptions& options);

}  // namespace peregrine::model
