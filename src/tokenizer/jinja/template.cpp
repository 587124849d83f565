// Template: parse once (lexer + parser), render with a fresh interpreter and scope per call.
#include "tokenizer/jinja/template.h"

#include "core/status.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"

namespace peregrine::jinja {

struct Template::Compiled {
  std::string source;
  SourceMap map;
  std::vector<NodePtr> body;
  explicit Compiled(std::string s) : source(std::move(s)), map(source) {}
};

Template::Template(std::string source) {
  if (source.size() > kMaxTemplateBytes) {
    throw Error(ErrorCode::kInvalidArgument, "chat template: the template is larger than " +
                                                 std::to_string(kMaxTemplateBytes) + " bytes");
  }
  auto compiled = std::make_shared<Compiled>(std::move(source));
  const std::vector<Token> tokens = tokenize(compiled->source, compiled->map);
  compiled->body = parse_template(tokens, compiled->map);
  compiled_ = std::move(compiled);
}

const std::string& Template::source() const { return compiled_->source; }

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object() && !context.is_null()) throw Error(ErrorCode::kInvalidArgument, "chat template: the context must be a JSON object");
  auto globals = std::make_shared<Scope>();
  install_globals(*globals, options.now);
  auto scope = std::make_shared<Scope>(globals);
  try {
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) scope->vars[it.key()] = value_from_json(it.value());
    }
  } catch (const EvalError& e) {
    throw Error(e.code, "chat template input: " + e.message);
  }
  Interpreter interpreter(compiled_->map, options);
  return interpreter.render(compiled_->body, scope);
}

}  // namespace peregrine::jinja
