// The reference quantiser of block scales for tests (reshard/block_scales.h),
// written from the definition over a whole rank-2 array, independently of
// the library's quantiser (core/src/layout/block_quantise.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "reshard/cast.h"
#include "reshard/dtype.h"
#include "reshard/numeric.h"

namespace reshard::testing {

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

}  // namespace reshard::testing
