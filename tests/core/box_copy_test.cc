// The N-d box copy core (reshard/box_copy.h): descriptors, run iteration,
// copies and reductions, checked against naive per-element references.
#include "reshard/box_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "layout_helpers.h"
#include "reshard/error.h"

namespace reshard {
namespace {

using testing::make_box;

// Row-major element offset of global index `idx` in a buffer shaped `box`.
int64_t offset_in(const Box& box, const std::array<int64_t, kMaxRank>& idx) {
  int64_t off = 0;
  for (int d = 0; d < box.rank; ++d) off = off * box.extent(d) + (idx[d] - box.lo[d]);
  return off;
}

// Calls f(global index) for every element of `box`, row-major.
template <class F>
void for_each_index(const Box& box, F&& f) {
  if (box.empty()) return;
  std::array<int64_t, kMaxRank> idx{};
  for (int d = 0; d < box.rank; ++d) idx[d] = box.lo[d];
  while (true) {
    f(idx);
    int d = box.rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < box.hi[d]) break;
      idx[d] = box.lo[d];
    }
    if (d < 0) return;
  }
}

// A random box inside `shape` (sometimes empty in some dim when allow_empty).
Box random_box(std::mt19937_64& rng, const Box& shape, bool allow_empty) {
  Box b;
  b.rank = shape.rank;
  for (int d = 0; d < shape.rank; ++d) {
    const int64_t n = shape.hi[d];
    std::uniform_int_distribution<int64_t> pick(0, n);
    int64_t lo = pick(rng);
    int64_t hi = pick(rng);
    if (lo > hi) std::swap(lo, hi);
    if (lo == hi && !allow_empty) {
      if (hi < n) {
        ++hi;
      } else {
        --lo;
      }
    }
    b.lo[d] = lo;
    b.hi[d] = hi;
  }
  return b;
}

Box random_shape(std::mt19937_64& rng, int rank) {
  Box s;
  s.rank = rank;
  std::uniform_int_distribution<int64_t> size(1, 7);
  for (int d = 0; d < rank; ++d) s.hi[d] = size(rng);
  return s;
}

// A box around `inner` inside `shape`: each side grows by 0-2 (often 0, so
// that some dims stay contiguous).
Box random_enclosing(std::mt19937_64& rng, const Box& shape, const Box& inner) {
  Box b = inner;
  std::uniform_int_distribution<int64_t> grow(-2, 2);
  for (int d = 0; d < shape.rank; ++d) {
    b.lo[d] = std::max<int64_t>(0, inner.lo[d] - std::max<int64_t>(0, grow(rng)));
    b.hi[d] = std::min(shape.hi[d], inner.hi[d] + std::max<int64_t>(0, grow(rng)));
  }
  return b;
}

// A random copy: (region, src_box, dst_box), as a plain copy, a pack
// (dst_box == region) or an unpack (src_box == region); one in ten is empty.
std::tuple<Box, Box, Box> random_copy(std::mt19937_64& rng) {
  const int rank = std::uniform_int_distribution<int>(0, 5)(rng);
  const Box shape = random_shape(rng, rank);
  Box region = random_box(rng, shape, false);
  const Box src = random_enclosing(rng, shape, region);
  const Box dst = random_enclosing(rng, shape, region);
  if (rank > 0 && rng() % 10 == 0) {
    const auto d = static_cast<int>(rng() % static_cast<uint64_t>(rank));
    region.hi[d] = region.lo[d];
  }
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0:
      return {region, region, dst};
    case 1:
      return {region, src, region};
    default:
      return {region, src, dst};
  }
}

std::vector<unsigned char> random_bytes(std::mt19937_64& rng, int64_t n) {
  std::vector<unsigned char> v(static_cast<size_t>(n));
  for (auto& c : v) c = static_cast<unsigned char>(rng());
  return v;
}

// Invariant: a copy that is contiguous on both sides is one run of rank 1.
TEST(CopyDesc, FullyContiguousCopyCollapsesToOneRun) {
  const Box box = make_box({{0, 3}, {0, 4}, {0, 5}, {0, 2}});
  const CopyDesc d = make_copy_desc(box, box, box);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.extent[0], 120);
  EXPECT_EQ(d.src_offset, 0);
  EXPECT_EQ(d.dst_offset, 0);
  EXPECT_TRUE(copy_desc_contiguous(d));
  EXPECT_EQ(copy_desc_runs(d), 1);
  // Rows of a wider source that span the full width are contiguous too.
  const Box src = make_box({{0, 8}, {0, 5}});
  const Box rows = make_box({{2, 6}, {0, 5}});
  const CopyDesc r = make_copy_desc(rows, src, rows);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.extent[0], 20);
  EXPECT_EQ(r.src_offset, 10);
}

// Invariant: packing a column block keeps one run per row with the source's
// row stride and a dense destination.
TEST(CopyDesc, PackOfColumnBlockHasOneRunPerRow) {
  const Box src = make_box({{0, 4}, {0, 8}});
  const Box region = make_box({{0, 4}, {2, 5}});
  const CopyDesc d = make_copy_desc(region, src, region);
  ASSERT_EQ(d.rank, 2);
  EXPECT_EQ(d.extent[0], 4);
  EXPECT_EQ(d.extent[1], 3);
  EXPECT_EQ(d.src_stride[0], 8);
  EXPECT_EQ(d.dst_stride[0], 3);
  EXPECT_EQ(d.src_offset, 2);
  EXPECT_EQ(d.dst_offset, 0);
  EXPECT_FALSE(copy_desc_contiguous(d));
  EXPECT_EQ(copy_desc_runs(d), 4);
  EXPECT_EQ(copy_desc_run_length(d), 3);
}

// Invariant: extent-1 dims vanish; a single column is runs of length 1 whose
// strides come from the dropped inner dim.
TEST(CopyDesc, SingleColumnIsRunsOfOneElement) {
  const Box src = make_box({{0, 5}, {0, 7}});
  const Box region = make_box({{1, 4}, {3, 4}});
  const CopyDesc d = make_copy_desc(region, src, region);
  ASSERT_EQ(d.rank, 2);
  EXPECT_EQ(d.extent[0], 3);
  EXPECT_EQ(d.extent[1], 1);
  EXPECT_EQ(d.src_stride[0], 7);
  EXPECT_EQ(d.dst_stride[0], 1);
  EXPECT_EQ(d.src_offset, 7 + 3);
  EXPECT_EQ(copy_desc_runs(d), 3);
}

// Invariant: a rank-0 region copies exactly one element, an empty region none.
TEST(CopyDesc, RankZeroCopiesOneElementAndEmptyCopiesNone) {
  const Box scalar;
  const CopyDesc d = make_copy_desc(scalar, scalar, scalar);
  EXPECT_EQ(copy_desc_elements(d), 1);
  EXPECT_EQ(copy_desc_runs(d), 1);
  double src = 3.5;
  double dst = 0;
  copy_box(d, sizeof(double), &src, &dst);
  EXPECT_EQ(dst, 3.5);

  const Box box = make_box({{0, 4}, {0, 4}});
  const Box empty = make_box({{2, 2}, {0, 4}});
  const CopyDesc e = make_copy_desc(empty, box, box);
  EXPECT_EQ(copy_desc_elements(e), 0);
  EXPECT_EQ(copy_desc_runs(e), 0);
  EXPECT_TRUE(copy_desc_contiguous(e));
  int calls = 0;
  for_each_run(e, [&](int64_t, int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// Invariant (random, ranks 0-5): the descriptor is canonical. It moves the
// region's element count, has unit innermost strides, no extent-1 dim except
// possibly the innermost, and no two adjacent dims it could still merge.
TEST(CopyDesc, RandomDescriptorsAreCanonical) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 5000; ++iter) {
    const auto [region, src, dst] = random_copy(rng);
    const CopyDesc d = make_copy_desc(region, src, dst);
    ASSERT_GE(d.rank, 1);
    ASSERT_LE(d.rank, std::max(1, region.rank));
    EXPECT_EQ(copy_desc_elements(d), region.volume());
    if (region.empty()) continue;
    EXPECT_EQ(d.src_stride[d.rank - 1], 1);
    EXPECT_EQ(d.dst_stride[d.rank - 1], 1);
    for (int k = 0; k + 1 < d.rank; ++k) {
      EXPECT_GT(d.extent[k], 1) << "extent-1 dim kept at " << k;
      const bool mergeable = d.src_stride[k] == d.src_stride[k + 1] * d.extent[k + 1] &&
                             d.dst_stride[k] == d.dst_stride[k + 1] * d.extent[k + 1];
      EXPECT_FALSE(mergeable) << "dims " << k << " and " << k + 1 << " not merged";
    }
  }
}

// Invariant (random, ranks 0-5, element sizes 1-8 and 3): copy_box writes
// exactly the region, element by element as the naive index loop does, and
// leaves every other destination byte untouched.
TEST(CopyBox, MatchesNaivePerElementReference) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 3000; ++iter) {
    // Named copies, not structured bindings: a lambda below captures them
    // (clang before 16 cannot capture a structured binding).
    const auto copy = random_copy(rng);
    const Box& region = std::get<0>(copy);
    const Box& src_box = std::get<1>(copy);
    const Box& dst_box = std::get<2>(copy);
    const int64_t elem = std::array<int64_t, 5>{1, 2, 3, 4, 8}[iter % 5];
    const auto src = random_bytes(rng, src_box.volume() * elem);
    auto got = random_bytes(rng, dst_box.volume() * elem);
    auto want = got;
    for_each_index(region, [&](const std::array<int64_t, kMaxRank>& idx) {
      std::memcpy(want.data() + offset_in(dst_box, idx) * elem,
                  src.data() + offset_in(src_box, idx) * elem, static_cast<size_t>(elem));
    });
    copy_box(make_copy_desc(region, src_box, dst_box), elem, src.data(), got.data());
    ASSERT_EQ(got, want) << "iteration " << iter << " region " << region.rank;
  }
}

// Invariant: for_each_run visits copy_desc_runs runs of copy_desc_run_length
// elements in the order run_offsets numbers them, and any split of the run
// range into sub-ranges visits the same runs.
TEST(CopyBox, RunIterationAgreesWithRunOffsetsAndSplits) {
  std::mt19937_64 rng(13);
  for (int iter = 0; iter < 2000; ++iter) {
    const auto [region, src_box, dst_box] = random_copy(rng);
    const CopyDesc d = make_copy_desc(region, src_box, dst_box);
    std::vector<std::array<int64_t, 3>> runs;
    for_each_run(d, [&](int64_t s, int64_t t, int64_t n) { runs.push_back({s, t, n}); });
    ASSERT_EQ(static_cast<int64_t>(runs.size()), copy_desc_runs(d));
    for (size_t i = 0; i < runs.size(); ++i) {
      int64_t s = -1;
      int64_t t = -1;
      run_offsets(d, static_cast<int64_t>(i), &s, &t);
      EXPECT_EQ(s, runs[i][0]);
      EXPECT_EQ(t, runs[i][1]);
      EXPECT_EQ(runs[i][2], copy_desc_run_length(d));
    }
    const int64_t total = copy_desc_runs(d);
    const int64_t cut = total == 0 ? 0 : std::uniform_int_distribution<int64_t>(0, total)(rng);
    std::vector<std::array<int64_t, 3>> split;
    auto add = [&](int64_t s, int64_t t, int64_t n) { split.push_back({s, t, n}); };
    for_each_run(d, 0, cut, add);
    for_each_run(d, cut, total, add);
    EXPECT_EQ(split, runs);
  }
}

// Invariant: copy_box_runs over a partition of the runs equals copy_box.
TEST(CopyBox, CopyOfRunRangesComposes) {
  std::mt19937_64 rng(17);
  for (int iter = 0; iter < 500; ++iter) {
    const auto [region, src_box, dst_box] = random_copy(rng);
    const CopyDesc d = make_copy_desc(region, src_box, dst_box);
    const auto src = random_bytes(rng, src_box.volume() * 4);
    auto a = random_bytes(rng, dst_box.volume() * 4);
    auto b = a;
    copy_box(d, 4, src.data(), a.data());
    const int64_t total = copy_desc_runs(d);
    for (int64_t r = 0; r < total; r += 3) {
      copy_box_runs(d, 4, r, std::min(total, r + 3), src.data(), b.data());
    }
    ASSERT_EQ(a, b);
  }
}

// ---------------------------------------------------------------------------
// Reductions.

constexpr DType kAllDTypes[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                                DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                                DType::kI16,    DType::kI8,     DType::kU64, DType::kU32,
                                DType::kU16,    DType::kU8,     DType::kBool};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

int64_t elem_size(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kI64:
    case DType::kU64:
      return 8;
    case DType::kF32:
    case DType::kI32:
    case DType::kU32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
    case DType::kU16:
      return 2;
    default:
      return 1;
  }
}

bool is_float(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

bool is_signed_int(DType d) {
  return d == DType::kI64 || d == DType::kI32 || d == DType::kI16 || d == DType::kI8;
}

uint64_t read_bits(const std::vector<unsigned char>& buf, int64_t i, int64_t size) {
  uint64_t v = 0;
  std::memcpy(&v, buf.data() + i * size, static_cast<size_t>(size));  // little-endian host
  return v;
}
void write_bits(std::vector<unsigned char>& buf, int64_t i, int64_t size, uint64_t v) {
  std::memcpy(buf.data() + i * size, &v, static_cast<size_t>(size));
}

// Decodes a float element to double (exact for every format).
double decode(DType d, uint64_t bits) {
  switch (d) {
    case DType::kF64:
      return std::bit_cast<double>(bits);
    case DType::kF32:
      return std::bit_cast<float>(static_cast<uint32_t>(bits));
    case DType::kF16:
      return numeric::f16_to_f32(static_cast<uint16_t>(bits));
    case DType::kBF16:
      return numeric::bf16_to_f32(static_cast<uint16_t>(bits));
    case DType::kF8E4M3:
      return numeric::f8e4m3_to_f32(static_cast<uint8_t>(bits));
    case DType::kF8E5M2:
      return numeric::f8e5m2_to_f32(static_cast<uint8_t>(bits));
    default:
      return 0;
  }
}
// Rounds an f32 (or f64 for kF64) accumulator to the element format.
uint64_t encode(DType d, double v) {
  const auto f = static_cast<float>(v);
  switch (d) {
    case DType::kF64:
      return std::bit_cast<uint64_t>(v);
    case DType::kF32:
      return std::bit_cast<uint32_t>(f);
    case DType::kF16:
      return numeric::f32_to_f16(f);
    case DType::kBF16:
      return numeric::f32_to_bf16(f);
    case DType::kF8E4M3:
      return numeric::f32_to_f8e4m3(f);
    case DType::kF8E5M2:
      return numeric::f32_to_f8e5m2(f);
    default:
      return 0;
  }
}

// A random element: raw bits, or (floats) a small multiple of 1/4 so sums
// are interesting.
uint64_t random_element(std::mt19937_64& rng, DType d) {
  const int64_t size = elem_size(d);
  const uint64_t mask = size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
  if (d == DType::kBool) return std::array<uint64_t, 4>{0, 1, 2, 255}[rng() % 4];
  if (is_float(d) && rng() % 2 == 0) {
    return encode(d, static_cast<double>(static_cast<int>(rng() % 65) - 32) / 4);
  }
  return rng() & mask;
}

// The reference: each destination element folds its contributions in order,
// written from the definitions (f32 accumulation for narrow floats and f32,
// f64 for f64, modular integers, or/and for bool), independently of
// box_copy.h.
struct RefAcc {
  DType dtype;
  ReduceOp op;
  // Floats in float (or double for f64); integers as uint64 bits.
  double f = 0;
  uint64_t u = 0;
  bool started = false;

  void add(uint64_t bits) {
    const int64_t size = elem_size(dtype);
    if (is_float(dtype)) {
      const double v = decode(dtype, bits);
      if (!started) {
        f = v;
      } else if (op == ReduceOp::kSum) {
        f = dtype == DType::kF64
                ? f + v
                : static_cast<double>(static_cast<float>(f) + static_cast<float>(v));
      } else if (std::isnan(f) || std::isnan(v)) {
        f = std::numeric_limits<double>::quiet_NaN();
      } else {
        f = op == ReduceOp::kMax ? std::max(f, v) : std::min(f, v);
      }
    } else if (dtype == DType::kBool) {
      const uint64_t b = bits != 0;
      u = !started ? b : (op == ReduceOp::kMin ? (u & b) : (u | b));
    } else {
      const int shift = 64 - 8 * static_cast<int>(size);
      // Sign- or zero-extend to 64 bits so comparisons are by value.
      const uint64_t v = is_signed_int(dtype)
                             ? static_cast<uint64_t>(static_cast<int64_t>(bits << shift) >> shift)
                             : bits;
      if (!started) {
        u = v;
      } else if (op == ReduceOp::kSum) {
        u += v;  // modulo 2^64, truncated to the width below
      } else {
        const bool greater =
            is_signed_int(dtype) ? static_cast<int64_t>(v) > static_cast<int64_t>(u) : v > u;
        if ((op == ReduceOp::kMax) == greater) u = v;
      }
    }
    started = true;
  }
  // The stored element; `identity_bits` when nothing contributed.
  uint64_t result(uint64_t identity_bits) const {
    if (!started) return identity_bits;
    if (is_float(dtype)) return encode(dtype, f);
    const int64_t size = elem_size(dtype);
    return size == 8 ? u : u & ((uint64_t{1} << (8 * size)) - 1);
  }
};

// The identity of (dtype, op) as stored element bits, from the definition.
uint64_t identity_bits(DType d, ReduceOp op) {
  if (op == ReduceOp::kSum) return 0;
  const bool max = op == ReduceOp::kMax;
  switch (d) {
    case DType::kF64:
      return encode(d, max ? -INFINITY : INFINITY);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E5M2:
      return encode(d, max ? -INFINITY : INFINITY);
    case DType::kF8E4M3:
      return max ? 0xfe : 0x7e;  // ∓448: no infinity
    case DType::kI64:
      return max ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    case DType::kI32:
      return max ? 0x80000000u : 0x7fffffffu;
    case DType::kI16:
      return max ? 0x8000u : 0x7fffu;
    case DType::kI8:
      return max ? 0x80u : 0x7fu;
    case DType::kU64:
      return max ? 0 : ~uint64_t{0};
    case DType::kU32:
      return max ? 0 : 0xffffffffu;
    case DType::kU16:
      return max ? 0 : 0xffffu;
    case DType::kU8:
      return max ? 0 : 0xffu;
    case DType::kBool:
      return max ? 0 : 1;
    case DType::kE8M0:  // never summed (a scale dtype only)
      return 0;
  }
  return 0;
}

bool same_element(DType d, uint64_t a, uint64_t b) {
  if (!is_float(d)) return a == b;
  const double x = decode(d, a);
  const double y = decode(d, b);
  return (std::isnan(x) && std::isnan(y)) || x == y;  // +0 == -0: max/min may pick either
}

// Invariant (every dtype and op, random ranks 0-4): fill_identity +
// reduce_into for each summand + store_from_acc gives, per destination
// element, the in-order fold of its contributions in the accumulation type,
// rounded once; elements no summand covers hold the identity.
TEST(Reduce, EveryDTypeAndOpMatchesPerElementFold) {
  std::mt19937_64 rng(19);
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllOps) {
      for (int iter = 0; iter < 60; ++iter) {
        const int rank = std::uniform_int_distribution<int>(0, 4)(rng);
        const Box shape = random_shape(rng, rank);
        const Box dst_box = random_box(rng, shape, false);
        const int64_t size = elem_size(dtype);
        const int64_t n = dst_box.volume();
        std::vector<RefAcc> ref(static_cast<size_t>(n), RefAcc{dtype, op});
        std::vector<unsigned char> acc(static_cast<size_t>(n * acc_size(dtype)));
        fill_identity(dtype, op, acc.data(), n);
        const int summands = std::uniform_int_distribution<int>(1, 4)(rng);
        for (int s = 0; s < summands; ++s) {
          const Box src_box = random_box(rng, shape, true);
          std::vector<unsigned char> src(static_cast<size_t>(src_box.volume() * size));
          for (int64_t i = 0; i < src_box.volume(); ++i) {
            write_bits(src, i, size, random_element(rng, dtype));
          }
          const Box region = intersect(src_box, dst_box);
          reduce_into(make_copy_desc(region, src_box, dst_box), dtype, op, src.data(), acc.data());
          for_each_index(region, [&](const std::array<int64_t, kMaxRank>& idx) {
            ref[static_cast<size_t>(offset_in(dst_box, idx))].add(
                read_bits(src, offset_in(src_box, idx), size));
          });
        }
        std::vector<unsigned char> out(static_cast<size_t>(n * size));
        store_from_acc(dtype, acc.data(), out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t want = ref[static_cast<size_t>(i)].result(identity_bits(dtype, op));
          const uint64_t got = read_bits(out, i, size);
          ASSERT_TRUE(same_element(dtype, got, want))
              << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << i << ": got "
              << got << " want " << want;
        }
      }
    }
  }
}

// Invariant: fill_identity then store_from_acc gives the identity of each
// (dtype, op): 0, the lowest value (-inf; -448 for f8e4m3), the highest.
TEST(Reduce, IdentityStoresAsTheLowestOrHighestValue) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllOps) {
      std::vector<unsigned char> acc(static_cast<size_t>(acc_size(dtype)) * 3);
      std::vector<unsigned char> out(static_cast<size_t>(elem_size(dtype)) * 3, 0xaa);
      fill_identity(dtype, op, acc.data(), 3);
      store_from_acc(dtype, acc.data(), out.data(), 3);
      for (int64_t i = 0; i < 3; ++i) {
        EXPECT_EQ(read_bits(out, i, elem_size(dtype)), identity_bits(dtype, op))
            << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
  }
}

// Invariant: bf16 sums accumulate in f32 and round once. 1 + 2^-8 + 2^-8 is
// 1 + 2^-7 (representable); rounding after each add would give 1.
TEST(Reduce, Bf16SumRoundsOnce) {
  const uint16_t one = numeric::f32_to_bf16(1.0f);
  const uint16_t tiny = numeric::f32_to_bf16(std::ldexp(1.0f, -8));
  const Box box;  // one element
  const CopyDesc d = make_copy_desc(box, box, box);
  float acc = 0;
  fill_identity(DType::kBF16, ReduceOp::kSum, &acc, 1);
  for (uint16_t v : {one, tiny, tiny}) reduce_into(d, DType::kBF16, ReduceOp::kSum, &v, &acc);
  uint16_t out = 0;
  store_from_acc(DType::kBF16, &acc, &out, 1);
  EXPECT_EQ(numeric::bf16_to_f32(out), 1.0f + std::ldexp(1.0f, -7));
}

template <class T>
T reduce_two(DType dtype, ReduceOp op, T a, T b) {
  const Box box;
  const CopyDesc d = make_copy_desc(box, box, box);
  std::array<unsigned char, 8> acc{};
  fill_identity(dtype, op, acc.data(), 1);
  reduce_into(d, dtype, op, &a, acc.data());
  reduce_into(d, dtype, op, &b, acc.data());
  T out{};
  store_from_acc(dtype, acc.data(), &out, 1);
  return out;
}

// Invariant: integer sums wrap modulo 2^bits (no UB, no saturation).
TEST(Reduce, IntegerSumsWrap) {
  EXPECT_EQ(reduce_two<int8_t>(DType::kI8, ReduceOp::kSum, 100, 100), -56);
  EXPECT_EQ(reduce_two<uint8_t>(DType::kU8, ReduceOp::kSum, 200, 100), 44);
  EXPECT_EQ(reduce_two<int16_t>(DType::kI16, ReduceOp::kSum, INT16_MIN, -1), INT16_MAX);
  EXPECT_EQ(reduce_two<int32_t>(DType::kI32, ReduceOp::kSum, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(reduce_two<int64_t>(DType::kI64, ReduceOp::kSum, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(reduce_two<uint64_t>(DType::kU64, ReduceOp::kSum, UINT64_MAX, 2), 1u);
}

// Invariant: bool sum and max are "or", min is "and"; any non-zero byte is
// true and results are 0 or 1.
TEST(Reduce, BoolOps) {
  EXPECT_EQ(reduce_two<uint8_t>(DType::kBool, ReduceOp::kSum, 0, 7), 1);
  EXPECT_EQ(reduce_two<uint8_t>(DType::kBool, ReduceOp::kSum, 0, 0), 0);
  EXPECT_EQ(reduce_two<uint8_t>(DType::kBool, ReduceOp::kMax, 2, 0), 1);
  EXPECT_EQ(reduce_two<uint8_t>(DType::kBool, ReduceOp::kMin, 1, 0), 0);
  EXPECT_EQ(reduce_two<uint8_t>(DType::kBool, ReduceOp::kMin, 9, 255), 1);
}

// Invariant: float max and min return NaN when any contribution is NaN,
// whatever its position.
TEST(Reduce, FloatMaxMinPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    EXPECT_TRUE(std::isnan(reduce_two<float>(DType::kF32, op, nan, 1.0f)));
    EXPECT_TRUE(std::isnan(reduce_two<float>(DType::kF32, op, 1.0f, nan)));
    EXPECT_TRUE(std::isnan(reduce_two<double>(DType::kF64, op, 1.0, std::nan(""))));
    const uint16_t h = numeric::f32_to_f16(nan);
    EXPECT_TRUE(std::isnan(
        numeric::f16_to_f32(reduce_two<uint16_t>(DType::kF16, op, numeric::f32_to_f16(2.0f), h))));
  }
  EXPECT_EQ(reduce_two<float>(DType::kF32, ReduceOp::kMax, -3.0f, -5.0f), -3.0f);
  EXPECT_EQ(reduce_two<float>(DType::kF32, ReduceOp::kMin, -3.0f, -5.0f), -5.0f);
}

// Invariant: load_into_acc converts each element exactly into the
// accumulation type at the destination's strides.
TEST(Reduce, LoadIntoAccConvertsExactly) {
  const Box src = make_box({{0, 2}, {0, 3}});
  const Box region = make_box({{0, 2}, {1, 3}});
  std::vector<uint16_t> h(6);
  for (int i = 0; i < 6; ++i) h[i] = numeric::f32_to_f16(0.5f * static_cast<float>(i) - 1);
  std::vector<float> acc(4, -99.0f);
  load_into_acc(make_copy_desc(region, src, region), DType::kF16, h.data(), acc.data());
  EXPECT_EQ(acc, (std::vector<float>{-0.5f, 0.0f, 1.0f, 1.5f}));
  EXPECT_EQ(acc_size(DType::kF16), 4);
  EXPECT_EQ(acc_size(DType::kF64), 8);
  EXPECT_EQ(acc_size(DType::kI8), 1);
  EXPECT_EQ(acc_size(static_cast<DType>(0)), 0);
  EXPECT_TRUE(acc_is_elem(DType::kF32));
  EXPECT_FALSE(acc_is_elem(DType::kBF16));
}

// Errors: an invalid dtype or op value is kInvalidArgument naming it.
TEST(Reduce, InvalidDTypeOrOpIsInvalidArgument) {
  float acc = 0;
  try {
    fill_identity(static_cast<DType>(99), ReduceOp::kSum, &acc, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("dtype"), std::string::npos);
  }
  try {
    fill_identity(DType::kF32, static_cast<ReduceOp>(0), &acc, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("reduce op"), std::string::npos);
  }
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// Invariant: the inline short-run copies (runs of 16 B to 512 B, rank 2
// loops and deeper odometers) match the per-element reference for every
// element size and run lengths around the 16-, 64- and 512-byte edges,
// whole and split into run ranges.
TEST(CopyBox, ShortRunPathsMatchNaiveReference) {
  std::mt19937_64 rng(17);
  for (int64_t elem : {1, 2, 4, 8}) {
    for (int64_t run_bytes : {16, 17, 40, 63, 64, 100, 320, 512, 520, 1440, 2048}) {
      const int64_t run = (run_bytes + elem - 1) / elem;
      for (int rank : {2, 3}) {
        SCOPED_TRACE("elem " + std::to_string(elem) + " run " + std::to_string(run) + " rank " +
                     std::to_string(rank));
        Box region = rank == 2 ? make_box({{1, 12}, {3, 3 + run}})
                               : make_box({{0, 3}, {2, 6}, {3, 3 + run}});
        Box src_box = rank == 2 ? make_box({{0, 13}, {0, 2 * run + 5}})
                                : make_box({{0, 3}, {0, 7}, {0, run + 9}});
        Box dst_box = rank == 2 ? make_box({{1, 12}, {1, run + 4}})
                                : make_box({{0, 4}, {2, 6}, {3, 3 + run}});
        const CopyDesc d = make_copy_desc(region, src_box, dst_box);
        ASSERT_GE(d.rank, 2);
        const auto src = random_bytes(rng, src_box.volume() * elem);
        auto got = random_bytes(rng, dst_box.volume() * elem);
        auto want = got;
        for_each_index(region, [&](const std::array<int64_t, kMaxRank>& idx) {
          std::memcpy(want.data() + offset_in(dst_box, idx) * elem,
                      src.data() + offset_in(src_box, idx) * elem, static_cast<size_t>(elem));
        });
        auto split = got;
        copy_box(d, elem, src.data(), got.data());
        ASSERT_EQ(got, want);
        const int64_t runs = copy_desc_runs(d);
        copy_box_runs(d, elem, 0, runs / 3, src.data(), split.data());
        copy_box_runs(d, elem, runs / 3, runs, src.data(), split.data());
        ASSERT_EQ(split, want);
      }
    }
  }
}

// The instruction-set levels this machine can run, lowest first: tests run
// every kernel path the CPU has (limit_host_isa caps the level).
std::vector<HostIsa> isa_levels() {
  std::vector<HostIsa> out;
  const HostIsa top = host_isa();
  for (HostIsa l : {HostIsa::kBaseline, HostIsa::kAvx2, HostIsa::kAvx512}) {
    if (static_cast<int32_t>(l) <= static_cast<int32_t>(top)) out.push_back(l);
  }
  return out;
}

// Restores the level cap when a test ends.
struct IsaCap {
  HostIsa previous;
  explicit IsaCap(HostIsa cap) : previous(limit_host_isa(cap)) {}
  ~IsaCap() { limit_host_isa(previous); }
};

// Invariant: limit_host_isa caps host_isa() and returns the previous cap.
TEST(CopyBox, HostIsaCapLowersTheLevelUsed) {
  const HostIsa top = host_isa();
  {
    IsaCap cap(HostIsa::kBaseline);
    EXPECT_EQ(host_isa(), HostIsa::kBaseline);
    EXPECT_EQ(limit_host_isa(HostIsa::kAvx2), HostIsa::kBaseline);
    EXPECT_LE(static_cast<int32_t>(host_isa()), static_cast<int32_t>(HostIsa::kAvx2));
  }
  EXPECT_EQ(host_isa(), top);
}

// Invariant: streamed copies (non-temporal stores, at every instruction-set
// level the CPU has) write exactly what the per-element reference writes:
// gathers into abutting destination runs, scatters into strided ones, runs
// of 16 B to 2 KiB around the 64- and 256-byte edges, destinations aligned
// and not, ranks 1-3, whole and split into run ranges starting mid-row; the
// copies that cannot stream fall back to plain stores.
TEST(CopyBox, StreamingCopiesMatchNaiveReference) {
  std::mt19937_64 rng(23);
  for (HostIsa level : isa_levels()) {
    IsaCap cap(level);
    for (int64_t elem : {1, 2, 4, 8}) {
      for (int64_t run_bytes : {16, 48, 64, 80, 240, 256, 320, 1440, 2048}) {
        const int64_t run = run_bytes / elem;
        for (int shape = 0; shape < 4; ++shape) {
          for (int64_t misalign : {0, 16, 4}) {
            SCOPED_TRACE("isa " + std::to_string(static_cast<int>(level)) + " elem " +
                         std::to_string(elem) + " run " + std::to_string(run_bytes) + " shape " +
                         std::to_string(shape) + " misalign " + std::to_string(misalign));
            Box region;
            Box src_box;
            Box dst_box;
            switch (shape) {
              case 0:  // gather: strided source, destination runs abut
                region = make_box({{0, 9}, {run, 2 * run}});
                src_box = make_box({{0, 9}, {0, 4 * run}});
                dst_box = region;
                break;
              case 1:  // scatter: contiguous source, strided destination runs
                region = make_box({{0, 9}, {run, 2 * run}});
                src_box = region;
                dst_box = make_box({{0, 9}, {0, 3 * run}});
                break;
              case 2:  // rank 3, both sides strided
                region = make_box({{1, 4}, {0, 5}, {run, 2 * run}});
                src_box = make_box({{0, 4}, {0, 6}, {0, 3 * run}});
                dst_box = make_box({{1, 5}, {0, 5}, {0, 2 * run}});
                break;
              default:  // rank 1: one contiguous run
                region = make_box({{3, 3 + 5 * run}});
                src_box = make_box({{0, 8 * run}});
                dst_box = make_box({{1, 7 * run}});
            }
            const CopyDesc d = make_copy_desc(region, src_box, dst_box);
            const auto src = random_bytes(rng, src_box.volume() * elem);
            // 64-byte aligned storage, the destination `misalign` bytes in.
            const int64_t dst_bytes = dst_box.volume() * elem;
            std::vector<unsigned char> store(static_cast<size_t>(dst_bytes + 128));
            const auto base = reinterpret_cast<uintptr_t>(store.data());
            unsigned char* dst = store.data() + ((64 - base % 64) % 64) + misalign;
            const auto init = random_bytes(rng, dst_bytes);
            std::vector<unsigned char> want = init;
            for_each_index(region, [&](const std::array<int64_t, kMaxRank>& idx) {
              std::memcpy(want.data() + offset_in(dst_box, idx) * elem,
                          src.data() + offset_in(src_box, idx) * elem, static_cast<size_t>(elem));
            });
            std::memcpy(dst, init.data(), static_cast<size_t>(dst_bytes));
            copy_box(d, elem, src.data(), dst, /*streaming=*/true);
            fence_streamed_stores();
            ASSERT_EQ(std::vector<unsigned char>(dst, dst + dst_bytes), want);
            std::memcpy(dst, init.data(), static_cast<size_t>(dst_bytes));
            const int64_t runs = copy_desc_runs(d);
            copy_box_runs(d, elem, 0, runs / 3, src.data(), dst, true);
            copy_box_runs(d, elem, runs / 3, runs, src.data(), dst, true);
            fence_streamed_stores();
            ASSERT_EQ(std::vector<unsigned char>(dst, dst + dst_bytes), want);
          }
        }
      }
    }
  }
}

// Invariant: copy_boxes_interleaved (column slices of the same source
// rows, each into its own destination, run r of every copy before run r +
// 1) writes exactly what the per-element reference writes, at every
// instruction-set level the CPU has, streamed or not: element sizes 1-8,
// runs of 8 B to 1.4 KiB of even and uneven widths (abutting destination
// runs, whole 16-byte units or not, and strided ones), destinations aligned
// and not, ranks 2 and 3, 1 to 33 copies, whole and split into run ranges
// that start mid-row; nothing outside the copies' regions changes.
TEST(CopyBox, InterleavedCopiesMatchNaiveReference) {
  std::mt19937_64 rng(29);
  for (HostIsa level : isa_levels()) {
    IsaCap cap(level);
    for (int64_t elem : {1, 2, 4, 8}) {
      for (int64_t run_bytes : {8, 16, 40, 64, 80, 320, 516, 720, 1440}) {
        for (int n : {1, 2, 5, 33}) {
          for (int shape = 0; shape < 4; ++shape) {
            // Shapes 0 and 3: abutting destination runs, aligned or 4 bytes
            // off; 1 (rank 3) and 2: strided destination runs.
            const int64_t misalign = shape == 0 ? 0 : shape == 1 ? 16 : 4;
            SCOPED_TRACE("isa " + std::to_string(static_cast<int>(level)) + " elem " +
                         std::to_string(elem) + " run " + std::to_string(run_bytes) + " n " +
                         std::to_string(n) + " shape " + std::to_string(shape));
            const int64_t width = std::max<int64_t>(1, run_bytes / elem);
            // Slice c: columns [col[c], col[c] + w[c]) of the source rows;
            // every third one element narrower (uneven splits).
            std::vector<int64_t> col;
            std::vector<int64_t> w;
            int64_t cols = 1;  // a leading column no copy reads
            for (int c = 0; c < n; ++c) {
              col.push_back(cols);
              w.push_back(c % 3 == 2 && width > 1 ? width - 1 : width);
              cols += w.back();
            }
            const bool rank3 = shape == 1;
            const Box src_box = rank3 ? make_box({{0, 3}, {0, 4}, {0, cols + 2}})
                                      : make_box({{0, 6}, {0, cols + 2}});
            const auto src = random_bytes(rng, src_box.volume() * elem);
            std::vector<CopyDesc> descs;
            std::vector<Box> regions;
            std::vector<Box> dst_boxes;
            std::vector<std::vector<unsigned char>> store;
            std::vector<unsigned char*> dst;
            std::vector<std::vector<unsigned char>> init;
            std::vector<std::vector<unsigned char>> want;
            for (int c = 0; c < n; ++c) {
              const Box region = rank3 ? make_box({{1, 3}, {0, 3}, {col[c], col[c] + w[c]}})
                                       : make_box({{1, 6}, {col[c], col[c] + w[c]}});
              Box dst_box = region;
              if (shape == 1 || shape == 2) {
                dst_box.lo[region.rank - 1] -= 1;
                dst_box.hi[region.rank - 1] += 2;
              }
              const int64_t bytes = dst_box.volume() * elem;
              store.emplace_back(static_cast<size_t>(bytes + 128));
              const auto base = reinterpret_cast<uintptr_t>(store.back().data());
              dst.push_back(store.back().data() + ((64 - base % 64) % 64) + misalign);
              init.push_back(random_bytes(rng, bytes));
              want.push_back(init.back());
              for_each_index(region, [&](const std::array<int64_t, kMaxRank>& idx) {
                std::memcpy(want.back().data() + offset_in(dst_box, idx) * elem,
                            src.data() + offset_in(src_box, idx) * elem, static_cast<size_t>(elem));
              });
              descs.push_back(make_copy_desc(region, src_box, dst_box));
              ASSERT_TRUE(copy_descs_interleavable(descs[0], descs.back()));
              regions.push_back(region);
              dst_boxes.push_back(dst_box);
            }
            std::vector<const void*> srcs(static_cast<size_t>(n), src.data());
            std::vector<void*> dsts(dst.begin(), dst.end());
            const int64_t runs = copy_desc_runs(descs[0]);
            for (bool streaming : {false, true}) {
              for (int64_t cut : {int64_t{0}, runs / 2 + 1}) {
                for (int c = 0; c < n; ++c) {
                  std::memcpy(dst[c], init[c].data(), init[c].size());
                }
                copy_boxes_interleaved(descs.data(), n, elem, srcs.data(), dsts.data(), 0, cut,
                                       streaming);
                copy_boxes_interleaved(descs.data(), n, elem, srcs.data(), dsts.data(), cut, runs,
                                       streaming);
                fence_streamed_stores();
                for (int c = 0; c < n; ++c) {
                  ASSERT_EQ(std::vector<unsigned char>(dst[c], dst[c] + init[c].size()), want[c])
                      << "copy " << c << (streaming ? " streamed" : "") << ", cut at " << cut;
                }
              }
            }
          }
        }
      }
    }
  }
}

// Invariant: copies interleave only with copies of the same rank (2 or
// more) and outer extents; copy_boxes_interleaved refuses others, and more
// than kMaxInterleavedCopies, with kInternal.
TEST(CopyBox, InterleavingNeedsTheSameRuns) {
  const Box src_box = make_box({{0, 4}, {0, 20}});
  const CopyDesc a = make_copy_desc(make_box({{0, 4}, {0, 5}}), src_box, src_box);
  const CopyDesc b = make_copy_desc(make_box({{0, 4}, {5, 12}}), src_box, src_box);
  const CopyDesc fewer_rows = make_copy_desc(make_box({{0, 3}, {5, 12}}), src_box, src_box);
  const CopyDesc whole = make_copy_desc(src_box, src_box, src_box);
  EXPECT_TRUE(copy_descs_interleavable(a, b));
  EXPECT_FALSE(copy_descs_interleavable(a, fewer_rows));
  EXPECT_FALSE(copy_descs_interleavable(whole, whole)) << "one run, rank 1";
  std::vector<unsigned char> src(80), dst(80);
  const CopyDesc descs[2] = {a, fewer_rows};
  const void* srcs[2] = {src.data(), src.data()};
  void* dsts[2] = {dst.data(), dst.data()};
  for (int n : {2, kMaxInterleavedCopies + 1, 0}) {
    try {
      copy_boxes_interleaved(descs, n, 4, srcs, dsts, 0, 4, false);
      ADD_FAILURE() << n << " copies accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInternal);
    }
  }
}

// Invariant: sum_streams gives bit for bit what the identity fill, one
// reduce_into per stream in stream order and store_from_acc give (f32, bf16
// and f16: round once, ties to even, NaN stays NaN), for block-edge lengths
// and at every instruction-set level the CPU has; other dtypes decline and
// write nothing.
TEST(Reduce, SumStreamsMatchesStreamByStreamFold) {
  std::mt19937_64 rng(19);
  for (HostIsa level : isa_levels()) {
    IsaCap cap(level);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      const int64_t elem = dtype_size(dtype);
      for (int k : {1, 2, 3, 8}) {
        for (int64_t n : {1, 7, 8, 31, 32, 33, 255, 256, 257, 1000}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " k " + std::to_string(k) + " n " +
                       std::to_string(n) + " isa " + std::to_string(static_cast<int>(level)));
          std::vector<std::vector<unsigned char>> streams;
          std::vector<const void*> ptrs;
          for (int j = 0; j < k; ++j) {
            streams.push_back(random_bytes(rng, n * elem));
            for (int64_t i = 0; i < n; ++i) {
              // NaN only in the first stream: with two NaNs the payload kept
              // depends on the operand order the compiler chose.
              unsigned char* p = streams.back().data() + i * elem + elem - 1;
              const unsigned char exp_bits = dtype == DType::kF16 ? 0x7c : 0x7f;
              if (j > 0 && (*p & exp_bits) == exp_bits) *p &= 0xbf;
              // Many small values, so that sums round (ties included).
              if (rng() % 2) *p = static_cast<unsigned char>((*p & 0x80) | 0x3f);
            }
            ptrs.push_back(streams.back().data());
          }
          std::vector<unsigned char> acc(static_cast<size_t>(n * acc_size(dtype)));
          fill_identity(dtype, ReduceOp::kSum, acc.data(), n);
          Box b = make_box({{0, n}});
          for (int j = 0; j < k; ++j) {
            reduce_into(make_copy_desc(b, b, b), dtype, ReduceOp::kSum, ptrs[j], acc.data());
          }
          std::vector<unsigned char> want(static_cast<size_t>(n * elem));
          store_from_acc(dtype, acc.data(), want.data(), n);
          std::vector<unsigned char> got(static_cast<size_t>(n * elem), 0x5a);
          ASSERT_TRUE(sum_streams(dtype, ptrs.data(), k, got.data(), n));
          ASSERT_EQ(got, want);
          // Streamed (non-temporal stores; malloc's 16-byte alignment).
          std::vector<unsigned char> streamed(static_cast<size_t>(n * elem), 0x5a);
          ASSERT_TRUE(sum_streams(dtype, ptrs.data(), k, streamed.data(), n, true));
          fence_streamed_stores();
          ASSERT_EQ(streamed, want);
        }
      }
    }
  }
  std::vector<unsigned char> one(2, 1);
  std::vector<unsigned char> out(2, 0x5a);
  const void* p = one.data();
  EXPECT_FALSE(sum_streams(DType::kF8E4M3, &p, 1, out.data(), 1));
  EXPECT_EQ(out, std::vector<unsigned char>(2, 0x5a));
}

}  // namespace
}  // namespace reshard
