// DraftVocab: the reduced draft vocabulary's selection (see draft_vocab.h).
#include "engine/spec/draft_vocab.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/status.h"
#include "io/hf_config.h"

namespace peregrine::engine {
namespace {

constexpr int kRowMultiple = 64;

int rounded_rows(int rows, int vocab) {
  const int up = (std::max(rows, 1) + kRowMultiple - 1) / kRowMultiple * kRowMultiple;
  return std::min(up, vocab);
}

[[noreturn]] void bad_map(const std::filesystem::path& file, const std::string& problem) {
  throw Error(ErrorCode::kInvalidArgument, "speculative_config.speculative_token_map: " + file.string() + ": " + problem,
              "speculative_config");
}

}  // namespace

DraftVocab::DraftVocab(int rows, int vocab, std::span<const int32_t> pinned) {
  PEREGRINE_CHECK(vocab > 0, "draft vocabulary of an empty vocabulary");
  const int n = rounded_rows(rows, vocab);
  row_of_.assign(static_cast<size_t>(vocab), -1);
  score_.assign(static_cast<size_t>(vocab), 0.0f);
  seen_.assign(static_cast<size_t>(vocab), -1);
  pinned_.assign(static_cast<size_t>(vocab), 0);
  int32_t filler = -1;
  for (int32_t t : pinned) {
    if (t < 0 || t >= vocab) continue;
    if (filler < 0) filler = t;
    pinned_[static_cast<size_t>(t)] = 1;
  }
  filler = std::max(filler, 0);
  ids_.assign(static_cast<size_t>(n), filler);
  for (int32_t t : pinned) {
    if (t >= 0 && t < vocab && row_of_[static_cast<size_t>(t)] < 0 && used_ < n) place(t, used_++);
  }
  period_ = std::max(256, n / 4);
  dirty_lo_ = 0;
  dirty_hi_ = n;
}

DraftVocab DraftVocab::fixed(std::span<const int32_t> ids, int vocab, std::span<const int32_t> pinned) {
  std::vector<int32_t> all;
  std::vector<char> have(static_cast<size_t>(vocab), 0);
  for (std::span<const int32_t> part : {ids, pinned}) {
    for (int32_t t : part) {
      if (t < 0 || t >= vocab || have[static_cast<size_t>(t)]) continue;
      have[static_cast<size_t>(t)] = 1;
      all.push_back(t);
    }
  }
  PEREGRINE_CHECK(!all.empty(), "a fixed draft vocabulary needs at least one token");
  DraftVocab v;
  const int n = rounded_rows(static_cast<int>(all.size()), vocab);
  v.row_of_.assign(static_cast<size_t>(vocab), -1);
  v.ids_.assign(static_cast<size_t>(n), all[0]);
  for (int32_t t : all) {
    if (v.used_ < n) v.place(t, v.used_++);
  }
  v.fixed_ = true;
  v.dirty_hi_ = n;
  return v;
}

void DraftVocab::place(int32_t t, int row) {
  const int32_t old = ids_[static_cast<size_t>(row)];
  if (row < used_ && row_of_[static_cast<size_t>(old)] == row) row_of_[static_cast<size_t>(old)] = -1;
  ids_[static_cast<size_t>(row)] = t;
  row_of_[static_cast<size_t>(t)] = row;
  mark(row);
}

void DraftVocab::mark(int row) {
  if (dirty_lo_ == dirty_hi_) {
    dirty_lo_ = row;
    dirty_hi_ = row + 1;
    return;
  }
  dirty_lo_ = std::min(dirty_lo_, row);
  dirty_hi_ = std::max(dirty_hi_, row + 1);
}

std::pair<int, int> DraftVocab::take_dirty() {
  const std::pair<int, int> d{dirty_lo_, dirty_hi_};
  dirty_lo_ = dirty_hi_ = 0;
  return d;
}

void DraftVocab::observe(std::span<const int32_t> tokens) {
  if (fixed_) return;
  const int n = rows();
  for (int32_t t : tokens) {
    if (t < 0 || t >= static_cast<int32_t>(row_of_.size())) continue;
    const size_t i = static_cast<size_t>(t);
    score_[i] += 1.0f;
    seen_[i] = window_;
    ++since_;
    if (row_of_[i] >= 0) continue;
    if (used_ < n) {
      place(t, used_++);
    } else {
      ++misses_;
    }
  }
  if (used_ == n && misses_ > 0 && since_ >= period_) rerank();
}

void DraftVocab::rerank() {
  const int n = rows();
  std::vector<int32_t> cand;
  for (size_t t = 0; t < row_of_.size(); ++t) {
    if (row_of_[t] >= 0 || score_[t] > 0.0f || pinned_[t]) cand.push_back(static_cast<int32_t>(t));
  }
  // Pinned first, then seen in this window, then by score; ties keep the tokens already in (no churn), then by id.
  auto before = [&](int32_t a, int32_t b) {
    const size_t i = static_cast<size_t>(a), j = static_cast<size_t>(b);
    if (pinned_[i] != pinned_[j]) return pinned_[i] > pinned_[j];
    const bool ra = seen_[i] == window_, rb = seen_[j] == window_;
    if (ra != rb) return ra;
    if (score_[i] != score_[j]) return score_[i] > score_[j];
    const bool ia = row_of_[i] >= 0, ib = row_of_[j] >= 0;
    if (ia != ib) return ia;
    return a < b;
  };
  if (static_cast<int>(cand.size()) > n) {
    std::nth_element(cand.begin(), cand.begin() + n, cand.end(), before);
    cand.resize(static_cast<size_t>(n));
  }
  std::vector<char> keep(row_of_.size(), 0);
  for (int32_t t : cand) keep[static_cast<size_t>(t)] = 1;
  // Rows of tokens that leave go to the tokens that come in, in row order.
  std::vector<int> free_rows;
  for (int r = 0; r < n; ++r) {
    if (!keep[static_cast<size_t>(ids_[static_cast<size_t>(r)])]) free_rows.push_back(r);
  }
  size_t next = 0;
  for (int32_t t : cand) {
    if (row_of_[static_cast<size_t>(t)] >= 0) continue;
    PEREGRINE_CHECK(next < free_rows.size(), "draft vocabulary re-rank: more newcomers than rows");
    place(t, free_rows[next++]);
  }
  for (float& s : score_) s *= 0.5f;
  ++window_;
  since_ = 0;
  misses_ = 0;
}

std::vector<int32_t> read_token_map(const std::filesystem::path& file, int vocab) {
  std::string text;
  try {
    text = io::read_text_file(file);
  } catch (const Error&) {
    bad_map(file, "cannot be read");
  }
  std::vector<int64_t> raw;
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && text[start] == '[') {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) bad_map(file, "not a JSON list of token ids");
    for (const auto& x : j) {
      if (!x.is_number_integer()) bad_map(file, "expected integer token ids, got " + x.dump());
      raw.push_back(x.get<int64_t>());
    }
  } else {
    std::istringstream words(text);
    std::string w;
    while (words >> w) {
      size_t used = 0;
      int64_t v = 0;
      try {
        v = std::stoll(w, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != w.size()) bad_map(file, "expected whitespace-separated token ids, got '" + w.substr(0, 40) + "'");
      raw.push_back(v);
    }
  }
  if (raw.empty()) bad_map(file, "holds no token ids");
  std::vector<int32_t> ids;
  ids.reserve(raw.size());
  for (int64_t v : raw) {
    if (v < 0 || v >= vocab)
      bad_map(file, "token id " + std::to_string(v) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

}  // namespace peregrine::engine
