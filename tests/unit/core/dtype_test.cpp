// Tests of dtype conversions: bf16/f16 round trips, rounding to nearest even, specials.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"

using namespace peregrine;

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 10);
  for (int i = 0; i < 10000; ++i) {
    float x = dist(rng);
    float y = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * (1.0f / 256)) << x;
  }
}

TEST(DType, F16RoundTripAllValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

TEST(DType, ParseNames) {
  EXPECT_EQ(parse_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("F16"), DType::kF16);
  EXPECT_EQ(parse_dtype("float32"), DType::kF32);
  EXPECT_FALSE(parse_dtype("Q4_K").has_value());
}
