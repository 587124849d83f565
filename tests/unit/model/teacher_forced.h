// Teacher-forced deviation of an engine from a reference's cases (the quant fixtures' and the quantize round trips'
// *.reference.json layout: prompt_ids, output_ids, prefill_top5, top5_logprobs): every top-5 entry of every prefill
// position and step, compared with the engine's prompt logprobs (top 20) of the prompt followed by the reference
// output. Shared by the 8-bit and W4A8 model tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "peregrine/engine.h"

namespace peregrine::testing {

struct Deviation {
  double max = 0, sum = 0;
  int64_t count = 0;
  double mean() const { return count ? sum / static_cast<double>(count) : 0; }
};

inline Deviation teacher_forced(Engine& engine, const nlohmann::json& cases) {
  std::vector<std::vector<int32_t>> prompts;
  for (const nlohmann::json& c : cases) {
    auto p = c["prompt_ids"].get<std::vector<int32_t>>();
    auto o = c["output_ids"].get<std::vector<int32_t>>();
    p.insert(p.end(), o.begin(), o.end());
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.max_tokens = 1;
  sp.temperature = 0;
  sp.prompt_logprobs = 20;
  sp.ignore_eos = true;
  const std::vector<RequestOutput> results = engine.generate(prompts, sp);
  Deviation d;
  auto compare = [&](const nlohmann::json& top5, const PositionLogprobs& pos) {
    for (const nlohmann::json& e : top5) {
      const int32_t id = e[0].get<int32_t>();
      const double lp = e[1].get<double>();
      double got = pos.top.empty() ? -1e9 : pos.top.back().logprob;  // beyond our top-20: at most the 20th
      for (const TokenLogprob& t : pos.top)
        if (t.token_id == id) got = t.logprob;
      const double dev = std::fabs(got - lp);
      d.max = std::max(d.max, dev);
      d.sum += dev;
      ++d.count;
    }
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const nlohmann::json& c = cases[i];
    const size_t plen = c["prompt_ids"].size();
    const auto& pl = results[i].prompt_logprobs;
    if (c.contains("prefill_top5"))
      for (size_t p = 0; p + 1 < plen; ++p)
        if (!c["prefill_top5"][p].is_null()) compare(c["prefill_top5"][p], pl.at(p + 1));
    for (size_t s = 0; s < c["top5_logprobs"].size(); ++s)
      if (!c["top5_logprobs"][s].is_null()) compare(c["top5_logprobs"][s], pl.at(plen + s));
  }
  return d;
}

}  // namespace peregrine::testing
