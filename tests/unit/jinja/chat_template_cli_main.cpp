// A stand-alone `chat-template` command (the same code as `peregrine chat-template`) so the template tests can
// run without linking the whole engine. Usage: peregrine_chat_template_tool chat-template --model DIR ...
#include <iostream>

#include "cli/commands.h"
#include "peregrine/error.h"

int main(int argc, char** argv) {
  CLI::App app{"chat-template test driver"};
  app.require_subcommand(1);
  peregrine::cli::register_chat_template(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const peregrine::Error& e) {
    std::cerr << "error: " << e.message() << "\n";
    return 1;
  }
  return 0;
}
