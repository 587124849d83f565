// StopMatcher (see stop_matcher.h): a trie of the stop strings with failure links, flattened so every node's
// edges are one sorted run of a single array.
#include "engine/stop_matcher.h"

#include <algorithm>
#include <deque>

namespace peregrine::engine {

StopMatcher::StopMatcher(const std::vector<std::string>& stops) {
  // The trie, with per-node edge lists while building.
  std::vector<std::vector<Edge>> children(1);
  nodes_.emplace_back();
  for (size_t s = 0; s < stops.size(); ++s) {
    const std::string& stop = stops[s];
    if (stop.empty()) continue;
    uint32_t node = 0;
    for (char ch : stop) {
      const unsigned char c = static_cast<unsigned char>(ch);
      auto& kids = children[node];
      auto it = std::find_if(kids.begin(), kids.end(), [c](const Edge& e) { return e.byte == c; });
      if (it != kids.end()) {
        node = it->target;
        continue;
      }
      const uint32_t next = static_cast<uint32_t>(nodes_.size());
      Node n;
      n.depth = nodes_[node].depth + 1;
      nodes_.push_back(n);
      children.emplace_back();
      children[node].push_back({c, next});
      node = next;
    }
    if (nodes_[node].match_len == 0) {  // the first of equal stop strings wins
      nodes_[node].match_len = static_cast<uint32_t>(stop.size());
      nodes_[node].match_index = static_cast<uint32_t>(s);
    }
  }
  // Flatten: each node's edges sorted by byte, contiguous.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    auto& kids = children[i];
    std::sort(kids.begin(), kids.end(), [](const Edge& a, const Edge& b) { return a.byte < b.byte; });
    nodes_[i].edge_begin = static_cast<uint32_t>(edges_.size());
    nodes_[i].edge_count = static_cast<uint32_t>(kids.size());
    edges_.insert(edges_.end(), kids.begin(), kids.end());
    kids.clear();
    kids.shrink_to_fit();
  }
  // Failure links in breadth-first order; a node without its own match inherits its failure node's (the
  // longest stop string ending here is then a proper suffix).
  std::deque<uint32_t> queue;
  for (uint32_t e = nodes_[0].edge_begin; e < nodes_[0].edge_begin + nodes_[0].edge_count; ++e) {
    nodes_[edges_[e].target].fail = 0;
    queue.push_back(edges_[e].target);
  }
  while (!queue.empty()) {
    const uint32_t u = queue.front();
    queue.pop_front();
    for (uint32_t e = nodes_[u].edge_begin; e < nodes_[u].edge_begin + nodes_[u].edge_count; ++e) {
      const unsigned char c = edges_[e].byte;
      const uint32_t v = edges_[e].target;
      uint32_t f = nodes_[u].fail;
      while (f != 0 && child(f, c) == 0) f = nodes_[f].fail;
      const uint32_t target = child(f, c);
      nodes_[v].fail = target != v ? target : 0;
      if (nodes_[v].match_len == 0) {
        nodes_[v].match_len = nodes_[nodes_[v].fail].match_len;
        nodes_[v].match_index = nodes_[nodes_[v].fail].match_index;
      }
      queue.push_back(v);
    }
  }
}

uint32_t StopMatcher::child(uint32_t node, unsigned char c) const {
  const Node& n = nodes_[node];
  const Edge* begin = edges_.data() + n.edge_begin;
  const Edge* end = begin + n.edge_count;
  const Edge* it = std::lower_bound(begin, end, c, [](const Edge& e, unsigned char b) { return e.byte < b; });
  return it != end && it->byte == c ? it->target : 0;
}

std::optional<StopMatcher::Match> StopMatcher::feed(uint32_t& state, std::string_view text, size_t offset,
                                                    size_t* steps) const {
  std::optional<Match> best;
  size_t taken = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    uint32_t s = state;
    // Each failure step shortens the current match and each byte lengthens it by at most one, so over any run
    // of bytes there are no more failure steps than bytes.
    while (s != 0 && child(s, c) == 0) {
      s = nodes_[s].fail;
      ++taken;
    }
    s = child(s, c);
    ++taken;
    state = s;
    const Node& n = nodes_[s];
    if (n.match_len != 0) {
      const size_t end = offset + i + 1;
      const size_t start = end - n.match_len;
      if (!best || start < best->start) best = Match{start, n.match_index};
    }
  }
  if (steps) *steps += taken;
  return best;
}

}  // namespace peregrine::engine
