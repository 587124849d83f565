// Quantizing a dense checkpoint into a compressed-tensors checkpoint (pack-quantized W4A16 / W8A16, int-quantized
// or float-quantized W8A8, int- or pack-quantized W4A8), the formats vLLM loads and Peregrine loads back (what
// `peregrine quantize` runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace peregrine {

struct QuantizeConfig {
  std::string model;            // dense Hugging Face folder (safetensors)
  std::string out;              // folder to write (created; files of the same names are replaced)
  std::string scheme = "w4a16"; // w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8 (W8A8: per channel, activations per token;
                                // W4A8: int4 per group / channel, activations int8 per token)
  std::string method = "rtn";   // rtn | awq | gptq; w8a8-int8: rtn | smoothquant (calibrated migration); w4a8: all four
  std::string format;           // w4a8 only: int-quantized (default: an int8 per value, llm-compressor's W4A8) or
                                // pack-quantized (eight values per int32)
  int64_t group_size = 128;     // -1 = one scale per output channel
  bool symmetric = true;        // false: zero points (compressed-tensors W4A16_ASYM)
  std::string calibration;      // awq / gptq: a text file, or a JSON list of {"text": ...}
  int calibration_tokens = 4096;  // at most this many calibration tokens, in windows of calibration_context
  int calibration_context = 512;
  int num_threads = 0;          // CPU threads for the calibration forward (0 = all cores)
  // gptq: re-capture each layer input's statistics with every projection before it already quantized (GPTQ's
  // "true sequential" order; one calibration pass per layer input) instead of all from the float model at once.
  bool gptq_sequential = false;
  // (stage, done, total) while it works: "calibrating" over windows, "quantizing" over projections.
  std::function<void(const std::string&, size_t, size_t)> on_progress;
};

struct QuantizeReport {
  int quantized_linears = 0;
  int64_t calibration_tokens = 0;
  size_t bytes_in = 0, bytes_out = 0;  // model.safetensors sizes
};

// Throws Error naming the file, field or flag at fault.
QuantizeReport quantize_model(const QuantizeConfig& config);

}  // namespace peregrine
