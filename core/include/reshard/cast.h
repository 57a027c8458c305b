// reshard — casts in flight (docs/spec.md "Casts"): converting a tensor's
// elements from its source dtype to its destination's, the one reference
// every executor uses (the host copy loops, the CUDA kernels through
// backends/cuda/src/kernel_body.h, the oracle). Host and CUDA device clean.
//
// Supported: between any two of f32, f16, bf16, f8e4m3 (OCP e4m3fn) and
// f8e5m2. Every source value converts to f32 exactly, and the f32 value is
// rounded once to the destination: round to nearest, ties to even. NaN
// stays NaN (the destination's canonical quiet NaN, sign kept). Infinity
// stays infinity, except in f8e4m3, which has none: it becomes NaN.
// Overflow: a value whose rounded magnitude exceeds the destination's
// largest finite value becomes infinity (f16, bf16, f8e5m2) or NaN
// (f8e4m3: not saturating, as PyTorch's and ml_dtypes' float8_e4m3fn cast;
// |x| >= 464 is NaN, (448, 464) rounds to 448). Subnormals of the
// destination are produced (gradual underflow); below half the smallest
// subnormal, a signed zero. Widening casts are exact, so a widened value
// narrowed back is the original bit pattern (relays rely on it).
#pragma once

#include <cstdint>
#include <cstring>

#include "reshard/box_copy.h"
#include "reshard/dtype.h"
#include "reshard/hd.h"
#include "reshard/numeric.h"

namespace reshard {

// True when a cast from `from` to `to` (different dtypes) is supported.
RESHARD_HD inline bool cast_supported(DType from, DType to) {
  auto ok = [](DType d) {
    return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF8E4M3 ||
           d == DType::kF8E5M2;
  };
  return from != to && ok(from) && ok(to);
}

namespace cast_detail {

// f32 -> f8e4m3 without saturation: what would round above 448 is NaN.
RESHARD_HD inline uint8_t f32_to_f8e4m3_nonsat(float f) {
  const uint32_t abs = numeric::f32_bits(f) & 0x7fffffffu;
  const uint8_t sign = static_cast<uint8_t>((numeric::f32_bits(f) >> 24) & 0x80u);
  // 464 = 448 + half a unit in the last place (32 / 2): ties round to 448
  // (mantissa 110, even); from 464 up the rounded value is 480, above max.
  if (abs > 0x43e80000u && abs <= 0x7f800000u) return sign | 0x7fu;  // > 464, or inf
  return numeric::f32_to_f8e4m3(f);  // 464 itself rounds to 448 (even)
}

RESHARD_HD inline float load_f32(DType d, const unsigned char* p) {
  switch (d) {
    case DType::kF32: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return d == DType::kF16 ? numeric::f16_to_f32(h) : numeric::bf16_to_f32(h);
    }
    case DType::kF8E4M3:
      return numeric::f8e4m3_to_f32(*p);
    case DType::kF8E5M2:
      return numeric::f8e5m2_to_f32(*p);
    default:
      return 0.0f;
  }
}

RESHARD_HD inline void store_f32(DType d, float f, unsigned char* p) {
  switch (d) {
    case DType::kF32:
      memcpy(p, &f, 4);
      return;
    case DType::kF16:
    case DType::kBF16: {
      const uint16_t h = d == DType::kF16 ? numeric::f32_to_f16(f) : numeric::f32_to_bf16(f);
      memcpy(p, &h, 2);
      return;
    }
    case DType::kF8E4M3:
      *p = f32_to_f8e4m3_nonsat(f);
      return;
    case DType::kF8E5M2:
      *p = numeric::f32_to_f8e5m2(f);
      return;
    default:
      return;
  }
}

RESHARD_HD inline int64_t size_of(DType d) {
  return d == DType::kF32 ? 4 : (d == DType::kF16 || d == DType::kBF16) ? 2 : 1;
}

}  // namespace cast_detail

// Casts one element (bit patterns in the low bytes of the result).
RESHARD_HD inline uint32_t cast_bits(DType from, DType to, uint32_t bits) {
  unsigned char in[4];
  unsigned char out[4] = {0, 0, 0, 0};
  memcpy(in, &bits, 4);
  cast_detail::store_f32(to, cast_detail::load_f32(from, in), out);
  uint32_t r;
  memcpy(&r, out, 4);
  return r;
}

namespace cast_detail {
// One pair's loop, the dtypes known at compile time (the switches of
// load_f32 and store_f32 fold away).
template <DType F, DType T>
RESHARD_HD inline void run_typed(const unsigned char* s, unsigned char* d, int64_t n) {
  constexpr int64_t fs = F == DType::kF32 ? 4 : (F == DType::kF16 || F == DType::kBF16) ? 2 : 1;
  constexpr int64_t ts = T == DType::kF32 ? 4 : (T == DType::kF16 || T == DType::kBF16) ? 2 : 1;
  for (int64_t i = 0; i < n; ++i) store_f32(T, load_f32(F, s + i * fs), d + i * ts);
}
template <DType F>
RESHARD_HD inline void run_from(DType to, const unsigned char* s, unsigned char* d, int64_t n) {
  switch (to) {
    case DType::kF32:
      return run_typed<F, DType::kF32>(s, d, n);
    case DType::kF16:
      return run_typed<F, DType::kF16>(s, d, n);
    case DType::kBF16:
      return run_typed<F, DType::kBF16>(s, d, n);
    case DType::kF8E4M3:
      return run_typed<F, DType::kF8E4M3>(s, d, n);
    case DType::kF8E5M2:
      return run_typed<F, DType::kF8E5M2>(s, d, n);
    default:
      return;
  }
}
}  // namespace cast_detail

// Casts n contiguous elements; either side may be misaligned (staging).
RESHARD_HD inline void cast_run(DType from, DType to, const void* src, void* dst, int64_t n) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  switch (from) {
    case DType::kF32:
      return cast_detail::run_from<DType::kF32>(to, s, d, n);
    case DType::kF16:
      return cast_detail::run_from<DType::kF16>(to, s, d, n);
    case DType::kBF16:
      return cast_detail::run_from<DType::kBF16>(to, s, d, n);
    case DType::kF8E4M3:
      return cast_detail::run_from<DType::kF8E4M3>(to, s, d, n);
    case DType::kF8E5M2:
      return cast_detail::run_from<DType::kF8E5M2>(to, s, d, n);
    default:
      return;
  }
}

// Casts runs [first_run, last_run) of `desc` (its offsets in elements of
// each side's dtype) from src (`from`) to dst (`to`).
RESHARD_HD inline void cast_desc_runs(const CopyDesc& desc, DType from, DType to, int64_t first_run,
                                      int64_t last_run, const void* src, void* dst) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const int64_t fs = cast_detail::size_of(from), ts = cast_detail::size_of(to);
  for_each_run(desc, first_run, last_run, [&](int64_t so, int64_t dO, int64_t len) {
    cast_run(from, to, s + so * fs, d + dO * ts, len);
  });
}

// Host entry point: casts the described elements. Throws
// Error(kInvalidArgument) for an unsupported pair (cast_supported).
void cast_box(const CopyDesc& desc, DType from, DType to, const void* src, void* dst);

}  // namespace reshard
