// peregrine: the command-line entry point. Subcommands register themselves (see commands.h);
// every peregrine::Error is reported as one clear line on stderr with exit code 1.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "peregrine/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Peregrine: an LLM inference and serving engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "peregrine 0.1.0");
  peregrine::cli::register_generate(app);
  peregrine::cli::register_tokenize(app);
  peregrine::cli::register_chat_template(app);
  peregrine::cli::register_bench(app);
  peregrine::cli::register_serve(app);
  peregrine::cli::register_perplexity(app);
  peregrine::cli::register_quantize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const peregrine::Error& e) {
    std::cerr << "error: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
