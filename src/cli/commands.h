// Registration of the CLI's subcommands; one source file per subcommand (generate, tokenize, serve, ...).
// Each register_* adds its subcommand to the app and sets a callback that runs it; errors are thrown as
// peregrine::Error and reported by main.
#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

void register_generate(CLI::App& app);
void register_tokenize(CLI::App& app);       // tokenize + detokenize
void register_chat_template(CLI::App& app);  // chat-template
void register_serve(CLI::App& app);
void register_bench(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_quantize(CLI::App& app);

}  // namespace peregrine::cli
