// SpeculativeConfig: speculative decoding as vLLM's --speculative-config spells it (a JSON object), plus
// Peregrine's own methods. Drafted tokens are verified by the target model in one forward; the output is exactly
// what decoding without speculation produces (greedy: token for token; sampling: the same distribution).
//   {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": a, "prompt_lookup_max": b}
//       the longest recent n-gram match (n in [a, b]) in the request's own prompt and output proposes K tokens.
//   {"method": "lookahead", "num_speculative_tokens": K, "cache_tokens": N, "max_tree_tokens": T,
//    "num_branches": B, "warmup_files": [...], "prompt_lookup_min": a, "prompt_lookup_max": b}
//       a suffix cache over the prompts and outputs of all requests (bounded to N tokens, oldest dropped first,
//       optionally seeded from files) proposes up to B branches merged into a token tree of at most T nodes.
//   {"method": "draft_model", "model": DIR, "num_speculative_tokens": K}
//       a smaller model with the same vocabulary drafts K tokens greedily, batched, with its own paged KV;
//       "draft_context": N (default 256; 0 = all) bounds the tokens of a sequence it catches up on when it starts
//       drafting it (the latest N: a long prompt costs the drafter that much, not the whole prompt).
//   {"method": "self", "draft_num_layers": N | "draft_layers": [...], "num_speculative_tokens": K}
//       the target's own first layers draft (no second model).
//   draft_model and self also take "draft_vocab_size": N (the drafter's argmax covers N token ids, the most
//   frequent in the requests seen so far plus EOS; default 4096; 0 = the whole vocabulary) or
//   "speculative_token_map": PATH (a fixed set: a JSON list of token ids, or ids separated by whitespace), as
//   SGLang / FR-Spec; drafts only, so the output is unchanged.
// Common keys: "disable_by_batch_size" (no speculation while more sequences than this decode; 0 = no fixed limit:
// the engine measures per batch size whether drafts pay), "adaptive" (per-request draft length follows its
// acceptance; default true).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine {

struct SpeculativeConfig {
  enum class Method { kNone, kNgram, kLookahead, kDraftModel, kSelf };
  Method method = Method::kNone;
  int num_speculative_tokens = 0;
  // ngram and lookahead: the n-gram window matched against the context.
  int prompt_lookup_min = 1;
  int prompt_lookup_max = 4;
  // lookahead
  int64_t cache_tokens = 1 << 22;  // tokens the global cache keeps
  int max_tree_tokens = 0;         // nodes of a verified token tree; 0 = num_speculative_tokens (a chain)
  int num_branches = 1;            // branches proposed at each depth (merged into the tree)
  std::vector<std::string> warmup_files;
  // draft_model
  std::string model;
  // The drafter's KV of a sequence covers at most this many of its latest tokens when drafting starts (0: all of
  // them; -1: kDefaultDraftContext), so a long prompt costs the drafter a bounded catch-up.
  static constexpr int kDefaultDraftContext = 256;
  int draft_context = -1;
  int drafter_context() const { return draft_context >= 0 ? draft_context : kDefaultDraftContext; }
  // self
  std::vector<int> draft_layers;
  int draft_num_layers = 0;
  // draft_model and self: the drafter's reduced vocabulary. draft_vocab_size -1 = the default
  // (kDefaultDraftVocabSize), 0 = the whole vocabulary; a token map gives a fixed set instead.
  // The default: on pycoder-tiny's 32K vocabulary 4096 rows cut a drafter's decode step 2.5-4.6x on the CPU (the LM
  // head is most of a small drafter's weights) without fewer tokens accepted (docs/BENCHMARKS.md).
  static constexpr int kDefaultDraftVocabSize = 4096;
  int draft_vocab_size = -1;
  std::string speculative_token_map;
  // scheduling
  int disable_by_batch_size = 0;
  bool adaptive = true;

  bool enabled() const { return method != Method::kNone; }
  // Tokens one sequence may verify in a step (the tree size, or K for a chain).
  int max_verify_tokens() const { return max_tree_tokens > 0 ? max_tree_tokens : num_speculative_tokens; }
  static const char* method_name(Method m);
  // Rows of the drafter's frequency-chosen vocabulary: draft_vocab_size, or the method's default where it is -1
  // (0: the whole vocabulary, also where a token map is given).
  int drafter_vocab_rows() const;

  // Parses vLLM's JSON form. Throws Error(kInvalidArgument) naming the key ("speculative_config.KEY: ...") for an
  // unknown method or key, a wrong type or a value out of range. An empty string gives the disabled config.
  static SpeculativeConfig parse(std::string_view json);
  // Checks an already filled config the same way.
  void validate() const;
};

}  // namespace peregrine
