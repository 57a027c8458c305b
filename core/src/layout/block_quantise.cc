// The quantiser of block scales (reshard/block_scales.h quantise_part):
// per block the amax of its finite elements and its scale, then each
// element's q = cast(x / s), widened back to the source dtype.
//
// f32, bf16 and f16 sources take loops the compiler vectorises: the amax
// is an integer maximum over the magnitude bits of the finite elements
// (the bits of non-negative floats order as their values), and q widened
// back is computed without the fp8 bits, by rounding x / s to the fp8
// grid in f32 (round_to_grid). Its result equals the cast to fp8 widened
// back to f32 for every f32 value up to the fp8's largest finite one
// (checked over all 2^32 patterns once; tests/core/block_scales_test.cc
// checks every bf16 and f16 pattern); larger magnitudes, infinities and NaN
// (only a non-finite x gives them: s >= amax / M) take the reference cast.
// Other sources take the reference cast for every element.
//
// MXFP8 (e8m0 scales): a block is one run of a row (block [1, ..., 1, 32]),
// so each run is quantised in one pass: the integer amax over all magnitude
// bits (a NaN's or infinity's are the largest), the E8M0 bits from its
// exponent field, then q = x · 2^-e clamped to ±M and rounded to the grid
// (the product is exact where the division by 2^e is, and rounds the same
// where it is not).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "layout/quantise_copy.h"
#include "reshard/block_scales.h"
#include "reshard/box_copy.h"
#include "reshard/cast.h"
#include "reshard/error.h"
#include "reshard/numeric.h"
#include "reshard/quantise_grid.h"

namespace reshard {

namespace {

using quantise_grid::Grid;
using quantise_grid::grid_to_bits;
using quantise_grid::round_to_grid;
using quantise_grid::Source;

// q widened back to `from`, by the casts of reshard/cast.h.
inline void reference_q(DType from, DType to, float x, float s, unsigned char* out) {
  unsigned char q[4] = {0, 0, 0, 0};
  cast_detail::store_f32(to, x / s, q);
  cast_detail::store_f32(from, cast_detail::load_f32(to, q), out);
}

// The shard's geometry: its box, the part quantised, the blocks.
struct Walk {
  const Box& box;
  const Box& part;
  const Box blocks;  // blocks_touched(box): the scales' box
  std::span<const int64_t> block;
  std::array<int64_t, kMaxRank> stride{};  // of `box`, in elements

  Walk(const Box& b, const Box& p, std::span<const int64_t> blk)
      : box(b), part(p), blocks(blocks_touched(b, blk)), block(blk) {
    stride[b.rank - 1] = 1;
    for (int d = b.rank - 1; d > 0; --d) stride[d - 1] = stride[d] * b.extent(d);
  }

  // Calls f(offset, n, scale_index) for each run of the part: a row's
  // elements in one block (row-major order of the rows, each row's runs
  // left to right), offset and scale_index within the shard.
  template <typename F>
  void runs(F&& f) const {
    const int last = box.rank - 1;
    const int64_t bl = block[static_cast<size_t>(last)];
    std::array<int64_t, kMaxRank> idx = part.lo;
    for (;;) {
      int64_t off = 0, base = 0;
      for (int d = 0; d < last; ++d) {
        off += (idx[d] - box.lo[d]) * stride[d];
        base = base * blocks.extent(d) + (idx[d] / block[static_cast<size_t>(d)] - blocks.lo[d]);
      }
      base *= blocks.extent(last);
      off -= box.lo[last];
      for (int64_t c = part.lo[last]; c < part.hi[last];) {
        const int64_t j = c / bl;
        const int64_t end = std::min(part.hi[last], (j + 1) * bl);
        f(off + c, end - c, base + j - blocks.lo[last]);
        c = end;
      }
      int d = last - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < part.hi[d]) break;
        idx[d] = part.lo[d];
      }
      if (d < 0) return;
    }
  }

  // Calls f(scale_index) for each block of the part.
  template <typename F>
  void part_blocks(F&& f) const {
    const Box pb = blocks_touched(part, block);
    const int rank = pb.rank;
    std::array<int64_t, kMaxRank> idx = pb.lo;
    for (;;) {
      int64_t b = 0;
      for (int d = 0; d < rank; ++d) b = b * blocks.extent(d) + (idx[d] - blocks.lo[d]);
      f(b);
      int d = rank - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < pb.hi[d]) break;
        idx[d] = pb.lo[d];
      }
      if (d < 0) return;
    }
  }
};

// The f32 scale of each block of the part: the amax of its finite
// elements (as magnitude bits, kept in its scale's place), then its scale.
template <DType From, DType To>
void scales_typed(const Walk& w, const void* src, float* scales) {
  using S = Source<From>;
  using T = typename S::T;
  const T* in = static_cast<const T*>(src);
  w.part_blocks([&](int64_t b) { std::memset(&scales[b], 0, sizeof(float)); });
  w.runs([&](int64_t off, int64_t n, int64_t b) {
    const T* x = in + off;
    T m = 0;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, quantise_grid::amax_bits<From, false>(x[k]));
    uint32_t kept;
    std::memcpy(&kept, &scales[b], 4);
    if (m > kept) {
      const uint32_t v = m;
      std::memcpy(&scales[b], &v, 4);
    }
  });
  w.part_blocks([&](int64_t b) {
    uint32_t bits;
    std::memcpy(&bits, &scales[b], 4);
    scales[b] = quantise_grid::f32_scale<To>(S::to_f32(static_cast<T>(bits)));
  });
}

template <DType From, DType To>
void quantise_typed(const Walk& w, const void* src, float* scales, void* out) {
  using S = Source<From>;
  using T = typename S::T;
  const T* in = static_cast<const T*>(src);
  T* o = static_cast<T*>(out);
  scales_typed<From, To>(w, src, scales);
  w.runs([&](int64_t off, int64_t n, int64_t b) {
    const T* x = in + off;
    T* y = o + off;
    const float s = scales[b];
    uint32_t bad = 0;
    for (int64_t k = 0; k < n; ++k) y[k] = S::from_f32(round_to_grid<To>(S::to_f32(x[k]) / s, bad));
    if (bad == 0) return;
    for (int64_t k = 0; k < n; ++k) {
      const float v = S::to_f32(x[k]);
      if (!(std::fabs(v / s) <= numeric::f32_from_bits(Grid<To>::kMax)))
        reference_q(From, To, v, s, reinterpret_cast<unsigned char*>(y + k));
    }
  });
}

// The E8M0 bits of one MXFP8 block (a run of n elements): the integer
// amax over all magnitude bits (a NaN's or infinity's are the largest).
template <DType From, DType To>
inline uint8_t mx_run_bits(const typename Source<From>::T* x, int64_t n) {
  using S = Source<From>;
  using T = typename S::T;
  T m = 0;
  for (int64_t k = 0; k < n; ++k) m = std::max(m, quantise_grid::amax_bits<From, true>(x[k]));
  return quantise_grid::mx_bits<From, To>(m);
}

template <DType From, DType To>
void quantise_mx_typed(const Walk& w, const void* src, uint8_t* scales, void* out) {
  using S = Source<From>;
  using T = typename S::T;
  const T* in = static_cast<const T*>(src);
  T* o = static_cast<T*>(out);
  const float max = numeric::f32_from_bits(Grid<To>::kMax);
  // +qNaN in the source dtype: its cast is the NaN block's q.
  const T nan = From == DType::kF32    ? static_cast<T>(0x7fc00000u)
                : From == DType::kBF16 ? static_cast<T>(0x7fc0u)
                                       : static_cast<T>(0x7e00u);
  w.runs([&](int64_t off, int64_t n, int64_t b) {
    const T* x = in + off;
    T* y = o + off;
    const uint8_t bits = mx_run_bits<From, To>(x, n);
    scales[b] = bits;
    if (bits == 255) {
      std::fill(y, y + n, nan);
      return;
    }
    // 2^-e = 2^(127 - bits), a normal f32: bits is at most 127 + 15.
    const float inv = numeric::f32_from_bits(static_cast<uint32_t>(254 - bits) << 23);
    uint32_t bad = 0;
    for (int64_t k = 0; k < n; ++k)
      y[k] = S::from_f32(round_to_grid<To>(std::clamp(S::to_f32(x[k]) * inv, -max, max), bad));
  });
}

template <DType From>
void quantise_mx_from(const Walk& w, DType to, const void* src, void* scales, void* out) {
  auto* sc = static_cast<uint8_t*>(scales);
  if (to == DType::kF8E4M3) {
    quantise_mx_typed<From, DType::kF8E4M3>(w, src, sc, out);
  } else {
    quantise_mx_typed<From, DType::kF8E5M2>(w, src, sc, out);
  }
}

// Any other source dtype: the reference casts, element by element.
void quantise_reference(const Walk& w, DType from, DType to, const void* src, float* scales,
                        void* out) {
  const int64_t es = dtype_size(from);
  const auto* in = static_cast<const unsigned char*>(src);
  auto* o = static_cast<unsigned char*>(out);
  w.part_blocks([&](int64_t b) { scales[b] = 0.0f; });
  w.runs([&](int64_t off, int64_t n, int64_t b) {
    for (int64_t k = 0; k < n; ++k) {
      const float a = std::fabs(cast_detail::load_f32(from, in + (off + k) * es));
      if (std::isfinite(a) && a > scales[b]) scales[b] = a;
    }
  });
  w.part_blocks([&](int64_t b) { scales[b] = block_scale(scales[b], to); });
  w.runs([&](int64_t off, int64_t n, int64_t b) {
    for (int64_t k = off; k < off + n; ++k)
      reference_q(from, to, cast_detail::load_f32(from, in + k * es), scales[b], o + k * es);
  });
}

template <DType From>
void quantise_from(const Walk& w, DType to, const void* src, float* scales, void* out) {
  if (to == DType::kF8E4M3) {
    quantise_typed<From, DType::kF8E4M3>(w, src, scales, out);
  } else {
    quantise_typed<From, DType::kF8E5M2>(w, src, scales, out);
  }
}

// The E8M0 bits of each block of the part (MXFP8: a block is one run).
template <DType From, DType To>
void mx_scales_typed(const Walk& w, const void* src, uint8_t* scales) {
  const auto* in = static_cast<const typename Source<From>::T*>(src);
  w.runs(
      [&](int64_t off, int64_t n, int64_t b) { scales[b] = mx_run_bits<From, To>(in + off, n); });
}

// A source shard's blocks, for quantising a span of it: the shard's box,
// its scales' box (blocks_touched) and the block.
struct ShardBlocks {
  const Box& box;
  const Box blocks;
  std::span<const int64_t> block;

  ShardBlocks(const Box& b, std::span<const int64_t> blk)
      : box(b), blocks(blocks_touched(b, blk)), block(blk) {}

  // Calls f(offset, n, scale_index) for elements [offset, offset + n) of
  // the shard (row-major in `box`), cut where a row or a block ends.
  template <typename F>
  void segments(int64_t offset, int64_t n, F&& f) const {
    const int last = box.rank - 1;
    std::array<int64_t, kMaxRank> idx{};
    int64_t r = offset;
    for (int d = last; d >= 0; --d) {
      idx[d] = r % box.extent(d);
      r /= box.extent(d);
    }
    const int64_t bl = block[static_cast<size_t>(last)];
    while (n > 0) {
      // The row's first scale, then the blocks of the row left to right.
      int64_t base = 0;
      for (int d = 0; d < last; ++d)
        base = base * blocks.extent(d) +
               ((box.lo[d] + idx[d]) / block[static_cast<size_t>(d)] - blocks.lo[d]);
      base = base * blocks.extent(last) - blocks.lo[last];
      const int64_t row = std::min(n, box.extent(last) - idx[last]);
      const int64_t end = box.lo[last] + idx[last] + row;
      int64_t col = box.lo[last] + idx[last];
      for (int64_t j = col / bl; col < end; ++j) {
        const int64_t seg = std::min(end, (j + 1) * bl) - col;
        f(offset, seg, base + j);
        offset += seg;
        col += seg;
      }
      n -= row;
      idx[last] += row;
      for (int d = last; d > 0 && idx[d] == box.extent(d); --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }
};

// Elements [offset, offset + n) of a shard quantised straight to fp8 at
// `dst` (one byte each), with the scales the shard's first pass wrote:
// f32 scales q = cast(x / s); e8m0, q = cast(clamp(x * 2^-e, -M, M)), or
// every q NaN where the scale byte is 255. The same arithmetic as
// quantise_typed and quantise_mx_typed, without widening back.
template <DType From, DType To, bool kMx>
void span_typed(const ShardBlocks& g, const void* scales, const void* src, int64_t offset,
                int64_t n, uint8_t* dst) {
  using S = Source<From>;
  using T = typename S::T;
  const T* in = static_cast<const T*>(src);
  const float max = numeric::f32_from_bits(Grid<To>::kMax);
  g.segments(offset, n, [&](int64_t off, int64_t len, int64_t b) {
    const T* x = in + off;
    uint8_t* y = dst + (off - offset);
    uint32_t bad = 0;
    if constexpr (kMx) {
      const uint8_t bits = static_cast<const uint8_t*>(scales)[b];
      if (bits == 255) {
        // +qNaN of the source dtype cast: the NaN block's q.
        const uint32_t nan = From == DType::kF32    ? 0x7fc00000u
                             : From == DType::kBF16 ? 0x7fc0u
                                                    : 0x7e00u;
        std::fill(y, y + len, static_cast<uint8_t>(cast_bits(From, To, nan)));
        return;
      }
      const float inv = numeric::f32_from_bits(static_cast<uint32_t>(254 - bits) << 23);
      for (int64_t k = 0; k < len; ++k)
        y[k] =
            grid_to_bits<To>(round_to_grid<To>(std::clamp(S::to_f32(x[k]) * inv, -max, max), bad));
    } else {
      const float s = static_cast<const float*>(scales)[b];
      for (int64_t k = 0; k < len; ++k)
        y[k] = grid_to_bits<To>(round_to_grid<To>(S::to_f32(x[k]) / s, bad));
      if (bad == 0) return;
      for (int64_t k = 0; k < len; ++k) {
        const float v = S::to_f32(x[k]);
        if (!(std::fabs(v / s) <= max)) y[k] = quantise_grid::off_grid<To>(v, v / s);
      }
    }
  });
}

// Calls fn(std::integral_constant<DType, From>{}, ...To...) for a scaled
// tensor's source and destination dtypes (block_scales.h checks them).
template <typename Fn>
void dispatch_scaled(DType from, DType to, Fn&& fn) {
  const auto with_to = [&](auto f) {
    if (to == DType::kF8E4M3) {
      fn(f, std::integral_constant<DType, DType::kF8E4M3>{});
    } else if (to == DType::kF8E5M2) {
      fn(f, std::integral_constant<DType, DType::kF8E5M2>{});
    } else {
      fail(ErrorCode::kUnsupported, "dtype",
           "block scales need an f8e4m3 or f8e5m2 destination, not " + std::string(dtype_name(to)));
    }
  };
  switch (from) {
    case DType::kF32:
      return with_to(std::integral_constant<DType, DType::kF32>{});
    case DType::kBF16:
      return with_to(std::integral_constant<DType, DType::kBF16>{});
    case DType::kF16:
      return with_to(std::integral_constant<DType, DType::kF16>{});
    default:
      fail(ErrorCode::kUnsupported, "dtype",
           "block scales need an f32, bf16 or f16 source, not " + std::string(dtype_name(from)));
  }
}

}  // namespace

std::vector<Box> quantise_parts(const Box& box, std::span<const int64_t> block, int64_t elements) {
  std::vector<Box> parts;
  if (box.volume() == 0) return parts;
  const int last = box.rank - 1;
  const int64_t target = std::max<int64_t>(elements, 1);
  // Dim 0 in whole blocks; where one block's rows exceed the target (and
  // the rank is 2 or more), the last dim in whole blocks too.
  const int64_t b0 = block[0];
  const int64_t inner = box.volume() / box.extent(0);  // elements per index of dim 0
  const int64_t middle = last > 0 ? inner / box.extent(last) : 1;
  int64_t rows = b0, cols = box.extent(last);
  if (last == 0) {
    rows = std::max<int64_t>(1, target / b0) * b0;
  } else if (b0 * inner <= target) {
    rows = std::max<int64_t>(1, target / (b0 * inner)) * b0;
  } else {
    const int64_t bl = block[static_cast<size_t>(last)];
    cols = std::max<int64_t>(1, target / (b0 * middle * bl)) * bl;
  }
  // Boundaries at multiples of the step from the box's start (a block
  // boundary), the last part ending at the box's end.
  for (int64_t r = box.lo[0]; r < box.hi[0]; r += rows) {
    for (int64_t c = box.lo[last]; last > 0 && c < box.hi[last]; c += cols) {
      Box p = box;
      p.lo[0] = r;
      p.hi[0] = std::min(box.hi[0], r + rows);
      p.lo[last] = c;
      p.hi[last] = std::min(box.hi[last], c + cols);
      parts.push_back(p);
    }
    if (last == 0) {
      Box p = box;
      p.lo[0] = r;
      p.hi[0] = std::min(box.hi[0], r + rows);
      parts.push_back(p);
    }
  }
  return parts;
}

void quantise_part(const TensorSpec& value, DType scale_dtype, const Box& box, const Box& part,
                   const void* src, void* scales_out, void* out) {
  if (part.volume() == 0) return;
  const Walk w(box, part, value.scale_block);
  const DType to = out_dtype(value);
  if (scale_dtype == DType::kE8M0) {
    switch (value.dtype) {
      case DType::kF32:
        return quantise_mx_from<DType::kF32>(w, to, src, scales_out, out);
      case DType::kBF16:
        return quantise_mx_from<DType::kBF16>(w, to, src, scales_out, out);
      case DType::kF16:
        return quantise_mx_from<DType::kF16>(w, to, src, scales_out, out);
      default:
        fail(ErrorCode::kUnsupported, "dtype",
             "MXFP8 block scales need an f32, bf16 or f16 source, not " +
                 std::string(dtype_name(value.dtype)));
    }
  }
  float* scales = static_cast<float*>(scales_out);
  switch (value.dtype) {
    case DType::kF32:
      return quantise_from<DType::kF32>(w, to, src, scales, out);
    case DType::kBF16:
      return quantise_from<DType::kBF16>(w, to, src, scales, out);
    case DType::kF16:
      return quantise_from<DType::kF16>(w, to, src, scales, out);
    default:
      return quantise_reference(w, value.dtype, to, src, scales, out);
  }
}

void quantise_shard(const TensorSpec& value, DType scale_dtype, const Box& box, const void* src,
                    void* scales, void* out) {
  quantise_part(value, scale_dtype, box, box, src, scales, out);
}

}  // namespace reshard

namespace reshard {

void block_scales_part(const TensorSpec& value, DType scale_dtype, const Box& box, const Box& part,
                       const void* src, void* scales) {
  if (part.volume() == 0) return;
  const Walk w(box, part, value.scale_block);
  dispatch_scaled(value.dtype, out_dtype(value), [&](auto f, auto t) {
    constexpr DType From = decltype(f)::value, To = decltype(t)::value;
    if (scale_dtype == DType::kE8M0) {
      mx_scales_typed<From, To>(w, src, static_cast<uint8_t*>(scales));
    } else {
      scales_typed<From, To>(w, src, static_cast<float*>(scales));
    }
  });
}

void quantise_span(const TensorSpec& value, DType scale_dtype, const Box& box, const void* scales,
                   const void* src, int64_t offset, int64_t n, void* dst) {
  if (n <= 0) return;
  const ShardBlocks g(box, value.scale_block);
  dispatch_scaled(value.dtype, out_dtype(value), [&](auto f, auto t) {
    constexpr DType From = decltype(f)::value, To = decltype(t)::value;
    if (scale_dtype == DType::kE8M0) {
      span_typed<From, To, true>(g, scales, src, offset, n, static_cast<uint8_t*>(dst));
    } else {
      span_typed<From, To, false>(g, scales, src, offset, n, static_cast<uint8_t*>(dst));
    }
  });
}

void quantise_runs(const TensorSpec& value, DType scale_dtype, const Box& box, const void* scales,
                   const CopyDesc& desc, int64_t first_run, int64_t last_run, const void* src,
                   void* dst) {
  if (first_run >= last_run) return;
  const ShardBlocks g(box, value.scale_block);
  auto* out = static_cast<uint8_t*>(dst);
  dispatch_scaled(value.dtype, out_dtype(value), [&](auto f, auto t) {
    constexpr DType From = decltype(f)::value, To = decltype(t)::value;
    for_each_run(desc, first_run, last_run, [&](int64_t so, int64_t to, int64_t len) {
      if (scale_dtype == DType::kE8M0) {
        span_typed<From, To, true>(g, scales, src, so, len, out + to);
      } else {
        span_typed<From, To, false>(g, scales, src, so, len, out + to);
      }
    });
  });
}

}  // namespace reshard
