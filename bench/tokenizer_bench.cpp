// Tokenizer benchmark: load time and single-thread encode throughput of our tokenizer on a corpus.
// Usage: tokenizer_bench --model DIR --corpus FILE.json [--repeat N] [--ids-out IDS.jsonl]
//   FILE.json is a JSON array of documents (bench/tokenizer_bench.mjs writes one). Prints one JSON line:
//   {"load_ms", "bytes", "docs", "tokens", "encode_s", "mb_per_s", "first_mb_per_s"}: mb_per_s is the best of
//   --repeat runs over the corpus (word caches warm), first_mb_per_s the first run (caches cold).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string model, corpus_path, ids_out;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--corpus") corpus_path = argv[i + 1];
    else if (a == "--repeat") repeat = std::stoi(argv[i + 1]);
    else if (a == "--ids-out") ids_out = argv[i + 1];
  }
  if (model.empty() || corpus_path.empty()) {
    std::cerr << "usage: tokenizer_bench --model DIR --corpus FILE.json [--repeat N]\n";
    return 2;
  }
  try {
    std::ifstream f(corpus_path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::vector<std::string> docs = nlohmann::json::parse(ss.str()).get<std::vector<std::string>>();
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    auto t0 = Clock::now();
    auto tok = peregrine::tokenizer::Tokenizer::load(model);
    double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

    double best = 1e30, first = 0;
    size_t tokens = 0;
    std::vector<int32_t> ids;
    for (int r = 0; r < repeat; ++r) {
      tokens = 0;
      auto s = Clock::now();
      for (const auto& d : docs) {
        ids.clear();
        tok->encode_into(d, false, ids);
        tokens += ids.size();
      }
      double seconds = std::chrono::duration<double>(Clock::now() - s).count();
      if (r == 0) first = seconds;  // cold: empty word caches
      best = std::min(best, seconds);
    }
    if (!ids_out.empty()) {  // one JSON array of ids per document, for checking against another implementation
      std::ofstream o(ids_out);
      for (const auto& d : docs) o << nlohmann::json(tok->encode(d, false)).dump() << "\n";
    }
    nlohmann::json out{{"load_ms", load_ms}, {"bytes", bytes}, {"docs", docs.size()}, {"tokens", tokens},
                       {"encode_s", best}, {"mb_per_s", static_cast<double>(bytes) / 1e6 / best},
                       {"first_mb_per_s", static_cast<double>(bytes) / 1e6 / first}};
    std::cout << out.dump() << "\n";
  } catch (const peregrine::Error& e) {
    std::cerr << "error: " << e.message() << "\n";
    return 1;
  }
  return 0;
}
