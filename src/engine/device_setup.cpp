// resolve_device / create_backend (see device_setup.h).
#include "engine/device_setup.h"

#include "core/status.h"

namespace peregrine::engine {

DeviceChoice resolve_device(const std::string& device, const std::string& dtype, DType model_dtype) {
  DeviceChoice c;
  if (device == "auto") c.kind = ops::cuda_available() ? ops::DeviceKind::kCuda : ops::DeviceKind::kCpu;
  else if (device == "cpu") c.kind = ops::DeviceKind::kCpu;
  else if (device == "cuda") c.kind = ops::DeviceKind::kCuda;
  else if (device == "ref") c.kind = ops::DeviceKind::kRef;
  else throw Error(ErrorCode::kInvalidArgument, "--device must be auto, cpu, cuda or ref, not '" + device + "'");

  DType requested;
  if (dtype == "auto") requested = model_dtype;
  else if (dtype == "float32" || dtype == "float") requested = DType::kF32;
  else if (dtype == "bfloat16") requested = DType::kBF16;
  else if (dtype == "float16" || dtype == "half") requested = DType::kF16;
  else throw Error(ErrorCode::kInvalidArgument, "--dtype must be auto, float32, bfloat16 or float16, not '" + dtype + "'");

  if (c.kind == ops::DeviceKind::kCuda) {
    // The GPU computes in the requested half type; float32 checkpoints run in bf16 unless float32 is asked for.
    c.activation_dtype = dtype == "auto" && requested == DType::kF32 ? DType::kBF16 : requested;
    c.kv_dtype = c.activation_dtype;
  } else {
    // CPU backends compute in f32 whatever the weights are (bf16 → f32 is exact); the KV cache follows --dtype.
    c.activation_dtype = DType::kF32;
    c.kv_dtype = dtype == "auto" ? DType::kF32 : requested;
  }
  return c;
}

void apply_kv_cache_dtype(DeviceChoice& c, const std::string& kv) {
  if (kv == "auto" || kv.empty()) return;
  if (kv == "fp8" || kv == "fp8_e4m3") c.kv_dtype = DType::kF8E4M3;
  else if (kv == "int8") c.kv_dtype = DType::kI8;
  else
    throw Error(ErrorCode::kInvalidArgument, "--kv-cache-dtype must be auto, fp8, fp8_e4m3 or int8, not '" + kv + "'" +
                                                 (kv == "fp8_e5m2" ? " (e5m2 caches are not supported)" : ""));
}

std::unique_ptr<ops::Backend> create_backend(const DeviceChoice& choice, int num_threads) {
  ops::BackendOptions o;
  o.kind = choice.kind;
  o.num_threads = num_threads;
  return ops::create_backend(o);
}

}  // namespace peregrine::engine
