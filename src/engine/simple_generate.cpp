// simple_generate: each step packs, for every unfinished sequence, its next prompt chunk or its last token.
#include "engine/simple_generate.h"

#include <algorithm>
#include <string>

#include "core/status.h"

namespace peregrine::engine {

std::vector<SimpleGenerateResult> simple_generate(model::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                  const SimpleGenerateOptions& opt, int max_num_batched_tokens) {
  const int64_t vocab = model.config().vocab_size;
  const int bs = opt.block_size;
  struct Seq {
    std::vector<int32_t> tokens;
    size_t prompt_len = 0;
    size_t computed = 0;
    std::vector<int32_t> blocks;
    bool done = false;
    SamplerRng rng{0};
  };
  std::vector<Seq> seqs(prompts.size());
  std::vector<SimpleGenerateResult> results(prompts.size());
  int total_blocks = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error(ErrorCode::kInvalidArgument, "prompt " + std::to_string(i) + " is empty");
    for (int32_t id : prompts[i])
      if (id < 0 || id >= vocab)
        throw Error(ErrorCode::kInvalidArgument, "prompt " + std::to_string(i) + ": token id " + std::to_string(id) +
                                                     " is outside the vocabulary of " + std::to_string(vocab));
    Seq& s = seqs[i];
    s.tokens = prompts[i];
    s.prompt_len = prompts[i].size();
    s.rng = SamplerRng(opt.seed + i * 0x9E3779B97F4A7C15ull);
    const int needed = static_cast<int>((s.prompt_len + std::max(opt.max_tokens, 1) + bs - 1) / bs);
    for (int b = 0; b < needed; ++b) s.blocks.push_back(total_blocks++);
    results[i].prompt_token_ids = prompts[i];
    if (opt.prompt_logprobs >= 0) results[i].prompt_top.resize(s.prompt_len);
    if (opt.max_tokens <= 0) s.done = true;
  }
  model.allocate_kv_cache({total_blocks, bs, opt.kv_dtype});
  Sampler sampler;
  model::ForwardBatch batch;
  std::vector<float> logits;
  for (;;) {
    batch = {};
    // One entry per logits row, in row order: a prompt position (prompt logprobs) or a sequence to sample.
    struct RowUse { size_t seq; size_t pos; bool sample; };
    std::vector<RowUse> rows;
    int budget = max_num_batched_tokens;
    int max_blocks = 0;
    for (auto& s : seqs) max_blocks = std::max(max_blocks, static_cast<int>(s.blocks.size()));
    batch.max_blocks_per_seq = max_blocks;
    batch.query_start_loc.push_back(0);
    for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
      Seq& s = seqs[i];
      if (s.done) continue;
      const size_t n = std::min<size_t>(s.tokens.size() - s.computed, static_cast<size_t>(budget));
      for (size_t j = 0; j < n; ++j) {
        const size_t pos = s.computed + j;
        batch.token_ids.push_back(s.tokens[pos]);
        batch.positions.push_back(static_cast<int32_t>(pos));
        batch.slot_mapping.push_back(s.blocks[pos / bs] * bs + static_cast<int32_t>(pos % bs));
        const bool last = pos + 1 == s.tokens.size();
        if (last || (opt.prompt_logprobs >= 0 && pos + 1 < s.prompt_len)) {
          batch.logits_indices.push_back(batch.num_tokens() - 1);
          rows.push_back({i, pos, last});
        }
      }
      budget -= static_cast<int>(n);
      s.computed += n;
      batch.query_start_loc.push_back(batch.num_tokens());
      batch.seq_lens.push_back(static_cast<int32_t>(s.computed));
      for (int b = 0; b < max_blocks; ++b)
        batch.block_tables.push_back(b < static_cast<int>(s.blocks.size()) ? s.blocks[b] : 0);
    }
    if (batch.num_tokens() == 0) break;
    model.forward(batch, logits);
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* lg = logits.data() + r * vocab;
      const RowUse& use = rows[r];
      if (opt.prompt_logprobs >= 0 && use.pos + 1 < seqs[use.seq].prompt_len) {
        double lse = Sampler::log_sum_exp(lg, static_cast<int32_t>(vocab));
        results[use.seq].prompt_top[use.pos + 1] =
            Sampler::top_logprobs(lg, static_cast<int32_t>(vocab), opt.prompt_logprobs, lse);
      }
      if (!use.sample) continue;
      Seq& s = seqs[use.seq];
      SimpleGenerateResult& res = results[use.seq];
      SampledToken tok = sampler.sample(lg, static_cast<int32_t>(vocab), opt.sampler, s.rng);
      const int32_t id = tok.token;
      res.token_ids.push_back(id);
      res.samples.push_back(std::move(tok));
      if (opt.on_token) opt.on_token(use.seq, id);
      const bool eos = !opt.ignore_eos &&
                       std::find(opt.eos_token_ids.begin(), opt.eos_token_ids.end(), id) != opt.eos_token_ids.end();
      res.stopped_by_eos = eos;
      if (eos || static_cast<int>(res.token_ids.size()) >= opt.max_tokens) {
        s.done = true;
      } else {
        s.tokens.push_back(id);
      }
    }
  }
  return results;
}

}  // namespace peregrine::engine
