// Runtime CPU feature detection, read once; CPU kernels dispatch on it.
#pragma once

#include <string>

namespace peregrine {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool amx_bf16 = false;
  std::string describe() const;  // e.g. "avx2 fma f16c"
};

const CpuFeatures& cpu_features();

}  // namespace peregrine
