// Added-token matching: a byte trie with leftmost-longest semantics and the lstrip/rstrip/single_word rules.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <map>

#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns,
                              const std::vector<int32_t>& indices) {
  tokens_ = &tokens;
  // Build with maps, then flatten into sorted edge arrays.
  struct BuildNode {
    std::map<unsigned char, uint32_t> children;
    int32_t token = -1;
  };
  std::vector<BuildNode> build(1);
  for (size_t k = 0; k < patterns.size(); ++k) {
    const std::string& p = patterns[k];
    if (p.empty()) continue;
    uint32_t node = 0;
    for (char c : p) {
      auto b = static_cast<unsigned char>(c);
      auto it = build[node].children.find(b);
      if (it == build[node].children.end()) {
        build.push_back(BuildNode{});
        it = build[node].children.emplace(b, static_cast<uint32_t>(build.size() - 1)).first;
      }
      node = it->second;
    }
    if (build[node].token < 0) build[node].token = indices[k];  // first registration wins
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
  nodes_.assign(build.size(), Node{});
  edges_.clear();
  for (size_t i = 0; i < build.size(); ++i) {
    nodes_[i].first_edge = static_cast<uint32_t>(edges_.size());
    nodes_[i].num_edges = static_cast<uint16_t>(build[i].children.size());
    nodes_[i].token = build[i].token;
    for (auto& [b, child] : build[i].children) edges_.push_back(Edge{b, child});
  }
}

size_t AddedTokenMatcher::longest_match(std::string_view text, size_t pos, int32_t& token) const {
  uint32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const Node& n = nodes_[node];
    auto b = static_cast<unsigned char>(text[i]);
    const Edge* first = edges_.data() + n.first_edge;
    const Edge* last = first + n.num_edges;
    const Edge* e = std::lower_bound(first, last, b, [](const Edge& x, unsigned char v) { return x.byte < v; });
    if (e == last || e->byte != b) break;
    node = e->child;
    if (nodes_[node].token >= 0) {
      best = i + 1 - pos;
      token = nodes_[node].token;
    }
  }
  return best;
}

namespace {
bool is_word_char(uint32_t cp) {
  // The regex crate's Unicode \w: alphabetic, marks, decimal numbers, connector punctuation, join controls.
  return cp == '_' || is_alphanumeric(cp) || is_mark(cp) || cp == 0x200C || cp == 0x200D;
}
uint32_t cp_before(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return next_code_point(s, start);
}
}  // namespace

bool AddedTokenMatcher::split(std::string_view text, std::vector<AddedTokenPiece>& out) const {
  out.clear();
  if (empty()) return false;
  size_t start_offset = 0;
  bool found = false;
  size_t pos = 0;
  while (pos < text.size()) {
    // Skip quickly to a byte that can start a token.
    while (pos < text.size() && !first_byte_[static_cast<unsigned char>(text[pos])]) ++pos;
    if (pos >= text.size()) break;
    int32_t token = -1;
    size_t len = longest_match(text, pos, token);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;
    const AddedToken& t = (*tokens_)[token];
    if (t.single_word) {
      bool start_ok = start == 0 || !is_word_char(cp_before(text, start));
      size_t i = stop;
      bool stop_ok = stop == text.size() || !is_word_char(next_code_point(text, i));
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t prev = s - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        size_t i = prev;
        if (!is_white_space(next_code_point(text, i))) break;
        s = prev;
      }
      start = s;
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!is_white_space(next_code_point(text, i))) break;
        stop = i;
      }
      pos = stop;
    }
    if (start_offset < start)
      out.push_back(AddedTokenPiece{static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start), -1});
    out.push_back(AddedTokenPiece{static_cast<uint32_t>(start), static_cast<uint32_t>(stop), token});
    start_offset = stop;
    found = true;
  }
  if (!found) {
    out.clear();
    return false;
  }
  if (start_offset < text.size())
    out.push_back(AddedTokenPiece{static_cast<uint32_t>(start_offset), static_cast<uint32_t>(text.size()), -1});
  return true;
}

}  // namespace peregrine::tokenizer
