// Narrow float conversions (reshard/numeric.h): exhaustive over every bit
// pattern of bf16, f16, f8e4m3 and f8e5m2.
#include "reshard/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace reshard::numeric {
namespace {

struct Format {
  std::string name;
  int exp_bits;
  int man_bits;
  bool finite_only;  // e4m3fn: no infinity, only all-ones is NaN
  float (*to_f32)(uint32_t);
  uint32_t (*from_f32)(float);
  int bits() const { return 1 + exp_bits + man_bits; }
  uint32_t count() const { return 1u << bits(); }
};

const Format kFormats[] = {
    {"bf16", 8, 7, false, [](uint32_t v) { return bf16_to_f32(static_cast<uint16_t>(v)); },
     [](float f) -> uint32_t { return f32_to_bf16(f); }},
    {"f16", 5, 10, false, [](uint32_t v) { return f16_to_f32(static_cast<uint16_t>(v)); },
     [](float f) -> uint32_t { return f32_to_f16(f); }},
    {"f8e4m3", 4, 3, true, [](uint32_t v) { return f8e4m3_to_f32(static_cast<uint8_t>(v)); },
     [](float f) -> uint32_t { return f32_to_f8e4m3(f); }},
    {"f8e5m2", 5, 2, false, [](uint32_t v) { return f8e5m2_to_f32(static_cast<uint8_t>(v)); },
     [](float f) -> uint32_t { return f32_to_f8e5m2(f); }},
};

// Decodes a narrow bit pattern from the format's definition, in double,
// independently of numeric.h.
double reference_decode(const Format& f, uint32_t v) {
  const uint32_t sign = (v >> (f.exp_bits + f.man_bits)) & 1u;
  const uint32_t exp = (v >> f.man_bits) & ((1u << f.exp_bits) - 1u);
  const uint32_t man = v & ((1u << f.man_bits) - 1u);
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const uint32_t exp_max = (1u << f.exp_bits) - 1u;
  double out;
  if (f.finite_only && exp == exp_max && man == (1u << f.man_bits) - 1u) {
    out = std::numeric_limits<double>::quiet_NaN();
  } else if (!f.finite_only && exp == exp_max) {
    out = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    out = std::ldexp(static_cast<double>(man), 1 - bias - f.man_bits);
  } else {
    out = std::ldexp(static_cast<double>(man + (1u << f.man_bits)),
                     static_cast<int>(exp) - bias - f.man_bits);
  }
  return sign ? -out : out;
}

bool is_nan_bits(const Format& f, uint32_t v) { return std::isnan(reference_decode(f, v)); }

// Invariant: decoding agrees with the format definition for every bit
// pattern (sign, zero, subnormals, normals, infinity, NaN).
TEST(Numeric, DecodeMatchesDefinitionForEveryBitPattern) {
  for (const Format& f : kFormats) {
    for (uint32_t v = 0; v < f.count(); ++v) {
      const double want = reference_decode(f, v);
      const float got = f.to_f32(v);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " bits " << v;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << f.name << " bits " << v;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << f.name << " bits " << v;
      }
    }
  }
}

// Invariant: narrow -> f32 -> narrow is the identity for every non-NaN bit
// pattern; NaN stays NaN with its sign.
TEST(Numeric, RoundTripIsIdentityExceptNanPayloads) {
  for (const Format& f : kFormats) {
    const uint32_t sign_bit = 1u << (f.bits() - 1);
    for (uint32_t v = 0; v < f.count(); ++v) {
      const uint32_t back = f.from_f32(f.to_f32(v));
      if (is_nan_bits(f, v)) {
        EXPECT_TRUE(is_nan_bits(f, back)) << f.name << " bits " << v;
        EXPECT_EQ(back & sign_bit, v & sign_bit) << f.name << " bits " << v;
      } else {
        EXPECT_EQ(back, v) << f.name << " bits " << v;
      }
    }
  }
}

// Invariant: f32 -> narrow rounds to nearest with ties to even. For every
// pair of adjacent finite values a < b of the same sign, the midpoint goes to
// the one with an even mantissa, and the f32 values just below and above the
// midpoint go to a and b.
TEST(Numeric, RoundsToNearestTiesToEvenBetweenEveryAdjacentPair) {
  for (const Format& f : kFormats) {
    const uint32_t sign_bit = 1u << (f.bits() - 1);
    for (uint32_t sign : {0u, sign_bit}) {
      for (uint32_t mag = 0; mag + 1 < sign_bit; ++mag) {
        const uint32_t a = sign | mag;
        const uint32_t b = sign | (mag + 1);
        const double da = reference_decode(f, a);
        const double db = reference_decode(f, b);
        if (!std::isfinite(da) || !std::isfinite(db)) continue;
        const float mid = static_cast<float>((da + db) / 2);
        ASSERT_EQ(static_cast<double>(mid), (da + db) / 2) << "midpoint not exact in f32";
        const uint32_t even = (mag & 1u) ? b : a;
        EXPECT_EQ(f.from_f32(mid), even) << f.name << " tie between " << a << " and " << b;
        const float toward_a = std::nextafter(mid, static_cast<float>(da));
        const float toward_b = std::nextafter(mid, static_cast<float>(db));
        EXPECT_EQ(f.from_f32(toward_a), a) << f.name << " below midpoint of " << a;
        EXPECT_EQ(f.from_f32(toward_b), b) << f.name << " above midpoint of " << a;
      }
    }
  }
}

// Known values: extremes, overflow and underflow of each format.
TEST(Numeric, KnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // bf16
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(3.3895314e38f), 0x7f7f);                      // max finite
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(nan))));
  // f16
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie with 65536 goes to even: inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(-inf), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0 goes to even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000);  // underflow keeps the sign
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even is 1.0
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, even is up
  // f8e4m3 (OCP e4m3fn): max 448, no infinity, finite overflow saturates,
  // infinity and NaN become NaN (0x7f / 0xff).
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  EXPECT_EQ(f8e4m3_to_f32(0x78), 256.0f);  // exponent all ones is finite
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_f8e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(464.0f), 0x7e);  // tie with 480 (not a value) stays at 448
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(inf) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(nan) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie with 0 goes to even
  // f8e5m2: max 57344, has infinity.
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(f8e5m2_to_f32(0x7c), inf);
  EXPECT_EQ(f32_to_f8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(f32_to_f8e5m2(61440.0f), 0x7c);  // tie with 65536 goes to even: inf
  EXPECT_EQ(f32_to_f8e5m2(1e6f), 0x7c);
  EXPECT_EQ(f32_to_f8e5m2(-inf), 0xfc);
  EXPECT_TRUE(std::isnan(f8e5m2_to_f32(f32_to_f8e5m2(nan))));
  EXPECT_EQ(f8e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
}

}  // namespace
}  // namespace reshard::numeric
