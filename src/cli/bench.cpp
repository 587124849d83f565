// `peregrine bench`: the parent of the benchmark subcommands (latency here; throughput and serve come from
// the serving engine). Each prints its figures with the limit measured in the same run.
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/serving_bench.h"

namespace peregrine::cli {

void register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (latency, throughput, serve, prefix-cache, multi-turn, speculative)");
  bench->require_subcommand(1);
  register_bench_latency(*bench);
  register_bench_throughput(*bench);
  register_bench_serve(*bench);
  register_bench_prefix_cache(*bench);
  register_bench_speculative(*bench);
  register_bench_multi_turn(*bench);
}

}  // namespace peregrine::cli
