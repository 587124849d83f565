// ggml block types: geometry and the reference dequantization on hand-built blocks (the fixtures' per-tensor checks
// against ggml's own dequantize_row_* are in the GGUF tests).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/ggml_quant.h"
#include "peregrine/error.h"

using namespace peregrine;

namespace {
void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
}  // namespace

TEST(GgmlQuant, GeometryAndNames) {
  EXPECT_EQ(ggml_block_info(GgmlType::kQ4_0)->type_size, 18);
  EXPECT_EQ(ggml_block_info(GgmlType::kQ4_K)->block_size, 256);
  EXPECT_EQ(ggml_block_info(GgmlType::kQ6_K)->type_size, 210);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ8_0, 64), 68u);
  EXPECT_THROW(ggml_row_bytes(GgmlType::kQ4_K, 384), Error);
  EXPECT_EQ(ggml_type_name(GgmlType::kQ5_K), "Q5_K");
  EXPECT_FALSE(ggml_type_from_id(31).has_value());
  EXPECT_EQ(*ggml_type_from_id(30), GgmlType::kBF16);
  EXPECT_FALSE(ggml_is_supported_block_type(GgmlType::kQ2_K));
  std::vector<float> out(256);
  std::vector<uint8_t> block(84);
  EXPECT_THROW(ggml_dequantize_row(GgmlType::kQ2_K, block.data(), out.data(), 256), Error);
}

TEST(GgmlQuant, Q8_0AndQ4_0AndQ5_0Blocks) {
  uint8_t q8[34];
  put_half(q8, 0.5f);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float y[32];
  ggml_dequantize_row(GgmlType::kQ8_0, q8, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 16));

  uint8_t q4[18];
  put_half(q4, 2.0f);
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  ggml_dequantize_row(GgmlType::kQ4_0, q4, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * static_cast<float>(15 - j - 8));
  }

  uint8_t q5[22];
  put_half(q5, 1.0f);
  const uint32_t qh = 0x80000001u;  // high bit of value 0 (low nibbles) and of value 31 (j = 15, high nibbles)
  std::memcpy(q5 + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) q5[6 + j] = 0x00;
  ggml_dequantize_row(GgmlType::kQ5_0, q5, y, 32);
  EXPECT_EQ(y[0], 0.0f);     // 16 - 16
  EXPECT_EQ(y[1], -16.0f);   // 0 - 16
  EXPECT_EQ(y[31], 0.0f);    // 16 - 16
  EXPECT_EQ(y[30], -16.0f);
}
