// libFuzzer target over the GGUF reader (io/gguf.h), its metadata accessors, the model-config mapping
// (io/gguf_config.h) and the block dequantization of what it accepts (see gguf_fuzz_body.h). Built and run by
// tests/fuzz/gguf_fuzz.sh (clang, ASan + UBSan).
#include "gguf_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  peregrine::fuzz::gguf_one(data, size);
  return 0;
}
