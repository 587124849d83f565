// StopMatcher (see stop_matcher.h): a trie of the stop strings with failure links, flattened so every node's
// edges are one sorted run of a single array.
#include "engine/stop_matcher.h"

#include <algorithm>

namespace peregrine::engine {

StopMatcher::StopMatcher(const std::vector<std::string>& stops) {
  // The trie, as first-child / next-sibling lists while building (no allocation per node).
  size_t total = 1;
  for (const std::string& stop : stops) total += stop.size();
  std::vector<uint32_t> first_child, next_sibling;
  std::vector<unsigned char> byte_of;
  first_child.reserve(total);
  next_sibling.reserve(total);
  byte_of.reserve(total);
  nodes_.reserve(total);
  auto add_node = [&](uint32_t depth, unsigned char c) {
    Node n;
    n.depth = depth;
    nodes_.push_back(n);
    first_child.push_back(0);
    next_sibling.push_back(0);
    byte_of.push_back(c);
    return static_cast<uint32_t>(nodes_.size() - 1);
  };
  add_node(0, 0);
  for (size_t s = 0; s < stops.size(); ++s) {
    const std::string& stop = stops[s];
    if (stop.empty()) continue;
    uint32_t node = 0;
    for (char ch : stop) {
      const unsigned char c = static_cast<unsigned char>(ch);
      uint32_t kid = first_child[node];
      while (kid != 0 && byte_of[kid] != c) kid = next_sibling[kid];
      if (kid == 0) {
        kid = add_node(nodes_[node].depth + 1, c);
        next_sibling[kid] = first_child[node];
        first_child[node] = kid;
      }
      node = kid;
    }
    if (nodes_[node].match_len == 0) {  // the first of equal stop strings wins
      nodes_[node].match_len = static_cast<uint32_t>(stop.size());
      nodes_[node].match_index = static_cast<uint32_t>(s);
    }
  }
  // Flatten: each node's edges sorted by byte, contiguous.
  edges_.reserve(nodes_.size() - 1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].edge_begin = static_cast<uint32_t>(edges_.size());
    for (uint32_t kid = first_child[i]; kid != 0; kid = next_sibling[kid]) edges_.push_back({byte_of[kid], kid});
    nodes_[i].edge_count = static_cast<uint32_t>(edges_.size() - nodes_[i].edge_begin);
    std::sort(edges_.begin() + nodes_[i].edge_begin, edges_.end(),
              [](const Edge& a, const Edge& b) { return a.byte < b.byte; });
  }
  // Failure links in breadth-first order; a node without its own match inherits its failure node's (the
  // longest stop string ending here is then a proper suffix).
  std::vector<uint32_t> queue;
  queue.reserve(nodes_.size());
  for (uint32_t e = nodes_[0].edge_begin; e < nodes_[0].edge_begin + nodes_[0].edge_count; ++e) {
    nodes_[edges_[e].target].fail = 0;
    queue.push_back(edges_[e].target);
  }
  for (size_t head = 0; head < queue.size(); ++head) {
    const uint32_t u = queue[head];
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
