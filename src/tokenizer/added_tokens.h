// Added tokens (special or not) and the matcher that finds them in text before normal tokenization, as Hugging
// Face's AddedVocabulary: leftmost-longest matching, with the single_word, lstrip and rstrip flags. Tokens with
// normalized=true are matched in normalized text, the others in the raw input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of a section: either plain text [begin, end) or an added token (token >= 0, index into the tokens).
struct AddedTokenPiece {
  uint32_t begin = 0;
  uint32_t end = 0;
  int32_t token = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // patterns[i] is what to match for tokens[indices[i]] (normalized content for normalized tokens).
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns,
             const std::vector<int32_t>& indices);
  bool empty() const { return nodes_.size() <= 1; }
  // Splits `text` into plain pieces and added-token pieces (in order, covering the text; empty plain pieces are
  // omitted). Returns false when no token occurs (out is left empty).
  bool split(std::string_view text, std::vector<AddedTokenPiece>& out) const;

 private:
  struct Node {
    uint32_t first_edge = 0;
    uint16_t num_edges = 0;
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  struct Edge {
    unsigned char byte;
    uint32_t child;
  };
  // Longest match starting at `pos`; returns its length (0 if none) and sets token.
  size_t longest_match(std::string_view text, size_t pos, int32_t& token) const;

  const std::vector<AddedToken>* tokens_ = nullptr;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  bool first_byte_[256] = {};
};

}  // namespace peregrine::tokenizer
