// PCRE2-backed patterns for normalizers, pre-tokenizers and decoders.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/status.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {

namespace {
// White_Space, which Oniguruma's \s means (PCRE2's UCP \s lacks U+0085).
constexpr std::string_view kSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";
constexpr std::string_view kHexClassBody = "0-9A-Fa-f";
}  // namespace

std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      switch (n) {
        case 's':
          if (in_class) out.append(kSpaceClassBody);
          else out.append("[").append(kSpaceClassBody).append("]");
          continue;
        case 'S':
          if (in_class) out.append("\\S");
          else out.append("[^").append(kSpaceClassBody).append("]");
          continue;
        case 'h':
          if (in_class) out.append(kHexClassBody);
          else out.append("[").append(kHexClassBody).append("]");
          continue;
        case 'H':
          if (in_class) out.append("\\H");  // rare; PCRE2 meaning differs
          else out.append("[^").append(kHexClassBody).append("]");
          continue;
        default:
          out.push_back('\\');
          out.push_back(n);
          continue;
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out.append("\\]");
        ++i;
      }
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}


namespace {
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};
ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}
}  // namespace

Regex::Regex(std::string_view onig_pattern) : source_(onig_pattern) {
  std::string translated = translate_oniguruma(onig_pattern);
  pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NO_UTF_CHECK, &err, &erroff, cctx);
  pcre2_compile_context_free(cctx);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(ErrorCode::kFormatError, "tokenizer regex " + std::string(onig_pattern) + " does not compile: " +
                                             reinterpret_cast<const char*>(msg) + " at offset " + std::to_string(erroff));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view text, size_t start, size_t& match_begin, size_t& match_end) const {
  ThreadMatchState& st = thread_match_state();
  int rc = pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                       PCRE2_NO_UTF_CHECK, st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(ErrorCode::kResourceExhausted,
                "tokenizer regex match failed: " + std::string(reinterpret_cast<const char*>(msg)));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  match_begin = ov[0];
  match_end = ov[1];
  return true;
}

Pattern Pattern::literal(std::string s) {
  Pattern p;
  p.literal_ = std::move(s);
  return p;
}

Pattern Pattern::regex(std::string_view onig_pattern) {
  Pattern p;
  p.regex_ = std::make_shared<Regex>(onig_pattern);
  return p;
}

bool Pattern::find(std::string_view text, size_t start, size_t& b, size_t& e) const {
  if (regex_) return regex_->find(text, start, b, e);
  if (literal_.empty()) {
    if (start > text.size()) return false;
    b = e = start;
    return true;
  }
  size_t at = text.find(literal_, start);
  if (at == std::string_view::npos) return false;
  b = at;
  e = at + literal_.size();
  return true;
}

size_t Pattern::next_char_len(std::string_view text, size_t i) {
  return utf8_len(static_cast<unsigned char>(text[i]));
}

}  // namespace peregrine::tokenizer
