// Pre-tokenizer implementations.
#include "tokenizer/pre_tokenizers.h"

#include <algorithm>

#include "core/status.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/fast_split.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {

SplitBehavior parse_split_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw Error(ErrorCode::kFormatError, "tokenizer.json: unknown split behavior '" + name + "'");
}

namespace {
struct Piece {
  uint32_t begin, end;
  bool is_match;
};

// Applies `behavior` to pieces covering a span (HF's SplitDelimiterBehavior); returns kept [begin, end) pairs.
void apply_behavior(std::vector<Piece>& pieces, SplitBehavior behavior) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& p : pieces) out.push_back({p.begin, p.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (auto& p : pieces)
        if (!p.is_match) out.push_back(p);
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (auto& p : pieces) {
        if (p.is_match == prev && !out.empty()) out.back().end = p.end;
        else out.push_back({p.begin, p.end, false});
        prev = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (auto& p : pieces) {
        if (p.is_match && !prev && !out.empty()) out.back().end = p.end;
        else out.push_back({p.begin, p.end, false});
        prev = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = pieces.size(); k-- > 0;) {
        auto& p = pieces[k];
        if (p.is_match && !prev && !out.empty()) out.back().begin = p.begin;
        else out.push_back({p.begin, p.end, false});
        prev = p.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  pieces.swap(out);
}
}  // namespace

void split_spans(PreTokens& pt, const Pattern& pattern, SplitBehavior behavior, bool invert) {
  std::vector<Span> out;
  out.reserve(pt.spans.size() * 4);
  std::vector<Piece> pieces;
  for (const Span& span : pt.spans) {
    std::string_view text = pt.view(span);
    auto push = [&](uint32_t b, uint32_t e) {
      if (e > b) out.push_back(Span{span.begin + b, span.begin + e, span.at_origin && b == 0});
    };
    if (behavior == SplitBehavior::kIsolated) {
      // Fast path: every match and every gap becomes a span.
      uint32_t last = 0;
      pattern.for_each_match(text, [&](size_t b, size_t e) {
        push(last, static_cast<uint32_t>(b));
        push(static_cast<uint32_t>(b), static_cast<uint32_t>(e));
        last = static_cast<uint32_t>(e);
      });
      push(last, static_cast<uint32_t>(text.size()));
      continue;
    }
    pieces.clear();
    uint32_t last = 0;
    pattern.for_each_match(text, [&](size_t b, size_t e) {
      if (b > last) pieces.push_back({last, static_cast<uint32_t>(b), false});
      pieces.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e), true});
      last = static_cast<uint32_t>(e);
    });
    if (last < text.size() || pieces.empty()) pieces.push_back({last, static_cast<uint32_t>(text.size()), false});
    if (invert)
      for (auto& p : pieces) p.is_match = !p.is_match;
    apply_behavior(pieces, behavior);
    for (auto& p : pieces) push(p.begin, p.end);
  }
  pt.spans.swap(out);
}

namespace {

// Rebuilds pt.text by transforming each span; fn(view, out) appends the new text of one span.
template <typename F>
void rewrite_spans(PreTokens& pt, F&& fn) {
  std::string text;
  text.reserve(pt.text.size() + pt.spans.size() * 3);
  for (Span& s : pt.spans) {
    auto begin = static_cast<uint32_t>(text.size());
    fn(pt.view(s), s, text);
    s.begin = begin;
    s.end = static_cast<uint32_t>(text.size());
  }
  pt.text.swap(text);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(PreTokens& pt) const override {
    for (const auto& s : steps_)
      if (s) s->pre_tokenize(pt);
  }
  bool set_raw_byte_output() override { return !steps_.empty() && steps_.back() && steps_.back()->set_raw_byte_output(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {
    if (behavior_ == SplitBehavior::kIsolated && !invert_) fast_ = fast_split_kind(pattern_.regex_source());
  }
  void pre_tokenize(PreTokens& pt) const override {
    if (fast_ == FastSplitKind::kNone) {
      split_spans(pt, pattern_, behavior_, invert_);
      return;
    }
    // Isolated split with a hand-written matcher: matches tile the text, each becomes a span.
    std::vector<Span> out;
    out.reserve(pt.spans.size() + pt.text.size() / 4);
    for (const Span& span : pt.spans) {
      std::string_view text = pt.view(span);
      for (size_t pos = 0; pos < text.size();) {
        size_t len = fast_split_match(fast_, text, pos);
        out.push_back(Span{span.begin + static_cast<uint32_t>(pos), span.begin + static_cast<uint32_t>(pos + len),
                           span.at_origin && pos == 0});
        pos += len;
      }
    }
    pt.spans.swap(out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
  FastSplitKind fast_ = FastSplitKind::kNone;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_) pattern_ = Pattern::regex(kGpt2Pattern);
  }
  void pre_tokenize(PreTokens& pt) const override {
    if (add_prefix_space_) {
      rewrite_spans(pt, [](std::string_view v, Span&, std::string& out) {
        if (v.empty() || v[0] != ' ') out.push_back(' ');
        out.append(v);
      });
    }
    if (use_regex_) split_spans(pt, pattern_, SplitBehavior::kIsolated, false);
    if (!raw_bytes_) {
      const auto& t = byte_level_tables();
      rewrite_spans(pt, [&t](std::string_view v, Span&, std::string& out) {
        for (char c : v) out.append(t.byte_to_utf8[static_cast<unsigned char>(c)]);
      });
    }
  }
  bool set_raw_byte_output() override {
    raw_bytes_ = true;
    return true;
  }

 private:
  bool add_prefix_space_, use_regex_;
  bool raw_bytes_ = false;
  Pattern pattern_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split), pattern_(Pattern::literal(replacement_)) {}
  void pre_tokenize(PreTokens& pt) const override {
    rewrite_spans(pt, [this](std::string_view v, Span& s, std::string& out) {
      bool starts = v.substr(0, replacement_.size()) == replacement_ || (!v.empty() && v[0] == ' ');
      bool prepend = !starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && s.at_origin));
      if (prepend) out.append(replacement_);
      for (char c : v) {
        if (c == ' ') out.append(replacement_);
        else out.push_back(c);
      }
    });
    if (split_) split_spans(pt, pattern_, SplitBehavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Pattern pattern_;
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokens& pt) const override {
    std::vector<Span> out;
    for (const Span& s : pt.spans) {
      std::string_view v = pt.view(s);
      size_t i = 0, word = std::string_view::npos;
      while (i < v.size()) {
        size_t start = i;
        bool ws = is_white_space(next_code_point(v, i));
        if (ws && word != std::string_view::npos) {
          out.push_back(Span{s.begin + static_cast<uint32_t>(word), s.begin + static_cast<uint32_t>(start),
                             s.at_origin && word == 0});
          word = std::string_view::npos;
        } else if (!ws && word == std::string_view::npos) {
          word = start;
        }
      }
      if (word != std::string_view::npos)
        out.push_back(Span{s.begin + static_cast<uint32_t>(word), s.end, s.at_origin && word == 0});
    }
    pt.spans.swap(out);
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  std::string type = json_string(config, "type", "pre_tokenizer");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& c : json_array(config, "pretokenizers", "pre_tokenizer Sequence")) steps.push_back(make_pre_tokenizer(c));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(make_pattern(config, "Split pre_tokenizer"),
                                               parse_split_behavior(json_value<std::string>(config, "behavior", "Isolated")),
                                               json_value<bool>(config, "invert", false));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(json_value<bool>(config, "add_prefix_space", true),
                                                   json_value<bool>(config, "use_regex", true));
  if (type == "Metaspace") {
    std::string replacement = json_value<std::string>(config, "replacement", "\xE2\x96\x81");
    PrependScheme scheme = PrependScheme::kAlways;
    if (config.contains("prepend_scheme") && config["prepend_scheme"].is_string()) {
      std::string s = config["prepend_scheme"].get<std::string>();
      scheme = s == "first" ? PrependScheme::kFirst : s == "never" ? PrependScheme::kNever : PrependScheme::kAlways;
    } else if (config.contains("add_prefix_space")) {
      scheme = json_value<bool>(config, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, json_value<bool>(config, "split", true));
  }
  if (type == "Digits") {
    bool individual = json_value<bool>(config, "individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(Pattern::regex(individual ? "\\p{N}" : "\\p{N}+"),
                                               SplitBehavior::kIsolated, false);
  }
  if (type == "Punctuation") {
    return std::make_unique<SplitPreTokenizer>(Pattern::regex(R"([\p{P}!-/:-@\[-`{-~])"),
                                               parse_split_behavior(json_value<std::string>(config, "behavior", "Isolated")),
                                               false);
  }
  if (type == "Whitespace")
    return std::make_unique<SplitPreTokenizer>(Pattern::regex(R"(\w+|[^\w\s]+)"), SplitBehavior::kRemoved, true);
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  throw Error(ErrorCode::kUnsupported, "tokenizer.json: unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace peregrine::tokenizer
