// make_text_proposer: the proposers that need no model.
#include "engine/spec/proposer.h"

#include "core/status.h"
#include "engine/spec/lookahead_proposer.h"
#include "engine/spec/ngram_proposer.h"

namespace peregrine::engine {

std::unique_ptr<Proposer> make_text_proposer(const SpeculativeConfig& config,
                                             const std::function<std::vector<int32_t>(const std::string&)>& tokenize) {
  switch (config.method) {
    case SpeculativeConfig::Method::kNgram: return std::make_unique<NgramProposer>(config);
    case SpeculativeConfig::Method::kLookahead: return std::make_unique<LookaheadProposer>(config, tokenize);
    default:
      throw Error(ErrorCode::kUnsupported, std::string("speculative_config.method '") +
                                               SpeculativeConfig::method_name(config.method) +
                                               "' needs a model and is built by Engine::create");
  }
}

}  // namespace peregrine::engine
