// `peregrine quantize`: a dense checkpoint → a compressed-tensors W4A16 / W8A16 / W4A8 / W8A8 checkpoint (rtn,
// awq, gptq or smoothquant; see include/peregrine/quantize.h), with a progress bar on a terminal.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/progress.h"
#include "peregrine/error.h"
#include "peregrine/quantize.h"

namespace peregrine::cli {

void register_quantize(CLI::App& app) {
  auto cfg = std::make_shared<QuantizeConfig>();
  auto asym = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a dense checkpoint into compressed-tensors W4A16 / W8A16 / W4A8 / W8A8 int8 / FP8");
  cmd->add_option("--model,-m", cfg->model, "dense model folder")->required();
  cmd->add_option("--out,-o", cfg->out, "output folder")->required();
  cmd->add_option("--scheme", cfg->scheme, "w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8 (W8A8: per-channel weights, activations per token; W4A8: int4 weights per group, int8 activations per token)")->capture_default_str();
  cmd->add_option("--format", cfg->format, "w4a8: int-quantized (default, one int8 per value) | pack-quantized");
  cmd->add_option("--group-size", cfg->group_size, "input columns per scale (-1: per output channel)")->capture_default_str();
  cmd->add_option("--method", cfg->method, "rtn | awq | gptq (W4A16/W8A16); rtn | smoothquant (w8a8-int8); rtn | smoothquant | gptq | awq (w4a8)")->capture_default_str();
  cmd->add_option("--calibration", cfg->calibration, "calibration text (or a JSON list of {\"text\": ...}) for awq / gptq");
  cmd->add_option("--calibration-tokens", cfg->calibration_tokens, "at most this many calibration tokens")->capture_default_str();
  cmd->add_flag("--asymmetric", *asym, "zero points (W4A16_ASYM)");
  cmd->add_flag("--gptq-sequential", cfg->gptq_sequential,
                "gptq: each layer input calibrated with the projections before it already quantized (a pass per input)");
  cmd->add_option("--threads", cfg->num_threads, "CPU threads (0 = all cores)");
  cmd->callback([cfg, asym] {
    cfg->symmetric = !*asym;
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<ProgressBar> bar;
    std::string stage;
    cfg->on_progress = [&](const std::string& s, size_t done, size_t total) {
      if (s != stage) {
        if (bar) bar->finish();
        stage = s;
        bar = std::make_unique<ProgressBar>(s);
      }
      bar->update(done, total);
    };
    const QuantizeReport r = quantize_model(*cfg);
    if (bar) bar->finish();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool w8a8 = cfg->scheme == "fp8" || cfg->scheme == "w8a8-int8";
    const std::string group = cfg->group_size > 0 ? "group " + std::to_string(cfg->group_size) : "per channel";
    const std::string shape = w8a8                  ? "per channel, activations per token"
                              : cfg->scheme == "w4a8" ? group + ", activations per token"
                                                      : group;
    std::printf("%s: %d projections quantized (%s, %s, %s%s), %lld calibration tokens, %.1f MB -> %.1f MB in %.1f s\n",
                cfg->out.c_str(), r.quantized_linears, cfg->scheme.c_str(), cfg->method.c_str(), shape.c_str(),
                cfg->symmetric ? "" : ", asymmetric",
                static_cast<long long>(r.calibration_tokens), r.bytes_in / 1e6, r.bytes_out / 1e6, s);
  });
}

}  // namespace peregrine::cli
