// Decoders of tokenizer.json: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder and Sequence.
//
// Two forms: a faithful chain over token strings (used by Tokenizer::decode), and, for the chains real models use,
// a "piecewise" form where every token maps to bytes independently and only a few whole-string rules remain
// (lossy UTF-8, leading/trailing strip, Metaspace's first-token space). The streaming detokenizer uses the
// piecewise form so that its deltas concatenate exactly to the full decode.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace peregrine::tokenizer {

struct DecodeToken {
  std::string text;
  bool added = false;  // an added token: ByteLevel passes it through verbatim
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<DecodeToken>& tokens) const = 0;
};

// nullptr for JSON null. Throws Error(kUnsupported) for an unknown type.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config);

// Decodes a list of tokens to text: the chain, then concatenation (tokens joined by " " without a decoder).
std::string run_decoder(const Decoder* decoder, std::vector<DecodeToken> tokens);

class Pattern;
struct PiecewiseDecoder {
  enum class OpKind { kByteLevel, kByteFallback, kReplace, kMetaspace };
  struct Op {
    OpKind kind;
    std::string from, to;  // kReplace: literal from -> to; kMetaspace: replacement -> " "
  };
  std::vector<Op> ops;                 // applied to each token independently
  bool first_token_strip_space = false;  // Metaspace: drop one leading ' ' of the first token
  uint32_t strip_char = ' ';           // Strip after Fuse, on the whole string
  int strip_start = 0, strip_stop = 0;

  // The bytes token `text` contributes (may be invalid UTF-8, e.g. one byte of a fallback sequence).
  std::string piece(std::string_view text, bool added, bool first_token) const;
};
// Returns the piecewise form when the chain has one (see above), else nullopt.
std::optional<PiecewiseDecoder> compile_piecewise_decoder(const nlohmann::json& config);

}  // namespace peregrine::tokenizer
