// Constraint kinds to grammars, and the cache of compiled grammars (see structured.h).
#include "engine/structured/structured.h"

#include "peregrine/error.h"

namespace peregrine::engine::structured {

Grammar regex_grammar(std::string_view pattern, const std::string& field) {
  GrammarBuilder b;
  const Element e = compile_regex(b, pattern, false, field);
  const int root = b.new_rule("root");
  b.add_alt(root, {e});
  Grammar g = b.take(root);
  g.check(field);
  return g;
}

Grammar choice_grammar(const std::vector<std::string>& choices, const std::string& field) {
  GrammarBuilder b;
  const int root = b.new_rule("root");
  for (const std::string& c : choices) {
    Sequence s;
    for (char ch : c) s.push_back(b.byte(static_cast<uint8_t>(ch)));
    b.add_alt(root, std::move(s));
  }
  Grammar g = b.take(root);
  g.check(field);
  return g;
}

Grammar build_grammar(const StructuredOutputsParams& p) {
  const std::string field = p.field.empty() ? "structured_outputs" : p.field;
  if (p.json) {
    nlohmann::ordered_json schema = nlohmann::ordered_json::parse(*p.json, nullptr, false);
    if (schema.is_discarded()) throw Error(ErrorCode::kInvalidArgument, field + ": the JSON schema is not valid JSON", field);
    return json_schema_grammar(schema, field);
  }
  if (p.json_object) return json_object_grammar();
  if (p.regex) return regex_grammar(*p.regex, field);
  if (p.choice) return choice_grammar(*p.choice, field);
  if (p.grammar) return compile_ebnf(*p.grammar, field);
  throw Error(ErrorCode::kInvalidArgument, field + ": no constraint given", field);
}

std::string GrammarCache::key(const StructuredOutputsParams& p) {
  std::string k;
  if (p.json) k = "j" + *p.json;
  else if (p.json_object) k = "o";
  else if (p.regex) k = "r" + *p.regex;
  else if (p.grammar) k = "g" + *p.grammar;
  else if (p.choice) {
    k = "c";
    for (const std::string& c : *p.choice) k += std::to_string(c.size()) + ":" + c;
  }
  return k;
}

std::shared_ptr<CompiledGrammar> GrammarCache::get(const StructuredOutputsParams& params,
                                                   const std::shared_ptr<const TokenVocab>& vocab) {
  const std::string k = key(params);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      if (!it->second.compiled) it->second.compiled = std::make_shared<CompiledGrammar>(*it->second.grammar, vocab);
      return it->second.compiled;
    }
  }
  // Compile outside the lock (another thread may compile the same constraint; the first stored wins).
  auto grammar = std::make_shared<const Grammar>(build_grammar(params));
  auto compiled = std::make_shared<CompiledGrammar>(*grammar, vocab);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    if (!it->second.compiled) it->second.compiled = compiled;
    return it->second.compiled;
  }
  lru_.push_front(k);
  entries_.emplace(k, Entry{compiled, grammar, lru_.begin()});
  while (entries_.size() > capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

void GrammarCache::check(const StructuredOutputsParams& params) {
  const std::string k = key(params);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.count(k)) return;
  }
  auto grammar = std::make_shared<const Grammar>(build_grammar(params));
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.count(k)) return;
  lru_.push_front(k);
  entries_.emplace(k, Entry{nullptr, grammar, lru_.begin()});
  while (entries_.size() > capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
}

size_t GrammarCache::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace peregrine::engine::structured
