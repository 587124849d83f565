// GrammarBuilder helpers, UTF-8 code point ranges as byte sequences, and Grammar::check (see grammar.h).
#include "engine/structured/grammar.h"

#include <algorithm>
#include <functional>

#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

[[noreturn]] void fail(const std::string& field, const std::string& msg) {
  throw Error(ErrorCode::kInvalidArgument, field + ": " + msg, field);
}

int utf8_encode(uint32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

}  // namespace

GrammarBuilder::GrammarBuilder() = default;

Grammar GrammarBuilder::take(int root) {
  g_.root = root;
  return std::move(g_);
}

int GrammarBuilder::new_rule(std::string name) {
  if (g_.rules.size() >= kMaxRules) {
    throw Error(ErrorCode::kInvalidArgument, "the constraint is too large (more than " + std::to_string(kMaxRules) + " grammar rules)");
  }
  g_.rules.push_back(Rule{std::move(name), {}});
  return static_cast<int>(g_.rules.size() - 1);
}

void GrammarBuilder::add_alt(int rule, Sequence seq) { g_.rules[static_cast<size_t>(rule)].alts.push_back(std::move(seq)); }

Element GrammarBuilder::cls(const ByteSet& set) {
  std::string key(reinterpret_cast<const char*>(set.bits.data()), sizeof(set.bits));
  auto it = class_index_.find(key);
  if (it != class_index_.end()) return Element{it->second, -1};
  g_.classes.push_back(set);
  const int id = static_cast<int>(g_.classes.size() - 1);
  class_index_.emplace(std::move(key), id);
  return Element{id, -1};
}

Element GrammarBuilder::empty() {
  if (empty_rule_ < 0) {
    empty_rule_ = new_rule("empty");
    add_alt(empty_rule_, {});
  }
  return ref(empty_rule_);
}

Element GrammarBuilder::literal(std::string_view s) {
  if (s.size() == 1) return byte(static_cast<uint8_t>(s[0]));
  if (s.empty()) return empty();
  auto it = literal_rules_.find(std::string(s));
  if (it != literal_rules_.end()) return ref(it->second);
  Sequence seq;
  for (char c : s) seq.push_back(byte(static_cast<uint8_t>(c)));
  const int r = new_rule("lit");
  add_alt(r, std::move(seq));
  literal_rules_.emplace(std::string(s), r);
  return ref(r);
}

Element GrammarBuilder::seq(Sequence s, const char* name) {
  const int r = new_rule(name);
  add_alt(r, std::move(s));
  return ref(r);
}

Element GrammarBuilder::alt(std::vector<Sequence> alts, const char* name) {
  const int r = new_rule(name);
  for (auto& a : alts) add_alt(r, std::move(a));
  return ref(r);
}

Element GrammarBuilder::optional(Element e) { return alt({{e}, {}}, "opt"); }

Element GrammarBuilder::star(Element e) {
  const int r = new_rule("star");
  add_alt(r, {e, ref(r)});  // tail call: the matcher's stack does not grow
  add_alt(r, {});
  return ref(r);
}

Element GrammarBuilder::plus(Element e) { return seq({e, star(e)}, "plus"); }

Element GrammarBuilder::repeat(Element e, int64_t min, int64_t max, const std::string& field) {
  constexpr int64_t kMaxCount = 10000;
  if (min < 0 || (max >= 0 && max < min)) fail(field, "bad repetition bounds {" + std::to_string(min) + "," + std::to_string(max) + "}");
  if (min > kMaxCount || max > kMaxCount) fail(field, "repetition counts above " + std::to_string(kMaxCount) + " are not supported");
  Sequence s;
  for (int64_t i = 0; i < min; ++i) s.push_back(e);
  if (max < 0) {
    s.push_back(star(e));
  } else if (max > min) {
    // (e (e (e)?)?)? : each rule is "e next | empty", chained, so the tail is a tail call.
    Element tail = optional(e);
    for (int64_t i = min + 1; i < max; ++i) tail = alt({{e, tail}, {}}, "rep");
    s.push_back(tail);
  }
  if (s.size() == 1) return s[0];
  return seq(std::move(s), "rep");
}

void GrammarBuilder::add_codepoint_range(std::vector<Sequence>& alts, uint32_t lo, uint32_t hi) {
  // Split at the encoding-length boundaries, skip surrogates, then split until every byte position is a range.
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) add_codepoint_range(alts, lo, 0xD7FF);
    if (hi > 0xDFFF) add_codepoint_range(alts, 0xE000, hi);
    return;
  }
  for (uint32_t b : bounds) {
    if (lo <= b && hi > b) {
      add_codepoint_range(alts, lo, b);
      add_codepoint_range(alts, b + 1, hi);
      return;
    }
  }
  uint8_t a[4], z[4];
  const int n = utf8_encode(lo, a);
  utf8_encode(hi, z);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        add_codepoint_range(alts, lo, lo | m);
        add_codepoint_range(alts, (lo | m) + 1, hi);
        return;
      }
      if ((hi & m) != m) {
        add_codepoint_range(alts, lo, (hi & ~m) - 1);
        add_codepoint_range(alts, hi & ~m, hi);
        return;
      }
    }
  }
  Sequence s;
  for (int i = 0; i < n; ++i) {
    ByteSet set;
    set.set_range(a[i], z[i]);
    s.push_back(cls(set));
  }
  alts.push_back(std::move(s));
}

Element GrammarBuilder::codepoints(const CodepointRanges& ranges, const char* name) {
  std::vector<Sequence> alts;
  ByteSet ascii;
  for (auto [lo, hi] : ranges) {
    if (lo < 0x80) {
      ascii.set_range(static_cast<int>(lo), static_cast<int>(std::min<uint32_t>(hi, 0x7F)));
      if (hi < 0x80) continue;
      lo = 0x80;
    }
    add_codepoint_range(alts, lo, hi);
  }
  // Multi-byte sequences that share their leading bytes' classes stay separate alternatives; merge the
  // single-byte ones into one class.
  if (!ascii.empty()) alts.insert(alts.begin(), Sequence{cls(ascii)});
  if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
  if (alts.empty()) fail("regex", "an empty character class matches nothing");
  return alt(std::move(alts), name);
}

CodepointRanges normalize_ranges(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodepointRanges complement_ranges(const CodepointRanges& r) {
  CodepointRanges n = normalize_ranges(r);
  CodepointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

void Grammar::check(const std::string& field) const {
  if (root < 0 || root >= static_cast<int>(rules.size())) fail(field, "the grammar has no root rule");
  const size_t n = rules.size();
  // Nullable rules (fixed point), then the "may call first" graph must be acyclic (no left recursion).
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : rules[r].alts) {
        bool all = true;
        for (const Element& e : s) {
          if (e.cls >= 0 || !nullable[static_cast<size_t>(e.rule)]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Calls a rule may make before reading a byte, marked when they are not the alternative's last element (a call
  // in tail position replaces the caller's frame, so only the other calls grow the stack). A cycle of such calls
  // with at least one growing call would make the matcher's closure endless: that is left recursion, refused.
  struct Edge {
    int to;
    bool grows;
  };
  std::vector<std::vector<Edge>> first(n);
  for (size_t r = 0; r < n; ++r) {
    if (rules[r].alts.empty()) fail(field, "rule '" + rules[r].name + "' has no alternatives");
    for (const Sequence& s : rules[r].alts) {
      for (size_t k = 0; k < s.size(); ++k) {
        const Element& e = s[k];
        if (e.rule >= static_cast<int>(n) || (e.rule < 0 && e.cls < 0)) fail(field, "rule '" + rules[r].name + "' refers to an undefined rule");
        if (e.cls >= 0) break;
        first[r].push_back(Edge{e.rule, k + 1 < s.size()});
        if (!nullable[static_cast<size_t>(e.rule)]) break;
      }
    }
  }
  // Strongly connected components (Tarjan, iterative); a growing call inside one component is a cycle.
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<char> on_stack(n, 0);
  std::vector<int> scc_stack;
  int counter = 0, num_comps = 0;
  for (size_t s0 = 0; s0 < n; ++s0) {
    if (index[s0] >= 0) continue;
    std::vector<std::pair<int, size_t>> work{{static_cast<int>(s0), 0}};
    index[s0] = low[s0] = counter++;
    scc_stack.push_back(static_cast<int>(s0));
    on_stack[s0] = 1;
    while (!work.empty()) {
      auto& [v, i] = work.back();
      const size_t uv = static_cast<size_t>(v);
      if (i < first[uv].size()) {
        const int w = first[uv][i++].to;
        const size_t uw = static_cast<size_t>(w);
        if (index[uw] < 0) {
          index[uw] = low[uw] = counter++;
          scc_stack.push_back(w);
          on_stack[uw] = 1;
          work.emplace_back(w, 0);
        } else if (on_stack[uw]) {
          low[uv] = std::min(low[uv], index[uw]);
        }
      } else {
        if (low[uv] == index[uv]) {
          for (;;) {
            const int w = scc_stack.back();
            scc_stack.pop_back();
            on_stack[static_cast<size_t>(w)] = 0;
            comp[static_cast<size_t>(w)] = num_comps;
            if (w == v) break;
          }
          ++num_comps;
        }
        const int done = v;
        work.pop_back();
        if (!work.empty()) {
          const size_t up = static_cast<size_t>(work.back().first);
          low[up] = std::min(low[up], low[static_cast<size_t>(done)]);
        }
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    for (const Edge& e : first[r]) {
      if (e.grows && comp[r] == comp[static_cast<size_t>(e.to)]) {
        fail(field, "left recursion through rule '" + rules[static_cast<size_t>(e.to)].name + "' is not supported");
      }
    }
  }
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rules.size(); ++r) {
    out.append(rules[r].name).append("#").append(std::to_string(r)).append(" ::=");
    for (size_t a = 0; a < rules[r].alts.size(); ++a) {
      if (a) out += " |";
      for (const Element& e : rules[r].alts[a]) {
        if (e.rule >= 0) {
          out.append(" ").append(rules[static_cast<size_t>(e.rule)].name).append("#").append(std::to_string(e.rule));
        } else {
          out += " [";
          const ByteSet& s = classes[static_cast<size_t>(e.cls)];
          for (int b = 0; b < 256; ++b) {
            if (!s.test(b)) continue;
            int z = b;
            while (z + 1 < 256 && s.test(z + 1)) ++z;
            auto hex = [](int v) {
              char buf[8];
              if (v > 32 && v < 127 && v != ']' && v != '-' && v != '\\') {
                buf[0] = static_cast<char>(v);
                buf[1] = 0;
              } else {
                std::snprintf(buf, sizeof(buf), "\\x%02X", v);
              }
              return std::string(buf);
            };
            out += hex(b);
            if (z > b) out.append("-").append(hex(z));
            b = z;
          }
          out += "]";
        }
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace peregrine::engine::structured
