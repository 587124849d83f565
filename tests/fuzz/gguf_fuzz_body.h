// The GGUF fuzz body, shared by the libFuzzer target (gguf_fuzz.cpp) and the seed-corpus unit test
// (tests/unit/io/gguf_seeds_test.cpp): parse the bytes as a GGUF file; what parses must hold its invariants
// (every tensor inside the buffer, no two overlapping, aligned), and the model config, the weight source and the
// dequantization of each tensor's first row must either work or throw peregrine::Error; so must the tokenizer the
// file carries (Tokenizer::from_gguf), which then encodes the input's last bytes and decodes the ids (every id in
// the vocabulary). Anything else (another exception, a crash, a sanitizer report) is a finding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_quant.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::fuzz {

inline void gguf_check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("invariant violated: %s\n", what);
    std::abort();
  }
}

// Returns 1 when the bytes parsed as a GGUF file, 0 when they were refused with an Error.
inline int gguf_one(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    io::GgufFile f(bytes, size, "fuzz.gguf");
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const io::GgufTensor& t : f.tensors()) {
      gguf_check(t.data >= bytes && t.data + t.bytes <= bytes + size, "tensor inside the buffer");
      gguf_check(t.offset % f.alignment() == 0, "tensor offset aligned");
      spans.emplace_back(t.offset, t.offset + t.bytes);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) gguf_check(spans[i].first >= spans[i - 1].second, "no overlap");
    try {
      (void)io::gguf_model_config(f);
    } catch (const Error&) {
    }
    for (const auto& [key, v] : f.metadata()) {  // every accessor on every key: an Error or a value
      try { (void)f.string_opt(key); } catch (const Error&) {}
      try { (void)f.int_opt(key); } catch (const Error&) {}
      try { (void)f.number_opt(key); } catch (const Error&) {}
      try { (void)f.f32_array(key); } catch (const Error&) {}
      try { (void)f.int_array(key); } catch (const Error&) {}
    }
    try {
      const auto tok = tokenizer::Tokenizer::from_gguf(f);
      const size_t n = std::min<size_t>(size, 160);
      const std::string_view text(reinterpret_cast<const char*>(data + size - n), n);
      try {
        const std::vector<int32_t> ids = tok->encode(text, true);
        for (int32_t id : ids) gguf_check(id >= 0 && id < tok->vocab_size(), "token ids inside the vocabulary");
        (void)tok->decode(ids, false);
      } catch (const Error&) {  // invalid UTF-8 is refused
      }
    } catch (const Error&) {
    }
    io::GgufWeightSource src(std::shared_ptr<const io::GgufFile>(&f, [](const io::GgufFile*) {}));
    std::vector<float> row;
    for (const io::GgufTensor& t : f.tensors()) {
      const io::TensorInfo& info = src.get(t.name);
      gguf_check(info.bytes == t.bytes, "source bytes");
      if (t.ne[0] > 4096) continue;
      if (!ggml_is_supported_block_type(t.type) && t.type != GgmlType::kF32 && t.type != GgmlType::kF16 &&
          t.type != GgmlType::kBF16)
        continue;
      row.resize(static_cast<size_t>(t.ne[0]));
      ggml_dequantize_row(t.type, t.data, row.data(), t.ne[0]);
    }
    return 1;
  } catch (const Error&) {
    return 0;
  }
}

}  // namespace peregrine::fuzz
