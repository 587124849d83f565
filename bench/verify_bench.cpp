// verify_bench: the cost of verifying drafted tokens. One forward of `batch` sequences each computing 1 + k tokens
// (the last real token and k drafts, a chain) at a given context, timed through the ModelRunner (staging, graphs
// where the backend has them, logits back) against the same batch computing 1 token; prints the step time per k and
// the ratio to k = 0. From a measured acceptance, speedup = tokens per verify step / ratio.
// Usage: verify_bench --config ../shared/configs/llama-3.2-1b.json [--model DIR] [--device cpu|cuda] [--context 512]
//                     [--batches 1,8,32] [--ks 0,1,2,4,8,16] [--trees 16,32,64] [--repeats 5] [--json]
//                     [--no-row-exact]
// --trees: also token trees of that many drafted nodes per sequence (three children per node, breadth first).
// --no-row-exact: verification rows share the attention kernels' tiles (not bit-identical to decoding; the cost
// of exactness is the difference).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/device_setup.h"
#include "engine/model_runner.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "peregrine/error.h"

using namespace peregrine;

namespace {

std::vector<int> list_of(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, model_dir, device = "cpu", batches = "1,8,32", ks = "0,1,2,4,8,16", trees;
  int context = 512, repeats = 5, threads = 0;
  bool json = false, row_exact = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(ErrorCode::kInvalidArgument, a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") config_path = next();
    else if (a == "--model") model_dir = next();
    else if (a == "--device") device = next();
    else if (a == "--context") context = std::stoi(next());
    else if (a == "--batches") batches = next();
    else if (a == "--ks") ks = next();
    else if (a == "--trees") trees = next();
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--json") json = true;
    else if (a == "--no-row-exact") row_exact = false;
    else {
      std::fprintf(stderr, "verify_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const io::ModelConfig cfg = model_dir.empty() ? io::parse_model_config(io::read_text_file(config_path), config_path)
                                                  : io::load_model_config(model_dir);
    const engine::DeviceChoice choice = engine::resolve_device(device, "auto", cfg.torch_dtype);
    auto backend = engine::create_backend(choice, threads);
    const std::vector<int> bs = list_of(batches), kv = list_of(ks), tv = trees.empty() ? std::vector<int>{} : list_of(trees);
    const int max_b = *std::max_element(bs.begin(), bs.end());
    int max_k = *std::max_element(kv.begin(), kv.end());
    for (int t : tv) max_k = std::max(max_k, t);
    const int budget = std::max(context + 1, max_b * (1 + max_k));
    model::ModelOptions mo;
    mo.activation_dtype = choice.activation_dtype;
    mo.max_num_tokens = budget;
    mo.max_logits_rows = max_b * (1 + max_k);
    mo.random_weights = model_dir.empty();
    auto model = model_dir.empty() ? model::make_random_model(cfg, *backend, mo) : model::load_model(model_dir, *backend, mo);
    engine::RunnerOptions ro;
    ro.max_num_seqs = max_b;
    ro.max_num_batched_tokens = budget;
    ro.max_model_len = context + max_k + 16;
    ro.kv_dtype = choice.kv_dtype;
    ro.verify_rows = 16;  // verify steps replay graphs, as the engine's do
    ro.row_exact_verify = row_exact;
    engine::ModelRunner runner(std::move(backend), std::move(model), ro);
    const int per_seq = (context + max_k + 16 + 15) / 16;
    runner.allocate_kv_cache(per_seq * max_b);
    runner.warm_up();
    // Fill each sequence's context once (prefill), so verify steps attend over real keys.
    std::vector<engine::Sequence> seqs(static_cast<size_t>(max_b));
    for (int s = 0; s < max_b; ++s) {
      auto& q = seqs[static_cast<size_t>(s)];
      q.id = s;
      for (int t = 0; t < context + max_k + 1; ++t) q.token_ids.push_back(static_cast<int32_t>((t * 7919 + s * 31) % cfg.vocab_size));
      q.num_prompt_tokens = context;
      for (int b = 0; b < per_seq; ++b) q.block_table.push_back(s * per_seq + b);
      engine::SchedulerOutput out;
      out.seqs.push_back({&q, context, true});
      engine::LogitsRows rows;
      std::vector<float> logits;
      runner.prepare(out, {}, rows);
      runner.execute(logits);
    }
    nlohmann::json report = nlohmann::json::array();
    if (!json) std::printf("%6s %5s %10s %8s\n", "batch", "k", "step ms", "vs k=0");
    // Chains (k drafts, parents j - 1) then trees (k nodes, node j's parent (j - 1) / 3 - 1 ... breadth first).
    std::vector<std::pair<int, bool>> shapes;
    for (int k : kv) shapes.emplace_back(k, false);
    for (int t : tv) shapes.emplace_back(t, true);
    for (int b : bs) {
      double base = 0;
      for (auto [k, is_tree] : shapes) {
        engine::SchedulerOutput out;
        std::vector<engine::LogitsRequest> req;
        for (int s = 0; s < b; ++s) {
          auto& q = seqs[static_cast<size_t>(s)];
          q.num_computed_tokens = context - 1;  // the last real token, then k drafts (token_ids holds them)
          q.token_ids.resize(static_cast<size_t>(context));
          q.draft_tokens.assign(static_cast<size_t>(k), 5);
          q.draft_parents.clear();
          for (int j = 0; j < k; ++j) q.draft_parents.push_back(is_tree ? j / 3 - 1 : j - 1);
          out.seqs.push_back({&q, 1 + k, true, k});
          req.push_back({false, 1 + k});
        }
        engine::LogitsRows rows;
        std::vector<float> logits;
        std::vector<double> times;
        for (int r = 0; r < repeats + 1; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          runner.prepare(out, req, rows);
          runner.execute(logits);
          if (r > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(times.begin(), times.end());
        const double med = times[times.size() / 2];
        if (k == 0) base = med;
        const double ratio = base > 0 ? med / base : 1.0;
        if (!json) std::printf("%6d %4d%s %10.3f %8.2f\n", b, k, is_tree ? "t" : " ", 1e3 * med, ratio);
        report.push_back({{"batch", b}, {"k", k}, {"tree", is_tree}, {"step_ms", 1e3 * med}, {"ratio", ratio}});
      }
    }
    if (json) std::printf("%s\n", report.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "verify_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
