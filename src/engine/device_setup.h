// Device and dtype resolution shared by every entry point (generate, serve, bench): "--device auto" picks
// CUDA when a GPU is visible, else the CPU backend; "--dtype auto" picks the activation and KV dtypes.
#pragma once

#include <memory>
#include <string>

#include "core/dtype.h"
#include "ops/backend.h"

namespace peregrine::engine {

struct DeviceChoice {
  ops::DeviceKind kind = ops::DeviceKind::kCpu;
  DType activation_dtype = DType::kF32;  // what the backend computes in
  DType kv_dtype = DType::kF32;          // what the KV cache stores
};

// device: auto | cpu | cuda | ref. dtype: auto | float32 | bfloat16 | float16 (vLLM's --dtype).
// model_dtype is the checkpoint's dtype (config.json). Throws Error(kInvalidArgument) naming the flag.
DeviceChoice resolve_device(const std::string& device, const std::string& dtype, DType model_dtype);
// kv_cache_dtype: auto (keeps the choice above) | fp8 | fp8_e4m3 | int8 (vLLM's --kv-cache-dtype); others refused
// naming the flag and value.
void apply_kv_cache_dtype(DeviceChoice& choice, const std::string& kv_cache_dtype);

std::unique_ptr<ops::Backend> create_backend(const DeviceChoice& choice, int num_threads);

}  // namespace peregrine::engine
