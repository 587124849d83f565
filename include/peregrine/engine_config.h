// EngineConfig: everything that shapes an Engine, named like vLLM's engine arguments. Zero or "auto" means
// "derive it" (from the model's config, the device, or a measurement); validate() rejects impossible values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "peregrine/speculative_config.h"

namespace peregrine {

struct EngineConfig {
  std::string model;                    // Hugging Face model folder (may be empty with random_weights + config_file)
  std::string tokenizer;                // folder with tokenizer.json; empty = model
  // vLLM's skip_tokenizer_init: no tokenizer is loaded; prompts are token ids, outputs carry ids and no text,
  // and stop strings are refused.
  bool skip_tokenizer_init = false;
  std::string device = "auto";          // auto | cpu | cuda | ref
  std::string dtype = "auto";           // auto | float32 | bfloat16 | float16 (activations)
  // vLLM's --quantization: empty = detect from the checkpoint's quantization_config; otherwise the method it must
  // declare (gptq | awq | compressed-tensors, marlin aliases accepted); with random_weights the scheme to build
  // (w4a16 | w8a16).
  std::string quantization;
  // vLLM's --kv-cache-dtype: auto (the activation dtype; f32 on CPU unless --dtype says otherwise) | fp8 | fp8_e4m3
  // | int8. fp8 / int8 store codes with one dynamic scale per token and KV head (docs/quantization.md).
  std::string kv_cache_dtype = "auto";
  int max_model_len = 0;                // 0 = the model's max_position_embeddings (capped by KV capacity)
  int max_num_seqs = 256;               // sequences running at once
  int max_num_batched_tokens = 0;       // token budget per step; 0 = max(2048, ...) chosen by the engine
  int block_size = 16;                  // tokens per KV block
  bool enable_prefix_caching = true;
  double gpu_memory_utilization = 0.9;  // fraction of device memory the engine may use (weights + KV + work)
  size_t kv_cache_memory_bytes = 0;     // explicit KV size; 0 = measured from gpu_memory_utilization
  int num_kv_blocks_override = 0;       // tests: force this many KV blocks
  uint64_t seed = 0;                    // seeds requests without their own seed
  std::string chat_template;            // file path or inline template; empty = the tokenizer's
  std::string generation_config = "auto";  // auto (model folder) | vllm (none) | folder path
  int max_queued_requests = 4096;       // waiting requests beyond this are refused (kUnavailable)
  int num_threads = 0;                  // CPU backend threads; 0 = all cores
  int tensor_parallel_size = 1;         // only 1 is supported
  bool enforce_eager = false;           // GPU: run decode without CUDA graphs (as vLLM's --enforce-eager)
  // The prefix cache's host tier: GiB of (pinned) host memory that keeps evicted cached KV blocks and serves hits
  // from them (vLLM's kv_offloading_size); 0 = off.
  double kv_offloading_size = 0.0;
  // The prefix cache's disk tier: a folder that keeps every block evicted from the device, including those the host
  // tier has no room for (written in the background, checksummed, found again after a restart with the same model,
  // dtype and block size), bounded to kv_cache_disk_gb GB (the least recently used dropped); empty = off. Needs the
  // host tier.
  std::string kv_cache_dir;
  double kv_cache_disk_gb = 16.0;
  SpeculativeConfig speculative;        // --speculative-config (off by default)
  // Benchmarks: random weights built from config_file (or the model folder's config.json); the tokenizer still
  // comes from `tokenizer` or the model folder.
  bool random_weights = false;
  std::string config_file;
  // Called with (bytes done, bytes total) while weights load, on the creating thread (progress bars).
  std::function<void(size_t, size_t)> on_load_progress;

  // Throws Error(kInvalidArgument) naming the first bad field.
  void validate() const;
};

}  // namespace peregrine
