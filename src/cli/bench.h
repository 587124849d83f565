// Registration of `peregrine bench` subcommands (one source file each).
#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

void register_bench_latency(CLI::App& bench);

}  // namespace peregrine::cli
