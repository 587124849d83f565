// StopMatcher: incremental stop-string matching for one request (Aho-Corasick over the stop strings' bytes).
// Built once per request and shared by its n sequences, each of which keeps only a state number. Feeding a
// sequence's new text costs O(new bytes) amortised over the whole output, whatever the number and length of the
// stop strings (at most SamplingParams::kMaxStopStrings / kMaxStopStringBytes / kMaxStopBytesTotal, checked by
// SamplingParams::validate), and the length of text to hold back from a stream (the longest suffix of the output
// that is a prefix of some stop string) is read off the state in O(1). The automaton takes about 20 bytes per
// stop-string byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::engine {

class StopMatcher {
 public:
  explicit StopMatcher(const std::vector<std::string>& stops);

  struct Match {
    size_t start = 0;       // offset of the stop string's first byte in the whole fed text
    size_t stop_index = 0;  // which stop string (index into the constructor's list)
  };

  // Feeds `text`, the bytes that follow everything fed before (whose end was at `offset` and left `state`).
  // Returns the stop string that ends inside `text` and starts first (of those starting at the same byte, the
  // shortest), or nullopt; `state` always advances over all of `text`. `steps` (optional) adds the
  // automaton transitions taken: at most 2 per byte over any sequence of calls, which the tests check.
  std::optional<Match> feed(uint32_t& state, std::string_view text, size_t offset, size_t* steps = nullptr) const;

  // Bytes at the end of the fed text that could still begin a stop string.
  size_t held_back(uint32_t state) const { return nodes_[state].depth; }

  size_t num_states() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t edge_begin = 0;  // edges_[edge_begin, edge_begin + edge_count), sorted by byte
    uint32_t edge_count = 0;
    uint32_t fail = 0;       // the longest proper suffix of this node's string that is also a node
    uint32_t depth = 0;      // length of this node's string
    uint32_t match_len = 0;  // the longest stop string that ends here (0: none)
    uint32_t match_index = 0;
  };
  struct Edge {
    unsigned char byte;
    uint32_t target;
  };

  // The child of `node` for byte c, or 0 when there is none (0 is the root, never a child).
  uint32_t child(uint32_t node, unsigned char c) const;

  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
};

}  // namespace peregrine::engine
