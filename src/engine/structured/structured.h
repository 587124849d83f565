// Structured outputs: a request's constraint (SamplingParams::structured_outputs: a JSON schema, json_object, a
// regex, a choice or an EBNF/Lark grammar) compiled to a Grammar (grammar.h), then to a CompiledGrammar over the
// engine's vocabulary (matcher.h), cached by constraint so requests with the same schema share states and masks.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "engine/structured/grammar.h"
#include "engine/structured/matcher.h"
#include "peregrine/sampling_params.h"

namespace peregrine::engine::structured {

// Throw Error(kInvalidArgument) naming `field` (and the schema path) for what cannot be honoured.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const std::string& field);
Grammar json_object_grammar();
Grammar regex_grammar(std::string_view pattern, const std::string& field);
Grammar choice_grammar(const std::vector<std::string>& choices, const std::string& field);

// The grammar of a constraint (exactly one kind set; validate() checked that).
Grammar build_grammar(const StructuredOutputsParams& params);

// Compiled grammars by constraint, least recently used dropped beyond `capacity`. Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  // The compiled grammar (compiling on a miss); throws Error(kInvalidArgument) for a bad constraint.
  std::shared_ptr<CompiledGrammar> get(const StructuredOutputsParams& params, const std::shared_ptr<const TokenVocab>& vocab);
  // Checks a constraint (compiles it to a grammar, cached) without a vocabulary.
  void check(const StructuredOutputsParams& params);
  size_t size();

 private:
  static std::string key(const StructuredOutputsParams& params);
  size_t capacity_;
  std::mutex mutex_;
  std::list<std::string> lru_;
  struct Entry {
    std::shared_ptr<CompiledGrammar> compiled;
    std::shared_ptr<const Grammar> grammar;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace peregrine::engine::structured
