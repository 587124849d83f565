// JSON Schema to grammar (see structured.h). What is generated is always valid against the schema; where the
// exact language would be awkward (number bounds with fractions, formats) a subset of the valid texts is
// generated, never a superset. Output is compact JSON with at most one space after ':' and ','; objects list
// their properties in schema order; properties beyond those listed only when additionalProperties asks for them.
#include <cmath>
#include <deque>
#include <unordered_map>

#include "engine/structured/structured.h"
#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

using Json = nlohmann::ordered_json;

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, const Json& root, std::string field) : b_(b), root_(root), field_(std::move(field)) {
    sep_space_ = b_.optional(b_.byte(' '));
  }

  Element value(const Json& s, const std::string& path, int depth) {
    if (depth > 128) fail(path, "the schema nests too deeply");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "a false schema matches nothing");
      return any_value();
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    if (auto r = s.find("$ref"); r != s.end()) return ref(*r, path, depth);
    check_keywords(s, path);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) fail(path + ".enum", "expected a non-empty list");
      std::vector<Sequence> alts;
      for (const Json& v : *e) alts.push_back({b_.literal(dump(v))});
      return nullable(s, b_.alt(std::move(alts), "enum"));
    }
    if (auto c = s.find("const"); c != s.end()) return b_.literal(dump(*c));
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (auto a = s.find(kw); a != s.end()) {
        if (!a->is_array() || a->empty()) fail(path + "." + kw, "expected a non-empty list of schemas");
        Json rest = s;
        rest.erase(kw);
        const bool merge = has_constraints(rest);
        std::vector<Sequence> alts;
        for (size_t i = 0; i < a->size(); ++i) {
          const std::string p = path + "." + kw + "[" + std::to_string(i) + "]";
          if (merge) {
            const Json& branch = resolve((*a)[i], p);
            Json m = rest;
            if (branch.is_object()) {
              for (auto it = branch.begin(); it != branch.end(); ++it) m[it.key()] = it.value();
            }
            alts.push_back({value(keep(std::move(m)), p, depth + 1)});
          } else {
            alts.push_back({value((*a)[i], p, depth + 1)});
          }
        }
        return b_.alt(std::move(alts), kw);
      }
    }
    if (auto a = s.find("allOf"); a != s.end()) {
      if (!a->is_array() || a->empty()) fail(path + ".allOf", "expected a non-empty list of schemas");
      Json m = s;
      m.erase("allOf");
      for (size_t i = 0; i < a->size(); ++i) merge_into(m, resolve((*a)[i], path + ".allOf[" + std::to_string(i) + "]"), path);
      return value(keep(std::move(m)), path, depth + 1);
    }
    const Json* type = nullptr;
    if (auto t = s.find("type"); t != s.end()) type = &*t;
    if (type && type->is_array()) {
      std::vector<Sequence> alts;
      for (const Json& t : *type) {
        Json m = s;
        m["type"] = t;
        m.erase("nullable");
        alts.push_back({value(keep(std::move(m)), path, depth + 1)});
      }
      if (alts.empty()) fail(path + ".type", "an empty list of types");
      return nullable(s, b_.alt(std::move(alts), "types"));
    }
    std::string t;
    if (type) {
      if (!type->is_string()) fail(path + ".type", "expected a string or a list of strings");
      t = type->get<std::string>();
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      t = "object";
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      t = "array";
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      t = "string";
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      t = "number";
    } else {
      return any_value();
    }
    Element e;
    if (t == "object") e = object(s, path, depth);
    else if (t == "array") e = array(s, path, depth);
    else if (t == "string") e = string(s, path);
    else if (t == "integer") e = number(s, path, true);
    else if (t == "number") e = number(s, path, false);
    else if (t == "boolean") e = b_.alt({{b_.literal("true")}, {b_.literal("false")}}, "bool");
    else if (t == "null") e = b_.literal("null");
    else fail(path + ".type", "unknown type '" + t + "'");
    return nullable(s, e);
  }

  Element any_value() {
    if (any_ >= 0) return b_.ref(any_);
    any_ = b_.new_rule("any");
    const Element v = b_.ref(any_);
    const Element str = plain_string(0, -1);
    const Element kv = b_.seq({str, b_.byte(':'), sep_space_, v}, "any_kv");
    const Element obj = b_.seq({b_.byte('{'), b_.optional(b_.seq({kv, b_.star(b_.seq({comma(), kv}))})), b_.byte('}')}, "any_obj");
    const Element arr = b_.seq({b_.byte('['), b_.optional(b_.seq({v, b_.star(b_.seq({comma(), v}))})), b_.byte(']')}, "any_arr");
    b_.add_alt(any_, {obj});
    b_.add_alt(any_, {arr});
    b_.add_alt(any_, {str});
    b_.add_alt(any_, {number_unbounded(false)});
    b_.add_alt(any_, {b_.literal("true")});
    b_.add_alt(any_, {b_.literal("false")});
    b_.add_alt(any_, {b_.literal("null")});
    return v;
  }

  Element object_any() {  // json_object: any JSON object
    any_value();
    const Element str = plain_string(0, -1);
    const Element kv = b_.seq({str, b_.byte(':'), sep_space_, b_.ref(any_)}, "any_kv");
    return b_.seq({b_.byte('{'), b_.optional(b_.seq({kv, b_.star(b_.seq({comma(), kv}))})), b_.byte('}')}, "object");
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw Error(ErrorCode::kInvalidArgument, field_ + ": " + (path.empty() ? "" : path + ": ") + msg, field_);
  }

  static std::string dump(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

  const Json& keep(Json j) {
    owned_.push_back(std::move(j));
    return owned_.back();
  }

  Element comma() { return b_.seq({b_.byte(','), sep_space_}, "comma"); }

  static bool is_annotation(const std::string& k) {
    static const char* kAnn[] = {"title", "description", "default", "examples", "example", "$schema", "$id", "$comment",
                                 "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$defs",
                                 "definitions", "discriminator", "strict", "$anchor", "xml", "externalDocs"};
    for (const char* a : kAnn) {
      if (k == a) return true;
    }
    return k.rfind("x-", 0) == 0;
  }

  static bool has_constraints(const Json& s) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!is_annotation(it.key())) return true;
    }
    return false;
  }

  void check_keywords(const Json& s, const std::string& path) {
    static const char* kKnown[] = {"type", "enum", "const", "properties", "required", "additionalProperties", "items",
                                   "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "minLength",
                                   "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                   "exclusiveMaximum", "nullable", "unevaluatedProperties", "uniqueItems",
                                   "multipleOf", "minProperties", "maxProperties"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (is_annotation(k)) continue;
      bool known = false;
      for (const char* kw : kKnown) known = known || k == kw;
      if (!known) fail(path, "the keyword '" + k + "' is not supported in structured outputs");
    }
    if (auto u = s.find("uniqueItems"); u != s.end() && u->is_boolean() && u->get<bool>()) {
      const auto max = s.find("maxItems");
      if (max == s.end() || !max->is_number() || max->get<double>() > 1) fail(path, "uniqueItems is not supported in structured outputs");
    }
    if (auto m = s.find("multipleOf"); m != s.end()) {
      const bool integer_one = m->is_number() && m->get<double>() == 1.0 && s.value("type", Json()) == "integer";
      if (!integer_one) fail(path, "multipleOf is not supported in structured outputs");
    }
    if (auto u = s.find("unevaluatedProperties"); u != s.end() && !(u->is_boolean() && !u->get<bool>())) {
      fail(path, "unevaluatedProperties other than false is not supported");
    }
    if (s.contains("minProperties") || s.contains("maxProperties")) {
      fail(path, "minProperties/maxProperties are not supported in structured outputs");
    }
  }

  Element nullable(const Json& s, Element e) {
    auto n = s.find("nullable");
    if (n != s.end() && n->is_boolean() && n->get<bool>()) return b_.alt({{e}, {b_.literal("null")}}, "nullable");
    return e;
  }

  const Json& pointer(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') fail(path + ".$ref", "only local references (#/...) are supported, got '" + ref + "'");
    const Json* cur = &root_;
    size_t i = 1;
    while (i < ref.size()) {
      if (ref[i] != '/') fail(path + ".$ref", "bad JSON pointer '" + ref + "'");
      size_t j = ref.find('/', i + 1);
      if (j == std::string::npos) j = ref.size();
      std::string tok = ref.substr(i + 1, j - i - 1), dec;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size()) {
          dec += tok[k + 1] == '1' ? '/' : '~';
          ++k;
        } else if (tok[k] == '%' && k + 2 < tok.size()) {
          dec += static_cast<char>(std::stoi(tok.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          dec += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(dec)) {
        cur = &(*cur)[dec];
      } else if (cur->is_array() && !dec.empty() && dec.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(dec) < cur->size()) {
        cur = &(*cur)[std::stoul(dec)];
      } else {
        fail(path + ".$ref", "the reference '" + ref + "' does not resolve");
      }
      i = j;
    }
    return *cur;
  }

  const Json& resolve(const Json& s, const std::string& path) {
    const Json* cur = &s;
    for (int hops = 0; cur->is_object() && cur->contains("$ref"); ++hops) {
      if (hops > 64) fail(path, "too many chained references");
      const Json& r = (*cur)["$ref"];
      if (!r.is_string()) fail(path + ".$ref", "expected a string");
      cur = &pointer(r.get<std::string>(), path);
    }
    return *cur;
  }

  Element ref(const Json& r, const std::string& path, int depth) {
    if (!r.is_string()) fail(path + ".$ref", "expected a string");
    const Json& target = pointer(r.get<std::string>(), path);
    auto it = refs_.find(&target);
    if (it != refs_.end()) return b_.ref(it->second);
    const int rule = b_.new_rule("ref");
    refs_.emplace(&target, rule);
    b_.add_alt(rule, {value(target, r.get<std::string>(), depth + 1)});
    return b_.ref(rule);
  }

  void merge_into(Json& m, const Json& sub, const std::string& path) {
    if (sub.is_boolean()) {
      if (!sub.get<bool>()) fail(path, "allOf with a false schema matches nothing");
      return;
    }
    if (!sub.is_object()) fail(path + ".allOf", "expected schemas");
    for (auto it = sub.begin(); it != sub.end(); ++it) {
      const std::string& k = it.key();
      if (k == "properties" && m.contains("properties")) {
        for (auto p = it->begin(); p != it->end(); ++p) m["properties"][p.key()] = p.value();
      } else if (k == "required" && m.contains("required")) {
        for (const Json& r : *it) m["required"].push_back(r);
      } else if (k == "allOf") {
        for (const Json& x : *it) merge_into(m, resolve(x, path), path);
      } else if (m.contains(k) && !is_annotation(k) && m[k] != *it) {
        fail(path + ".allOf", "conflicting '" + k + "' in allOf cannot be combined");
      } else {
        m[k] = *it;
      }
    }
  }

  Element object(const Json& s, const std::string& path, int depth) {
    const Json empty_props = Json::object();
    const Json* props = &empty_props;
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) fail(path + ".properties", "expected an object");
      props = &*p;
    }
    std::vector<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) fail(path + ".required", "expected a list of names");
      for (const Json& n : *r) {
        if (!n.is_string()) fail(path + ".required", "expected strings");
        required.push_back(n.get<std::string>());
      }
    }
    for (const std::string& r : required) {
      if (!props->contains(r)) {
        // A required property without a schema: any value.
        Json copy = *props;
        copy[r] = true;
        props = &keep(std::move(copy));
      }
    }
    // Extra properties only when asked for (true or a schema).
    const Json* extra = nullptr;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (a->is_object() || (a->is_boolean() && a->get<bool>())) extra = &*a;
      else if (!a->is_boolean()) fail(path + ".additionalProperties", "expected a boolean or a schema");
    }
    std::vector<Element> kv;
    std::vector<bool> req;
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string pp = path + ".properties." + it.key();
      kv.push_back(b_.seq({b_.literal(dump(Json(it.key()))), b_.byte(':'), sep_space_, value(it.value(), pp, depth + 1)}, "prop"));
      bool r = false;
      for (const std::string& n : required) r = r || n == it.key();
      req.push_back(r);
    }
    // S[i][first]: properties i.. with no comma before the first one written.
    const size_t n = kv.size();
    Element extra_first{}, extra_rest{};
    if (extra) {
      const Element ev = extra->is_object() ? value(*extra, path + ".additionalProperties", depth + 1) : any_value();
      const Element ekv = b_.seq({plain_string(1, 64), b_.byte(':'), sep_space_, ev}, "extra_kv");
      extra_rest = b_.star(b_.seq({comma(), ekv}));
      extra_first = b_.optional(b_.seq({ekv, extra_rest}));
    } else {
      extra_first = extra_rest = b_.empty();
    }
    Element next_first = extra_first, next_rest = extra_rest;
    for (size_t i = n; i-- > 0;) {
      const int rf = b_.new_rule("props"), rr = b_.new_rule("props");
      b_.add_alt(rf, {kv[i], next_rest});
      b_.add_alt(rr, {comma(), kv[i], next_rest});
      if (!req[i]) {
        b_.add_alt(rf, {next_first});
        b_.add_alt(rr, {next_rest});
      }
      next_first = b_.ref(rf);
      next_rest = b_.ref(rr);
    }
    return b_.seq({b_.byte('{'), next_first, b_.byte('}')}, "object");
  }

  static int64_t count(const Json& s, const char* key, int64_t def, const std::string& path, const SchemaCompiler* self) {
    auto it = s.find(key);
    if (it == s.end()) return def;
    if (!it->is_number() || it->get<double>() < 0 || std::floor(it->get<double>()) != it->get<double>()) {
      self->fail(path + "." + key, "expected a non-negative integer");
    }
    return static_cast<int64_t>(std::min(it->get<double>(), 1e9));
  }

  Element array(const Json& s, const std::string& path, int depth) {
    const int64_t min = count(s, "minItems", 0, path, this);
    int64_t max = count(s, "maxItems", -1, path, this);
    if (max >= 0 && max < min) fail(path, "maxItems is below minItems");
    Sequence seq{b_.byte('[')};
    int64_t have = 0;
    if (auto p = s.find("prefixItems"); p != s.end()) {
      if (!p->is_array()) fail(path + ".prefixItems", "expected a list of schemas");
      for (size_t i = 0; i < p->size(); ++i) {
        if (max >= 0 && have >= max) break;
        if (i) seq.push_back(comma());
        seq.push_back(value((*p)[i], path + ".prefixItems[" + std::to_string(i) + "]", depth + 1));
        ++have;
      }
    }
    Element item{};
    bool items_allowed = true;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_boolean() && !it->get<bool>()) items_allowed = false;
      else if (it->is_array()) fail(path + ".items", "a list of item schemas (use prefixItems) is not supported");
      else item = value(*it, path + ".items", depth + 1);
    } else {
      item = any_value();
    }
    if (!items_allowed) {
      if (have < min) fail(path, "minItems cannot be met with items: false");
      seq.push_back(b_.byte(']'));
      return b_.seq(std::move(seq), "array");
    }
    const int64_t need = std::max<int64_t>(0, min - have);
    const int64_t room = max < 0 ? -1 : max - have;
    if (room != 0) {
      if (have > 0) {
        // Each further item with its comma.
        seq.push_back(b_.repeat(b_.seq({comma(), item}, "item"), need, room, field_));
      } else if (need > 0) {
        seq.push_back(item);
        seq.push_back(b_.repeat(b_.seq({comma(), item}, "item"), need - 1, room < 0 ? -1 : room - 1, field_));
      } else {
        seq.push_back(b_.optional(b_.seq({item, b_.repeat(b_.seq({comma(), item}, "item"), 0, room < 0 ? -1 : room - 1, field_)})));
      }
    }
    seq.push_back(b_.byte(']'));
    return b_.seq(std::move(seq), "array");
  }

  // Any JSON string with min..max characters (max < 0: unbounded).
  Element plain_string(int64_t min, int64_t max) {
    return b_.seq({b_.byte('"'), b_.repeat(json_char(), min, max, field_), b_.byte('"')}, "string");
  }

  Element json_char() {
    if (char_ >= 0) return b_.ref(char_);
    char_ = b_.new_rule("char");
    std::vector<Sequence> alts;
    b_.add_codepoint_range(alts, 0x20, 0x21);
    b_.add_codepoint_range(alts, 0x23, 0x5B);
    b_.add_codepoint_range(alts, 0x5D, 0x10FFFF);
    ByteSet esc;
    for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
    alts.push_back({b_.byte('\\'), b_.cls(esc)});
    ByteSet hex;
    hex.set_range('0', '9');
    hex.set_range('a', 'f');
    hex.set_range('A', 'F');
    const Element h = b_.cls(hex);
    alts.push_back({b_.byte('\\'), b_.byte('u'), h, h, h, h});
    // Merge the single-byte alternatives into one class so each byte is one step.
    ByteSet single;
    std::vector<Sequence> rest;
    for (auto& a : alts) {
      if (a.size() == 1 && a[0].cls >= 0) {
        const ByteSet& c = b_.grammar().classes[static_cast<size_t>(a[0].cls)];
        for (int i = 0; i < 4; ++i) single.bits[static_cast<size_t>(i)] |= c.bits[static_cast<size_t>(i)];
      } else {
        rest.push_back(std::move(a));
      }
    }
    b_.add_alt(char_, {b_.cls(single)});
    for (auto& a : rest) b_.add_alt(char_, std::move(a));
    return b_.ref(char_);
  }

  Element string(const Json& s, const std::string& path) {
    const int64_t min = count(s, "minLength", 0, path, this);
    const int64_t max = count(s, "maxLength", -1, path, this);
    if (max >= 0 && max < min) fail(path, "maxLength is below minLength");
    auto pat = s.find("pattern");
    auto fmt = s.find("format");
    std::string regex;
    std::string what;
    if (pat != s.end()) {
      if (!pat->is_string()) fail(path + ".pattern", "expected a string");
      regex = pat->get<std::string>();
      what = ".pattern";
    } else if (fmt != s.end() && fmt->is_string()) {
      regex = format_regex(fmt->get<std::string>());
      what = ".format";
    }
    if (regex.empty()) return plain_string(min, max);
    if (min > 0 || max >= 0) fail(path, "a pattern or format together with minLength/maxLength is not supported");
    const bool search = what == ".pattern";
    return b_.seq({b_.byte('"'), compile_regex(b_, regex, true, field_, search), b_.byte('"')}, "string");
  }

  // Regexes generating a subset of each format's valid strings (days up to 28 are valid in every month).
  static std::string format_regex(const std::string& f) {
    static const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])";
    static const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-2]):[0-5][0-9])";
    if (f == "date") return "^" + date + "$";
    if (f == "time") return "^" + time + "$";
    if (f == "date-time") return "^" + date + "T" + time + "$";
    if (f == "email") return "^[a-z0-9]{1,32}(\\.[a-z0-9]{1,32}){0,3}@([a-z0-9]{1,32}\\.){1,3}[a-z]{2,6}$";
    if (f == "uuid") return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
    if (f == "ipv4") return "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$";
    if (f == "ipv6") return "^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$";
    if (f == "uri" || f == "url" || f == "uri-reference" || f == "iri")
      return "^https?://[a-z0-9]{1,32}(\\.[a-z0-9]{1,32}){0,4}(/[a-zA-Z0-9._~-]{0,32}){0,8}$";
    if (f == "hostname") return "^[a-z0-9]{1,32}(\\.[a-z0-9]{1,32}){0,4}$";
    return {};  // other formats are annotations: any string
  }

  // Unsigned decimal integers in [lo, hi] (hi < 0: unbounded), no leading zeros, at most 18 digits.
  Element uint_range(int64_t lo, int64_t hi) {
    std::vector<Sequence> alts;
    ByteSet d09;
    d09.set_range('0', '9');
    const Element digit = b_.cls(d09);
    auto digits = [](int64_t v) { return static_cast<int>(std::to_string(v).size()); };
    auto pow10 = [](int n) {
      int64_t p = 1;
      for (int i = 0; i < n; ++i) p *= 10;
      return p;
    };
    const int64_t top = hi < 0 ? pow10(16) - 1 : hi;  // unbounded: up to 16 digits (a subset)
    for (int len = digits(lo); len <= digits(top); ++len) {
      const int64_t a = std::max(lo, len == 1 ? 0 : pow10(len - 1));
      const int64_t z = std::min(top, pow10(len) - 1);
      if (a > z) continue;
      same_length(std::to_string(a), std::to_string(z), alts, digit);
    }
    return b_.alt(std::move(alts), "uint");
  }

  // Decimal strings of equal length between a and z (inclusive) as alternatives.
  void same_length(const std::string& a, const std::string& z, std::vector<Sequence>& alts, Element digit,
                   Sequence prefix = {}) {
    if (a.empty()) {
      alts.push_back(prefix);
      return;
    }
    auto cls = [&](char lo, char hi) {
      ByteSet s;
      s.set_range(lo, hi);
      return b_.cls(s);
    };
    const std::string ra = a.substr(1), rz = z.substr(1);
    if (a[0] == z[0]) {
      prefix.push_back(b_.byte(static_cast<uint8_t>(a[0])));
      same_length(ra, rz, alts, digit, prefix);
      return;
    }
    const bool a_zeros = ra.find_first_not_of('0') == std::string::npos;
    const bool z_nines = rz.find_first_not_of('9') == std::string::npos;
    const char lo_full = a_zeros ? a[0] : static_cast<char>(a[0] + 1);
    const char hi_full = z_nines ? z[0] : static_cast<char>(z[0] - 1);
    if (!a_zeros) {
      Sequence p = prefix;
      p.push_back(b_.byte(static_cast<uint8_t>(a[0])));
      same_length(ra, std::string(ra.size(), '9'), alts, digit, p);
    }
    if (lo_full <= hi_full) {
      Sequence p = prefix;
      p.push_back(cls(lo_full, hi_full));
      for (size_t i = 0; i < ra.size(); ++i) p.push_back(digit);
      alts.push_back(p);
    }
    if (!z_nines) {
      Sequence p = prefix;
      p.push_back(b_.byte(static_cast<uint8_t>(z[0])));
      same_length(std::string(rz.size(), '0'), rz, alts, digit, p);
    }
  }

  Element fraction() {
    ByteSet d09;
    d09.set_range('0', '9');
    return b_.seq({b_.byte('.'), b_.repeat(b_.cls(d09), 1, 8, field_)}, "frac");
  }

  Element number_unbounded(bool integer) {
    const Element mag = uint_range(0, -1);
    Sequence s{b_.optional(b_.byte('-')), mag};
    if (!integer) s.push_back(b_.optional(fraction()));
    return b_.seq(std::move(s), integer ? "int" : "num");
  }

  // Non-negative numbers with integer part in [lo, hi] (hi < 0: unbounded); a fraction only below hi.
  Element nonneg(int64_t lo, int64_t hi, bool integer) {
    if (integer) return uint_range(lo, hi);
    std::vector<Sequence> alts;
    if (hi < 0) {
      alts.push_back({uint_range(lo, -1), b_.optional(fraction())});
    } else {
      if (hi > lo) alts.push_back({uint_range(lo, hi - 1), b_.optional(fraction())});
      alts.push_back({uint_range(hi, hi)});
    }
    return b_.alt(std::move(alts), "nonneg");
  }

  Element number(const Json& s, const std::string& path, bool integer) {
    auto bound = [&](const char* key) -> std::optional<double> {
      auto it = s.find(key);
      if (it == s.end()) return std::nullopt;
      if (it->is_boolean()) fail(path + "." + key, "boolean exclusive bounds (draft 4) are not supported");
      if (!it->is_number()) fail(path + "." + key, "expected a number");
      return it->get<double>();
    };
    std::optional<double> lo = bound("minimum"), hi = bound("maximum");
    bool lo_excl = false, hi_excl = false;
    if (auto x = bound("exclusiveMinimum"); x && (!lo || *x >= *lo)) { lo = *x; lo_excl = true; }
    if (auto x = bound("exclusiveMaximum"); x && (!hi || *x <= *hi)) { hi = *x; hi_excl = true; }
    if (!lo && !hi) return number_unbounded(integer);
    constexpr double kBig = 1e15;
    // The integers within the bounds; fractions are written below the top one (a subset of the valid numbers).
    const double l = lo ? (lo_excl ? std::floor(*lo) + 1 : std::ceil(*lo)) : -kBig;
    const double h = hi ? (hi_excl ? std::ceil(*hi) - 1 : std::floor(*hi)) : kBig;
    // Non-integers just above a fractional (or exclusive) lower bound k + f: "k." then a first digit above f.
    std::optional<Sequence> boundary;
    if (!integer && lo && *lo >= 0 && *lo < kBig && std::floor(*lo) < l) {
      const int64_t k = static_cast<int64_t>(std::floor(*lo));
      const int a = static_cast<int>(std::floor((*lo - static_cast<double>(k)) * 10)) + 1;
      int z = 9;
      if (hi && *hi < static_cast<double>(k + 1)) z = static_cast<int>(std::floor((*hi - static_cast<double>(k)) * 10)) - 1;
      if (a <= z && a <= 9) {
        ByteSet first, d09;
        first.set_range('0' + a, '0' + z);
        d09.set_range('0', '9');
        boundary = Sequence{uint_range(k, k), b_.byte('.'), b_.cls(first), b_.repeat(b_.cls(d09), 0, 7, field_)};
      }
    }
    if (l > h) {
      if (boundary) return b_.seq(std::move(*boundary), "bounded");
      fail(path, "no number satisfies the bounds");
    }
    const int64_t L = static_cast<int64_t>(std::clamp(l, -kBig, kBig));
    const int64_t H = static_cast<int64_t>(std::clamp(h, -kBig, kBig));
    const bool hi_open = !hi || *hi >= kBig;
    const bool lo_open = !lo || *lo <= -kBig;
    std::vector<Sequence> alts;
    if (H >= 0) alts.push_back({nonneg(std::max<int64_t>(L, 0), hi_open ? -1 : H, integer)});
    if (L < 0) {
      // Negative values: '-' then a magnitude in [max(1, -H) .. -L] (integers), or below -L with a fraction.
      const int64_t mag_lo = H < 0 ? -H : 1;
      const int64_t mag_hi = lo_open ? -1 : -L;
      alts.push_back({b_.byte('-'), nonneg(mag_lo, mag_hi, integer)});
    }
    if (boundary) alts.push_back(std::move(*boundary));
    return b_.alt(std::move(alts), "bounded");
  }

  GrammarBuilder& b_;
  const Json& root_;
  std::string field_;
  Element sep_space_;
  int any_ = -1;
  int char_ = -1;
  std::unordered_map<const Json*, int> refs_;
  std::deque<Json> owned_;
};

}  // namespace

Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const std::string& field) {
  GrammarBuilder b;
  SchemaCompiler c(b, schema, field);
  const Element e = c.value(schema, "", 0);
  const int root = b.new_rule("root");
  b.add_alt(root, {e});
  Grammar g = b.take(root);
  g.check(field);
  return g;
}

Grammar json_object_grammar() {
  GrammarBuilder b;
  const Json empty = Json::object();
  SchemaCompiler c(b, empty, "response_format");
  const Element e = c.object_any();
  const int root = b.new_rule("root");
  b.add_alt(root, {e});
  return b.take(root);
}

}  // namespace peregrine::engine::structured
