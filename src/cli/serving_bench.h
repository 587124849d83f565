// Registration of the serving benchmarks under `peregrine bench` (throughput: offline through the Engine; serve:
// Poisson arrivals against a running server; prefix-cache: TTFT with a cached prefix vs cold;
// multi-turn: growing conversations with the KV tiers off and on). The `bench` parent (bench.cpp) calls these.
#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

void register_bench_throughput(CLI::App& bench);
void register_bench_serve(CLI::App& bench);
void register_bench_prefix_cache(CLI::App& bench);
void register_bench_speculative(CLI::App& bench);
void register_bench_multi_turn(CLI::App& bench);

}  // namespace peregrine::cli
