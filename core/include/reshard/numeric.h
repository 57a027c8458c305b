// reshard — conversions between narrow floats and f32, and reduction
// identities. Host and CUDA device clean (no exceptions, no allocation).
#pragma once

#include <cstdint>
#include <cstring>

#include "reshard/hd.h"

namespace reshard::numeric {

RESHARD_HD inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
RESHARD_HD inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

RESHARD_HD inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}
// Round to nearest even; NaN stays NaN.
RESHARD_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Generic narrow float <-> f32 for IEEE-like formats with `E` exponent bits
// and `M` mantissa bits. `kFiniteOnly` formats (e4m3fn) have no infinity:
// the all-ones exponent with all-ones mantissa is NaN, the rest are finite.
template <int E, int M, bool kFiniteOnly>
RESHARD_HD inline float narrow_to_f32(uint32_t v) {
  const uint32_t sign = (v >> (E + M)) & 1u;
  const uint32_t exp = (v >> M) & ((1u << E) - 1u);
  const uint32_t man = v & ((1u << M) - 1u);
  const int bias = (1 << (E - 1)) - 1;
  float out;
  if (exp == 0) {
    // Subnormal: man * 2^(1 - bias - M), exact in f32 for these formats.
    out = static_cast<float>(man) * f32_from_bits(static_cast<uint32_t>(127 + 1 - bias - M) << 23);
  } else if (!kFiniteOnly && exp == (1u << E) - 1u) {
    out = man ? f32_from_bits(0x7fc00000u) : f32_from_bits(0x7f800000u);
  } else if (kFiniteOnly && exp == (1u << E) - 1u && man == (1u << M) - 1u) {
    out = f32_from_bits(0x7fc00000u);
  } else {
    const uint32_t bits = ((exp - bias + 127u) << 23) | (man << (23 - M));
    out = f32_from_bits(bits);
  }
  return sign ? -out : out;
}

template <int E, int M, bool kFiniteOnly>
RESHARD_HD inline uint32_t f32_to_narrow(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 31) << (E + M);
  const uint32_t abs = u & 0x7fffffffu;
  const int bias = (1 << (E - 1)) - 1;
  const uint32_t exp_max = (1u << E) - 1u;
  const uint32_t nan =
      kFiniteOnly ? (exp_max << M) | ((1u << M) - 1u) : (exp_max << M) | (1u << (M - 1));
  if (abs > 0x7f800000u) return sign | nan;
  // Largest finite magnitude of the narrow format, as narrow bits.
  const uint32_t max_finite =
      kFiniteOnly ? (exp_max << M) | ((1u << M) - 2u) : ((exp_max - 1u) << M) | ((1u << M) - 1u);
  if (abs == 0x7f800000u) return kFiniteOnly ? sign | nan : sign | (exp_max << M);
  const int e = static_cast<int>(abs >> 23) - 127;  // unbiased exponent of f
  uint32_t result;
  if (e + bias >= 1) {
    // Normal in the narrow format: round the 23-bit mantissa to M bits.
    const uint32_t shift = 23 - M;
    uint32_t mant = abs & 0x7fffffu;
    uint32_t q = (static_cast<uint32_t>(e + bias) << M) | (mant >> shift);
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    result = q;
  } else {
    // Subnormal (or zero) in the narrow format.
    const int shift = (23 - M) + (1 - bias - e);
    if (shift > 24 + 1) return sign;  // underflows to zero
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    result = q;
  }
  if (result > max_finite) return kFiniteOnly ? sign | max_finite : sign | (exp_max << M);
  return sign | result;
}

RESHARD_HD inline float f16_to_f32(uint16_t h) { return narrow_to_f32<5, 10, false>(h); }
RESHARD_HD inline uint16_t f32_to_f16(float f) {
  return static_cast<uint16_t>(f32_to_narrow<5, 10, false>(f));
}
RESHARD_HD inline float f8e4m3_to_f32(uint8_t v) { return narrow_to_f32<4, 3, true>(v); }
RESHARD_HD inline uint8_t f32_to_f8e4m3(float f) {
  return static_cast<uint8_t>(f32_to_narrow<4, 3, true>(f));
}
RESHARD_HD inline float f8e5m2_to_f32(uint8_t v) { return narrow_to_f32<5, 2, false>(v); }
RESHARD_HD inline uint8_t f32_to_f8e5m2(float f) {
  return static_cast<uint8_t>(f32_to_narrow<5, 2, false>(f));
}

}  // namespace reshard::numeric
