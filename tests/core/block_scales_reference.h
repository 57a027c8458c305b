// The reference quantiser of block scales for tests (reshard/block_scales.h),
// written from the definition over a whole rank-2 array, independently of
// the library's quantiser (core/src/layout/block_quantise.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "reshard/box.h"
#include "reshard/cast.h"
#include "reshard/dtype.h"
#include "reshard/numeric.h"
#include "reshard/plan.h"

namespace reshard::testing {

// A tensor spec "w" of `shape` cast from `from` to `to` with block scales
// over blocks `block` (the spec fields the quantiser reads).
inline TensorSpec tensor(DType from, DType to, std::vector<int64_t> shape,
                         std::vector<int64_t> block) {
  TensorSpec t;
  t.name = "w";
  t.shape = std::move(shape);
  t.dtype = from;
  t.dst_dtype = to;
  t.scale_block = std::move(block);
  t.scale_tensor = 1;
  return t;
}

// Row-major rank-2 array of `dtype` bit patterns (in uint32) with its
// quantised form: per block of br x bc, s = amax / M over the finite |x|
// (1 where that is 0), q = cast(x / s) in f32 then the reference cast.
struct Reference {
  std::vector<float> scales;  // ceil(rows / br) x ceil(cols / bc)
  std::vector<uint8_t> q;     // rows x cols
};

inline float to_f32(DType d, uint32_t bits) {
  return d == DType::kF32    ? numeric::f32_from_bits(bits)
         : d == DType::kBF16 ? numeric::bf16_to_f32(static_cast<uint16_t>(bits))
                             : numeric::f16_to_f32(static_cast<uint16_t>(bits));
}

inline Reference quantise(const std::vector<uint32_t>& x, DType from, DType to, int64_t rows,
                          int64_t cols, int64_t br, int64_t bc) {
  const float m = to == DType::kF8E4M3 ? 448.0f : 57344.0f;
  const int64_t nr = (rows + br - 1) / br, nc = (cols + bc - 1) / bc;
  Reference r;
  r.scales.assign(static_cast<size_t>(nr * nc), 0.0f);
  r.q.assign(x.size(), 0);
  for (int64_t bi = 0; bi < nr; ++bi)
    for (int64_t bj = 0; bj < nc; ++bj) {
      float amax = 0;
      for (int64_t i = bi * br; i < std::min(rows, (bi + 1) * br); ++i)
        for (int64_t j = bj * bc; j < std::min(cols, (bj + 1) * bc); ++j) {
          const float v = std::fabs(to_f32(from, x[static_cast<size_t>(i * cols + j)]));
          if (std::isfinite(v)) amax = std::max(amax, v);
        }
      float s = amax / m;
      if (s < 0x1p-126f) s = 0x1p-126f;  // the least normal f32
      if (amax == 0) s = 1;
      r.scales[static_cast<size_t>(bi * nc + bj)] = s;
      for (int64_t i = bi * br; i < std::min(rows, (bi + 1) * br); ++i)
        for (int64_t j = bj * bc; j < std::min(cols, (bj + 1) * bc); ++j) {
          const size_t k = static_cast<size_t>(i * cols + j);
          const float v = to_f32(from, x[k]) / s;
          r.q[k] = static_cast<uint8_t>(cast_bits(DType::kF32, to, numeric::f32_bits(v)));
        }
    }
  return r;
}

// MXFP8 (OCP MX v1.0 §6.3, e8m0 scales) over a row-major rows x cols array,
// blocks of 32 along the rows: per block, amax over every |x| in double;
// X = 2^e with e = floor(log2(amax)) - emax (frexp), at least -127; bits
// e + 127, 0 for a block of zeros, 255 where any x is NaN or infinite; q =
// cast(clamp(x / X, -M, M)) with x / X in double (exact), or the cast of
// +NaN for bits 255.
struct MxReference {
  std::vector<uint8_t> scales;  // rows x ceil(cols / 32)
  std::vector<uint8_t> q;       // rows x cols
};

inline MxReference quantise_mx(const std::vector<uint32_t>& x, DType from, DType to, int64_t rows,
                               int64_t cols) {
  const double m = to == DType::kF8E4M3 ? 448.0 : 57344.0;
  const int emax = to == DType::kF8E4M3 ? 8 : 15;
  const int64_t nc = (cols + 31) / 32;
  MxReference r;
  r.scales.assign(static_cast<size_t>(rows * nc), 0);
  r.q.assign(x.size(), 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < nc; ++b) {
      const int64_t lo = b * 32, hi = std::min(cols, lo + 32);
      double amax = 0;
      bool special = false;
      for (int64_t j = lo; j < hi; ++j) {
        const double v =
            std::fabs(static_cast<double>(to_f32(from, x[static_cast<size_t>(i * cols + j)])));
        if (!std::isfinite(v))
          special = true;
        else
          amax = std::max(amax, v);
      }
      int bits = 0;
      if (special) {
        bits = 255;
      } else if (amax > 0) {
        int ex = 0;
        (void)std::frexp(amax, &ex);  // amax = f * 2^ex, f in [0.5, 1)
        bits = std::max(ex - 1 - emax, -127) + 127;
      }
      r.scales[static_cast<size_t>(i * nc + b)] = static_cast<uint8_t>(bits);
      for (int64_t j = lo; j < hi; ++j) {
        const size_t k = static_cast<size_t>(i * cols + j);
        uint32_t in = 0x7fc00000u;
        if (bits != 255) {
          const double y = std::ldexp(static_cast<double>(to_f32(from, x[k])), 127 - bits);
          in = numeric::f32_bits(static_cast<float>(std::clamp(y, -m, m)));
        }
        r.q[k] = static_cast<uint8_t>(cast_bits(DType::kF32, to, in));
      }
    }
  return r;
}

// Copies box `b` of a rank-2 row-major array (elements of `size` bytes).
inline std::vector<std::byte> cut(const std::vector<uint32_t>& x, int64_t cols, const Box& b,
                                  int64_t size) {
  std::vector<std::byte> out;
  for (int64_t i = b.lo[0]; i < b.hi[0]; ++i)
    for (int64_t j = b.lo[1]; j < b.hi[1]; ++j) {
      const uint32_t v = x[static_cast<size_t>(i * cols + j)];
      const auto* p = reinterpret_cast<const std::byte*>(&v);
      out.insert(out.end(), p, p + size);
    }
  return out;
}

}  // namespace reshard::testing
