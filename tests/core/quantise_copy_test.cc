// Cast on send with block scales (reshard/block_scales.h block_scales_part,
// quantise_span, quantise_runs; core/src/layout/block_quantise.cc): the
// scales pass and the copies that quantise straight to fp8 against the
// shard quantiser (quantise_shard, checked against the reference in
// block_quantise_test.cc and mx_scales_test.cc) followed by the cast to
// the destination dtype, bit for bit: f32, bf16 and f16 into f8e4m3 and
// f8e5m2, f32 and e8m0 scales, NaN, infinities and subnormals, shards that
// start inside the tensor, short edge blocks, rank 3.
#include "layout/quantise_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/block_scales_reference.h"
#include "reshard/block_scales.h"
#include "reshard/box_copy.h"
#include "reshard/cast.h"

namespace reshard {
namespace {

using testing::tensor;

// Random element bits of `from`: a third near 1, the rest any pattern
// (NaN, infinities, subnormals among them), and some blocks' worth of
// tiny values so that subnormal scales and q occur.
std::vector<std::byte> random_source(DType from, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t es = static_cast<size_t>(dtype_size(from));
  std::vector<std::byte> out(static_cast<size_t>(n) * es);
  for (int64_t k = 0; k < n; ++k) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (from == DType::kF32) {
      if (k % 3 == 0) u = (u & 0x807fffffu) | (static_cast<uint32_t>(120 + rng() % 14) << 23);
      if ((k / 256) % 7 == 3) u &= 0x80ffffffu;  // |x| < 2^-125
      if (k % 997 == 0) u = 0x7fc00000u | (u & 0x80000000u);
      if (k % 991 == 0) u = 0x7f800000u | (u & 0x80000000u);
    } else {
      const uint32_t exp_mask = from == DType::kBF16 ? 0x7f80u : 0x7c00u;
      if (k % 3 == 0) u = (u & ~exp_mask) | (from == DType::kBF16 ? 0x3f80u : 0x3c00u);
      if ((k / 256) % 7 == 3) u &= from == DType::kBF16 ? 0x80ffu : 0x83ffu;
      if (k % 991 == 0) u |= exp_mask;  // NaN or infinity
    }
    std::memcpy(&out[static_cast<size_t>(k) * es], &u, es);
  }
  return out;
}

// Row-major index of `idx` in `box`.
int64_t offset_in(const Box& box, const std::array<int64_t, kMaxRank>& idx) {
  int64_t off = 0;
  for (int d = 0; d < box.rank; ++d) off = off * box.extent(d) + (idx[d] - box.lo[d]);
  return off;
}

// A random box inside `box` (each extent at least 1).
Box random_region(const Box& box, std::mt19937_64& rng) {
  Box r = box;
  for (int d = 0; d < box.rank; ++d) {
    const int64_t a = box.lo[d] + static_cast<int64_t>(rng() % box.extent(d));
    const int64_t b = box.lo[d] + static_cast<int64_t>(rng() % box.extent(d));
    r.lo[d] = std::min(a, b);
    r.hi[d] = std::max(a, b) + 1;
  }
  return r;
}

struct Case {
  DType from, to, scale_dtype;
  std::vector<int64_t> shape, block;
  Box box;  // the source shard (block-aligned)
};

// Every way the sending side reads the shard gives the shard quantiser's
// result cast to the destination dtype: the scales by parts (in a
// shuffled order), spans of random offsets and lengths, packed regions
// and regions copied into a larger destination box.
void expect_cast_on_send(const Case& c, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(c.from)) + " -> " + std::string(dtype_name(c.to)) +
               " scales " + std::string(dtype_name(c.scale_dtype)) + " seed " +
               std::to_string(seed));
  const TensorSpec t = tensor(c.from, c.to, c.shape, c.block);
  const Box& box = c.box;
  const int64_t n = box.volume();
  const int64_t es = dtype_size(c.from), ss = dtype_size(c.scale_dtype);
  const std::vector<std::byte> in = random_source(c.from, n, seed);
  const int64_t nblocks = blocks_touched(box, t.scale_block).volume();
  // The reference: the shard quantised (q widened back), then cast.
  std::vector<std::byte> widened(in.size()), scales(static_cast<size_t>(nblocks * ss));
  quantise_shard(t, c.scale_dtype, box, in.data(), scales.data(), widened.data());
  std::vector<uint8_t> want(static_cast<size_t>(n));
  cast_run(c.from, c.to, widened.data(), want.data(), n);

  std::mt19937_64 rng(seed);
  std::vector<std::byte> part_scales(scales.size(), std::byte{0x5a});
  std::vector<Box> parts = quantise_parts(box, t.scale_block, 4096);
  std::shuffle(parts.begin(), parts.end(), rng);
  for (const Box& p : parts)
    block_scales_part(t, c.scale_dtype, box, p, in.data(), part_scales.data());
  ASSERT_EQ(part_scales, scales);

  // Spans cover the shard in random lengths (across rows and blocks).
  std::vector<uint8_t> got(static_cast<size_t>(n), 0xA5);
  for (int64_t off = 0; off < n;) {
    const int64_t len = std::min<int64_t>(n - off, 1 + static_cast<int64_t>(rng() % 700));
    quantise_span(t, c.scale_dtype, box, scales.data(), in.data(), off, len, got.data() + off);
    off += len;
  }
  int64_t wrong = 0;
  for (int64_t k = 0; k < n; ++k)
    if (got[static_cast<size_t>(k)] != want[static_cast<size_t>(k)] && wrong++ < 5) {
      uint32_t x = 0;
      std::memcpy(&x, &in[static_cast<size_t>(k * es)], static_cast<size_t>(es));
      ADD_FAILURE() << "element " << k << " x " << std::hex << x << ": got "
                    << int{got[static_cast<size_t>(k)]} << ", want "
                    << int{want[static_cast<size_t>(k)]};
    }
  EXPECT_EQ(wrong, 0);

  // Regions, packed (dense) and into a destination box one larger each way.
  for (int trial = 0; trial < 20; ++trial) {
    const Box region = random_region(box, rng);
    Box dst_box = region;
    for (int d = 0; d < region.rank; ++d) --dst_box.lo[d], ++dst_box.hi[d];
    for (const Box& out_box : {region, dst_box}) {
      const CopyDesc desc = make_copy_desc(region, box, out_box);
      std::vector<uint8_t> out(static_cast<size_t>(out_box.volume()), 0xA5);
      // Split in two calls at a random run.
      const int64_t runs = copy_desc_runs(desc);
      const int64_t cut = static_cast<int64_t>(rng() % static_cast<uint64_t>(runs + 1));
      quantise_runs(t, c.scale_dtype, box, scales.data(), desc, cut, runs, in.data(), out.data());
      quantise_runs(t, c.scale_dtype, box, scales.data(), desc, 0, cut, in.data(), out.data());
      std::array<int64_t, kMaxRank> idx = region.lo;
      int64_t bad = 0;
      for (int64_t k = 0; k < region.volume(); ++k) {
        const uint8_t w = want[static_cast<size_t>(offset_in(box, idx))];
        if (out[static_cast<size_t>(offset_in(out_box, idx))] != w) ++bad;
        for (int d = region.rank - 1; d >= 0; --d) {
          if (++idx[d] < region.hi[d]) break;
          idx[d] = region.lo[d];
        }
      }
      EXPECT_EQ(bad, 0) << "trial " << trial;
      // Outside the region, nothing written.
      const int64_t untouched = std::count(out.begin(), out.end(), uint8_t{0xA5});
      EXPECT_GE(untouched, out_box.volume() - region.volume());
    }
  }
}

Box make_box(std::vector<int64_t> lo, std::vector<int64_t> hi) {
  Box b;
  b.rank = static_cast<int>(lo.size());
  for (int d = 0; d < b.rank; ++d)
    b.lo[d] = lo[static_cast<size_t>(d)], b.hi[d] = hi[static_cast<size_t>(d)];
  return b;
}

// Invariant: cast on send equals quantise-then-cast, bit for bit, for
// every source and destination dtype and both scale rules, on shards that
// start inside the tensor and end in a short block (rank 2 and 3).
TEST(QuantiseCopy, CastOnSendEqualsQuantiseThenCast) {
  uint64_t seed = 1;
  for (DType from : {DType::kF32, DType::kBF16, DType::kF16})
    for (DType to : {DType::kF8E4M3, DType::kF8E5M2}) {
      // DeepSeek-style f32 scales: a shard of rows [64, 200) (the last
      // block 8 rows) and columns [96, 250) (the last block 26).
      expect_cast_on_send(
          {from, to, DType::kF32, {200, 250}, {32, 48}, make_box({64, 96}, {200, 250})}, seed++);
      expect_cast_on_send(
          {from, to, DType::kF32, {6, 40, 70}, {2, 8, 16}, make_box({2, 8, 16}, {6, 37, 70})},
          seed++);
      // MXFP8: [1, 32] and [1, 1, 32], rows of 100 (the last block 4).
      expect_cast_on_send(
          {from, to, DType::kE8M0, {90, 100}, {1, 32}, make_box({7, 32}, {90, 100})}, seed++);
      expect_cast_on_send(
          {from, to, DType::kE8M0, {3, 9, 100}, {1, 1, 32}, make_box({1, 2, 0}, {3, 9, 100})},
          seed++);
    }
}

}  // namespace
}  // namespace reshard
