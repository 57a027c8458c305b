// reshard — the arithmetic of block scales (docs/spec.md "Block scales",
// "MXFP8 scales"), written once for the host and the CUDA device
// (RESHARD_HD): the host quantiser (core/src/layout/block_quantise.cc) and
// the CUDA backend's kernels (backends/cuda/src/kernel_body.h) both call
// these functions, so a block's scale and each element's fp8 bits are the
// same code on both sides. Internal: not part of the stable API.
//
// Only IEEE f32 arithmetic is used: one division (amax / M, x / s) rounded
// to nearest even, products by powers of two, one addition and subtraction
// of a power of two (subnormal rounding), float-to-integer conversions of
// exact integral values. The CUDA backend is built without fast-math, so
// nvcc's division and conversions are the IEEE ones (docs/gpu.md).
#pragma once

#include <cstdint>

#include "reshard/cast.h"
#include "reshard/dtype.h"
#include "reshard/hd.h"
#include "reshard/numeric.h"

namespace reshard::quantise_grid {

// The bits of a source dtype: storage, magnitude mask, the magnitude of
// infinity (finite elements have less), and the conversions to and from f32
// (from_f32 is only given values that are exact in the dtype).
template <DType D>
struct Source;
template <>
struct Source<DType::kF32> {
  using T = uint32_t;
  static constexpr T kAbs = 0x7fffffffu, kInf = 0x7f800000u;
  static constexpr T kNaN = 0x7fc00000u;  // +qNaN
  RESHARD_HD static float to_f32(T v) { return numeric::f32_from_bits(v); }
  RESHARD_HD static T from_f32(uint32_t bits) { return bits; }
};
template <>
struct Source<DType::kBF16> {
  using T = uint16_t;
  static constexpr T kAbs = 0x7fff, kInf = 0x7f80;
  static constexpr T kNaN = 0x7fc0;
  RESHARD_HD static float to_f32(T v) { return numeric::bf16_to_f32(v); }
  // An fp8 value has at most 3 mantissa bits: the low half is zero.
  RESHARD_HD static T from_f32(uint32_t bits) { return static_cast<T>(bits >> 16); }
};
template <>
struct Source<DType::kF16> {
  using T = uint16_t;
  static constexpr T kAbs = 0x7fff, kInf = 0x7c00;
  static constexpr T kNaN = 0x7e00;
  RESHARD_HD static float to_f32(T v) { return numeric::f16_to_f32(v); }
  RESHARD_HD static T from_f32(uint32_t bits) {
    return numeric::f32_to_f16(numeric::f32_from_bits(bits));
  }
};

// The grid of an fp8 destination as f32 bits: normals from kNormalMin
// (2^-6, 2^-14) keep the top 23 - kShift mantissa bits; below, multiples of
// the least subnormal (2^-9, 2^-16), the ulp of f32 values at kMagic (2^14,
// 2^7); kMax is the largest finite value (448, 57344); kEmax the exponent
// of its largest power of two (MXFP8's emax: 8, 15).
template <DType D>
struct Grid;
template <>
struct Grid<DType::kF8E4M3> {
  static constexpr int kShift = 20;
  static constexpr uint32_t kNormalMin = 0x3c800000u, kMax = 0x43e00000u;
  static constexpr float kMagic = 0x1p14f;
  static constexpr int kEmax = 8;
};
template <>
struct Grid<DType::kF8E5M2> {
  static constexpr int kShift = 21;
  static constexpr uint32_t kNormalMin = 0x38800000u, kMax = 0x47600000u;
  static constexpr float kMagic = 0x1p7f;
  static constexpr int kEmax = 15;
};

// y rounded to the grid of `To` (nearest, ties to even), as f32 bits: the
// cast to `To` widened back to f32. A magnitude above the largest finite
// one (or not finite) sets `bad` instead, and the result is meaningless.
template <DType To>
RESHARD_HD inline uint32_t round_to_grid(float y, uint32_t& bad) {
  using G = Grid<To>;
  const uint32_t u = numeric::f32_bits(y), a = u & 0x7fffffffu;
  const uint32_t normal =
      (a + ((1u << (G::kShift - 1)) - 1u) + ((a >> G::kShift) & 1u)) & ~((1u << G::kShift) - 1u);
  // Adding kMagic rounds to its ulp, the subnormal spacing; subtracting it
  // is exact.
  const uint32_t sub = numeric::f32_bits((numeric::f32_from_bits(a) + G::kMagic) - G::kMagic);
  bad |= static_cast<uint32_t>(a > G::kMax);
  // normal where a >= kNormalMin, else sub, without a branch.
  const uint32_t is_normal = 0u - static_cast<uint32_t>(a >= G::kNormalMin);
  return (normal & is_normal) | (sub & ~is_normal) | (u & 0x80000000u);
}

// The fp8 bits of `g`, an f32 on the grid of `To` (round_to_grid's result
// for a finite magnitude up to the largest): normals rebias the exponent
// and keep the top mantissa bits, subnormals are g / (least subnormal)
// (exact, an integer below 8 or 4); the sign is kept (so -0 stays -0).
template <DType To>
RESHARD_HD inline uint8_t grid_to_bits(uint32_t g) {
  using G = Grid<To>;
  constexpr int kMantissa = 23 - G::kShift;                  // 3, 2
  constexpr uint32_t kBias = To == DType::kF8E4M3 ? 7 : 15;  // the fp8's
  constexpr float kPerSubnormal = To == DType::kF8E4M3 ? 0x1p9f : 0x1p16f;
  const uint32_t a = g & 0x7fffffffu;
  const uint32_t normal = (a >> G::kShift) - ((127u - kBias) << kMantissa);
  // The subnormal value from a magnitude clamped to the normals' least, so
  // that the conversion is defined for every input (normals, inf and NaN
  // take `normal` or are never stored).
  const uint32_t a_sub = a < G::kNormalMin ? a : G::kNormalMin;
  const auto sub = static_cast<uint32_t>(numeric::f32_from_bits(a_sub) * kPerSubnormal);
  const uint32_t is_normal = 0u - static_cast<uint32_t>(a >= G::kNormalMin);
  return static_cast<uint8_t>((normal & is_normal) | (sub & ~is_normal) | ((g >> 24) & 0x80u));
}

// The f32 rule's scale from amax (the largest |x| over a block's finite
// elements, 0 when none): max(amax / M, 2^-126), or 1 where amax is 0
// (reshard/block_scales.h block_scale).
template <DType To>
RESHARD_HD inline float f32_scale(float amax) {
  if (!(amax > 0)) return 1.0f;
  const float s = amax / numeric::f32_from_bits(Grid<To>::kMax);
  const float least = numeric::f32_from_bits(0x00800000u);  // 2^-126
  return s < least ? least : s;
}

// The E8M0 bits of a block from the magnitude bits of its amax (f32 bits,
// over all its elements): 255 where it is NaN or infinite; else the
// exponent field gives floor(log2) for normals, and subnormals (field 0)
// and zero fall below the clamp at -127 either way.
template <DType To>
RESHARD_HD inline uint8_t mx_bits_from_magnitude(uint32_t a) {
  if (a >= 0x7f800000u) return 255;
  const int e = static_cast<int>(a >> 23) - 127 - Grid<To>::kEmax;
  return static_cast<uint8_t>((e < -127 ? -127 : e) + 127);
}

// The E8M0 bits of a block whose largest magnitude bits (source dtype's,
// over all elements, NaN and infinities included) are `m`.
template <DType From, DType To>
RESHARD_HD inline uint8_t mx_bits(typename Source<From>::T m) {
  using S = Source<From>;
  return mx_bits_from_magnitude<To>(m >= S::kInf ? 0x7f800000u
                                                 : numeric::f32_bits(S::to_f32(m)) & 0x7fffffffu);
}

// The magnitude bits of x counted in a block's amax: the f32 rule counts
// finite elements only (0 for the others), MXFP8 every element.
template <DType From, bool kMx>
RESHARD_HD inline typename Source<From>::T amax_bits(typename Source<From>::T x) {
  using S = Source<From>;
  using T = typename S::T;
  const T a = static_cast<T>(x & S::kAbs);
  if constexpr (kMx) {
    return a;
  } else {
    // a where finite, else 0, without a branch (host loops vectorise).
    return static_cast<T>(a & static_cast<T>(T{0} - static_cast<T>(a < S::kInf)));
  }
}

// The cast of y = x / s where y is off the grid (only non-finite x give
// such y): a NaN x is cast itself, not x / s, whose sign and payload IEEE
// 754 leave open (x86 keeps the operand's, CUDA gives its canonical NaN);
// an infinity keeps its sign (NaN in f8e4m3).
template <DType To>
RESHARD_HD inline uint8_t off_grid(float x, float y) {
  unsigned char r = 0;
  cast_detail::store_f32(To, x != x ? x : y, &r);
  return r;
}

// The fp8 bits of x with an f32 block scale s: cast(x / s), the cast's
// rules for magnitudes past the grid (only non-finite x reach them).
template <DType From, DType To>
RESHARD_HD inline uint8_t quantise_f32(typename Source<From>::T x, float s) {
  uint32_t bad = 0;
  const float xf = Source<From>::to_f32(x);
  const float y = xf / s;
  const uint8_t q = grid_to_bits<To>(round_to_grid<To>(y, bad));
  return bad == 0 ? q : off_grid<To>(xf, y);
}

// The fp8 bits of x in an MXFP8 block of E8M0 `bits`: every element of a
// NaN block (255) is the cast of +qNaN; otherwise
// cast(clamp(x * 2^-e, -M, M)), saturating. A NaN x makes its block's
// scale NaN, so a NaN x with other bits does not occur; it is given the
// NaN block's q all the same (the device's NaN arithmetic differs from
// the host's).
template <DType From, DType To>
RESHARD_HD inline uint8_t quantise_mx(typename Source<From>::T x, uint8_t bits) {
  using S = Source<From>;
  if (bits == 255 || static_cast<typename S::T>(x & S::kAbs) > S::kInf) {
    unsigned char r = 0;
    cast_detail::store_f32(To, S::to_f32(S::kNaN), &r);
    return r;
  }
  // 2^-e = 2^(127 - bits), a normal f32: bits is at most 127 + 15.
  const float inv = numeric::f32_from_bits(static_cast<uint32_t>(254 - bits) << 23);
  const float max = numeric::f32_from_bits(Grid<To>::kMax);
  float y = S::to_f32(x) * inv;
  y = y < -max ? -max : (y > max ? max : y);  // a NaN x stays NaN: not in this block
  uint32_t bad = 0;
  return grid_to_bits<To>(round_to_grid<To>(y, bad));
}

}  // namespace reshard::quantise_grid
