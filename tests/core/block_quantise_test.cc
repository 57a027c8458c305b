// The block-scale quantiser (reshard/block_scales.h quantise_shard,
// quantise_part, quantise_parts; core/src/layout/block_quantise.cc) against
// the reference written from the definition (block_scales_reference.h):
// every bf16 and f16 bit pattern, random f32 patterns, parts quantised
// separately, and the engine's scratch (exec/engine/scaled_sources.h)
// reused by a cached schedule's next execution and shared by threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/block_scales_reference.h"
#include "reshard/block_scales.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/spec.h"

namespace reshard {
namespace {

using testing::quantise;
using testing::Reference;
using testing::tensor;

Box whole(const std::vector<int64_t>& shape) {
  Box b;
  b.rank = static_cast<int>(shape.size());
  for (int d = 0; d < b.rank; ++d) b.hi[d] = shape[static_cast<size_t>(d)];
  return b;
}

// Element bits of `x` (patterns in uint32) stored as `from` elements.
std::vector<std::byte> pack(const std::vector<uint32_t>& x, DType from) {
  const size_t es = static_cast<size_t>(dtype_size(from));
  std::vector<std::byte> out(x.size() * es);
  for (size_t k = 0; k < x.size(); ++k) std::memcpy(&out[k * es], &x[k], es);
  return out;
}

// Rows of 65536 elements: row 0 every 16-bit pattern; the other rows the
// same with every finite |x| above a cap replaced by zero, so that each
// block (a run of patterns) has an amax of its own: blocks where x / s
// lands on fp8 normals, subnormals, ties and underflow.
std::vector<uint32_t> every_pattern(DType from, int64_t rows) {
  const float caps[] = {0, 1.0f, 3.0f, 0x1p-12f, 0x1p-20f, 1e-38f};
  std::vector<uint32_t> x(static_cast<size_t>(rows * 65536));
  for (int64_t r = 0; r < rows; ++r)
    for (uint32_t p = 0; p < 65536; ++p) {
      const float v = testing::to_f32(from, p);
      const float cap = caps[r % 6];
      x[static_cast<size_t>(r * 65536 + p)] = cap > 0 && std::fabs(v) > cap ? 0u : p;
    }
  return x;
}

// Random f32 patterns, a third of them of a magnitude near 1 (so that
// blocks are not ruled by one huge amax), with NaN and infinities.
std::vector<uint32_t> random_f32(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> x(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (k % 3 == 0) u = (u & 0x807fffffu) | (static_cast<uint32_t>(120 + rng() % 14) << 23);
    if (k % 997 == 0) u = 0x7fc00000u | (u & 0x80000000u);
    if (k % 991 == 0) u = 0x7f800000u | (u & 0x80000000u);
    x[static_cast<size_t>(k)] = u;
  }
  return x;
}

// The shard quantised whole, then part by part (parts of about `elements`,
// last part first); both must equal the reference.
void expect_reference(DType from, DType to, const std::vector<uint32_t>& x, int64_t rows,
                      int64_t cols, int64_t br, int64_t bc, int64_t elements) {
  SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
  const TensorSpec t = tensor(from, to, {rows, cols}, {br, bc});
  const Box box = whole(t.shape);
  const Reference ref = quantise(x, from, to, rows, cols, br, bc);
  const std::vector<std::byte> in = pack(x, from);
  std::vector<std::byte> out(in.size(), std::byte{0x55});
  std::vector<float> scales(ref.scales.size(), -1.0f);
  quantise_shard(t, DType::kF32, box, in.data(), scales.data(), out.data());
  const size_t es = static_cast<size_t>(dtype_size(from));
  int64_t wrong = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    // q widened back to the source dtype, as the reference's cast does.
    const uint32_t want = cast_bits(to, from, ref.q[k]);
    uint32_t got = 0;
    std::memcpy(&got, &out[k * es], es);
    if (got != want && wrong++ < 5)
      ADD_FAILURE() << "element " << k << " x " << std::hex << x[k] << ": got " << got << ", want "
                    << want;
  }
  EXPECT_EQ(wrong, 0);
  for (size_t b = 0; b < scales.size(); ++b)
    ASSERT_EQ(numeric::f32_bits(scales[b]), numeric::f32_bits(ref.scales[b])) << "block " << b;
  std::vector<std::byte> by_parts(in.size(), std::byte{0x55});
  std::vector<float> part_scales(ref.scales.size(), -1.0f);
  std::vector<Box> parts = quantise_parts(box, t.scale_block, elements);
  EXPECT_GT(parts.size(), 1u);
  std::reverse(parts.begin(), parts.end());
  for (const Box& p : parts)
    quantise_part(t, DType::kF32, box, p, in.data(), part_scales.data(), by_parts.data());
  EXPECT_EQ(by_parts, out);
  EXPECT_EQ(part_scales, scales);
}

// Invariant: for every bf16 and f16 bit pattern, and random f32 patterns
// (NaN and infinities among them), into f8e4m3 and f8e5m2, the quantiser's
// scales and q (widened back to the source dtype) equal the reference's,
// bit for bit, whether a shard is quantised whole or part by part.
TEST(BlockQuantise, EveryPatternMatchesTheReference) {
  for (DType from : {DType::kBF16, DType::kF16})
    for (DType to : {DType::kF8E4M3, DType::kF8E5M2})
      expect_reference(from, to, every_pattern(from, 6), 6, 65536, 2, 8192, 40000);
  for (DType to : {DType::kF8E4M3, DType::kF8E5M2})
    expect_reference(DType::kF32, to, random_f32(300 * 1000, 5), 300, 1000, 128, 96, 20000);
}

// Invariant: quantise_parts tiles a block-aligned box (rank 1 to 3, any
// blocks, short edge blocks) with disjoint parts of whole blocks, none
// above the target unless it is one block of dim 0 (by one block of the
// last dim, when that dim is split), and quantising the parts in any order
// gives the shard quantised whole.
TEST(BlockQuantise, PartsTileTheShardInWholeBlocks) {
  std::mt19937_64 rng(41);
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int c = 0; c < 60; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int rank = static_cast<int>(uni(1, 3));
    std::vector<int64_t> shape, block;
    Box box;
    box.rank = rank;
    for (int d = 0; d < rank; ++d) {
      block.push_back(uni(1, 9));
      shape.push_back(uni(1, rank == 1 ? 400 : 30));
      const int64_t nb = (shape.back() + block.back() - 1) / block.back();
      box.lo[d] = uni(0, nb - 1) * block.back();
      const int64_t end_block = uni(box.lo[d] / block.back() + 1, nb);
      box.hi[d] = std::min(shape.back(), end_block * block.back());
    }
    const int64_t target = uni(1, 300);
    const std::vector<Box> parts = quantise_parts(box, block, target);
    std::vector<int> covered(static_cast<size_t>(box.volume()), 0);
    for (const Box& p : parts) {
      for (int d = 0; d < rank; ++d) {
        ASSERT_GE(p.lo[d], box.lo[d]);
        ASSERT_LE(p.hi[d], box.hi[d]);
        ASSERT_EQ(p.lo[d] % block[static_cast<size_t>(d)], 0) << "dim " << d;
        ASSERT_TRUE(p.hi[d] == box.hi[d] || p.hi[d] % block[static_cast<size_t>(d)] == 0);
      }
      // Above the target only as one block of dim 0, the last dim then
      // one block wide when it was split.
      if (p.volume() > target) {
        EXPECT_LE(p.extent(0), block[0]);
        if (rank > 1 && p.extent(rank - 1) < box.extent(rank - 1)) {
          EXPECT_LE(p.extent(rank - 1), block[static_cast<size_t>(rank - 1)]);
        }
      }
      // Mark the part's elements (row-major within the box).
      std::array<int64_t, kMaxRank> idx = p.lo;
      for (int64_t k = 0; k < p.volume(); ++k) {
        int64_t off = 0;
        for (int d = 0; d < rank; ++d) off = off * box.extent(d) + (idx[d] - box.lo[d]);
        ++covered[static_cast<size_t>(off)];
        for (int d = rank - 1; d >= 0; --d) {
          if (++idx[d] < p.hi[d]) break;
          idx[d] = p.lo[d];
        }
      }
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
    // Quantised by parts, in a shuffled order: the whole shard's result.
    TensorSpec t = tensor(DType::kBF16, DType::kF8E4M3, shape, block);
    std::vector<uint16_t> in(static_cast<size_t>(box.volume()));
    for (uint16_t& v : in) v = static_cast<uint16_t>(rng());
    const int64_t nblocks = blocks_touched(box, block).volume();
    std::vector<uint16_t> out(in.size()), by_parts(in.size());
    std::vector<float> s(static_cast<size_t>(nblocks)), ps(static_cast<size_t>(nblocks));
    quantise_shard(t, DType::kF32, box, in.data(), s.data(), out.data());
    std::vector<Box> shuffled = parts;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (const Box& p : shuffled)
      quantise_part(t, DType::kF32, box, p, in.data(), ps.data(), by_parts.data());
    EXPECT_EQ(by_parts, out);
    EXPECT_EQ(std::memcmp(ps.data(), s.data(), s.size() * 4), 0);
  }
}

// Invariant: a cached schedule's second execution quantises the sources it
// is given (its scratch, kept from the first, holds nothing stale): with
// every source sign flipped, every q flips its sign and the scales stay.
// The shards (4 MiB) are quantised on 3 threads; the first execution
// meets the oracle.
TEST(BlockQuantise, CachedScratchQuantisesEachExecutionsSources) {
  const Spec s = parse_spec(R"({
    "meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1]},
               "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3]}},
    "tensors": [{"name": "w", "shape": [1024, 2304], "dtype": "bf16",
                 "src": {"mesh": "a", "spec": ["x", null]},
                 "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "f8e4m3",
                         "scales": {"name": "w.scale", "block": [128, 128]}}}]})");
  const Plan plan = make_plan(s.input);
  OracleBuffers buf = fill_sources(plan);
  Engine engine(make_local_transport());
  ExecuteOptions options;
  options.agreement = ExecuteOptions::Agreement::kSkip;
  options.threads = 3;
  EXPECT_FALSE(engine.execute(plan, kAllProcesses, buf.views(), options).schedule_cached);
  const OracleReport report = check_destinations(plan, buf);
  ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches";
  const auto first = buf.dst;
  for (auto& shard : buf.src[0])
    for (size_t k = 1; k < shard.size(); k += 2) shard[k] ^= std::byte{0x80};  // bf16 sign bits
  EXPECT_TRUE(engine.execute(plan, kAllProcesses, buf.views(), options).schedule_cached);
  for (size_t e = 0; e < first[0].size(); ++e) {
    std::vector<std::byte> flipped = first[0][e];
    for (std::byte& b : flipped) b ^= std::byte{0x80};
    EXPECT_EQ(buf.dst[0][e], flipped) << "values, entry " << e;
  }
  EXPECT_EQ(buf.dst[1], first[1]) << "scales";
}

}  // namespace
}  // namespace reshard
