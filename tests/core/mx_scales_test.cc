// MXFP8 block scales (docs/spec.md "Block scales", reshard/block_scales.h):
// e8m0 scales over 32 consecutive elements of the last dim, OCP MX v1.0.
// Checked against blocks computed by hand, against the reference of
// tests/core/block_scales_reference.h (frexp and double arithmetic, not the
// library's bit manipulation) over every bf16 and f16 pattern and random
// f32 blocks, on random layouts with NaN, infinities and subnormals through
// the host executor, against the oracle across in-process ranks, and the
// spec and plan-format refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/block_scales_reference.h"
#include "core/spec_refusal.h"
#include "core/thread_transport.h"
#include "reshard/block_scales.h"
#include "reshard/cast.h"
#include "reshard/exec.h"
#include "reshard/numeric.h"
#include "reshard/oracle.h"
#include "reshard/plan_generated.h"
#include "reshard/spec.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

using testing::cut;
using testing::MxReference;
using testing::quantise_mx;

// A rank-2 tensor rows x cols of `from` cast to `to` with e8m0 scales,
// source and destination on one device each.
TensorSpec mx_tensor(DType from, DType to, int64_t rows, int64_t cols) {
  std::vector<TensorSpec> tensors(1);
  TensorSpec& t = tensors[0];
  t.name = "w";
  t.shape = {rows, cols};
  t.dtype = from;
  t.dst_dtype = to;
  Box full;
  full.rank = 2;
  full.hi[0] = rows;
  full.hi[1] = cols;
  t.src = Layout::from_boxes(t.shape, {{0, 0, full}}, 1, ReduceOp::kSum, "src");
  t.dst = Layout::from_boxes(t.shape, {{1, 0, full}}, 1, ReduceOp::kSum, "dst");
  add_block_scales(tensors, 0, "w.scale", {1, kMxBlock}, "scales", DType::kE8M0);
  return tensors[0];
}

// quantise_shard over the whole array: the scales and each q as fp8 bits
// (the quantiser's widened q cast to the destination dtype).
MxReference run_quantiser(const std::vector<uint32_t>& x, DType from, DType to, int64_t rows,
                          int64_t cols) {
  const TensorSpec t = mx_tensor(from, to, rows, cols);
  EXPECT_EQ(t.scale_dtype, DType::kE8M0);
  const int64_t es = dtype_size(from);
  std::vector<unsigned char> in(x.size() * static_cast<size_t>(es)), out(in.size());
  for (size_t k = 0; k < x.size(); ++k) std::memcpy(&in[k * static_cast<size_t>(es)], &x[k], es);
  MxReference r;
  r.scales.assign(static_cast<size_t>(rows * ((cols + 31) / 32)), 0xAA);
  quantise_shard(t, DType::kE8M0, t.src.box(0), in.data(), r.scales.data(), out.data());
  r.q.resize(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    uint32_t bits = 0;
    std::memcpy(&bits, &out[k * static_cast<size_t>(es)], es);
    r.q[k] = static_cast<uint8_t>(cast_bits(from, to, bits));
  }
  return r;
}

// Invariant: the scale rule and the saturating q, on blocks computed by
// hand: amax 1 (e = 0 - 8, bits 119; 0.3 · 2^8 = 76.8 rounds to 80), amax
// 500 (e = 0, bits 127; 500 saturates to 448, where the plain cast gives
// NaN), a short edge block of zeros (bits 0, q keeps -0's sign), NaN and
// infinity (bits 255, every q NaN) and subnormal f32 (e clamped to -127:
// 2^-130 · 2^127 = 2^-3).
TEST(MxScales, HandComputedBlocks) {
  const float tiny = std::ldexp(1.0f, -130), tinier = -std::ldexp(1.0f, -133);
  std::vector<float> v(140, 0.0f);
  v[0] = 1.0f, v[1] = 0.3f, v[2] = -1.0f;  // row 0, block 0
  v[32] = 500.0f, v[33] = 3.0f;            // block 1
  v[65] = -0.0f;                           // block 2 (6 elements)
  v[70] = NAN, v[71] = 2.0f;               // row 1, block 0
  v[102] = INFINITY, v[103] = 1.0f;        // block 1
  v[134] = tiny, v[135] = tinier;          // block 2
  std::vector<uint32_t> x(v.size());
  for (size_t k = 0; k < v.size(); ++k) x[k] = numeric::f32_bits(v[k]);
  const MxReference e4 = run_quantiser(x, DType::kF32, DType::kF8E4M3, 2, 70);
  EXPECT_EQ(e4.scales, (std::vector<uint8_t>{119, 127, 0, 255, 255, 0}));
  EXPECT_EQ(e4.q[0], 0x78);   // 256
  EXPECT_EQ(e4.q[1], 0x6A);   // 80
  EXPECT_EQ(e4.q[2], 0xF8);   // -256
  EXPECT_EQ(e4.q[3], 0x00);   // 0
  EXPECT_EQ(e4.q[32], 0x7E);  // 448, saturated
  EXPECT_EQ(e4.q[33], 0x44);  // 3
  EXPECT_EQ(e4.q[65], 0x80);  // -0
  for (int k = 70; k < 134; ++k) EXPECT_EQ(e4.q[static_cast<size_t>(k)], 0x7F) << k;
  EXPECT_EQ(e4.q[134], 0x20);  // 2^-3
  EXPECT_EQ(e4.q[135], 0x88);  // -2^-6
  EXPECT_EQ(e4.q[136], 0x00);
  const MxReference e5 = run_quantiser(x, DType::kF32, DType::kF8E5M2, 2, 70);
  EXPECT_EQ(e5.scales, (std::vector<uint8_t>{112, 120, 0, 255, 255, 0}));
  EXPECT_EQ(e5.q[0], 0x78);   // 1 · 2^15 = 32768
  EXPECT_EQ(e5.q[32], 0x7B);  // 500 · 2^7 = 64000 saturates to 57344
  EXPECT_EQ(e5.q[33], 0x5E);  // 3 · 2^7 = 384
  EXPECT_EQ(e5.q[70], 0x7E);  // the NaN block: f8e5m2's quiet NaN
  // The rule's functions.
  EXPECT_EQ(mx_scale_bits(1.0f, DType::kF8E4M3), 119);
  EXPECT_EQ(mx_scale_bits(0.0f, DType::kF8E4M3), 0);
  EXPECT_EQ(mx_scale_bits(NAN, DType::kF8E4M3), 255);
  EXPECT_EQ(mx_scale_bits(INFINITY, DType::kF8E5M2), 255);
  EXPECT_EQ(mx_scale_bits(std::numeric_limits<float>::max(), DType::kF8E4M3), 127 + 127 - 8);
  EXPECT_EQ(mx_scale_bits(std::numeric_limits<float>::max(), DType::kF8E5M2), 127 + 127 - 15);
  EXPECT_EQ(mx_scale_bits(std::numeric_limits<float>::denorm_min(), DType::kF8E4M3), 0);
  EXPECT_EQ(e8m0_to_f32(119), 0x1p-8f);
  EXPECT_EQ(e8m0_to_f32(0), 0x1p-127f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  // The reference agrees with the hand-computed blocks.
  const MxReference ref = quantise_mx(x, DType::kF32, DType::kF8E4M3, 2, 70);
  EXPECT_EQ(ref.scales, e4.scales);
  EXPECT_EQ(ref.q, e4.q);
}

// Invariant: every bf16 and f16 pattern, in order (blocks of neighbouring
// magnitudes) and shuffled (NaN and infinities spread over many blocks),
// and random f32 blocks spanning 30 binades from every exponent: the
// quantiser equals the reference bit for bit, into f8e4m3 and f8e5m2.
TEST(MxScales, EveryPatternMatchesTheReference) {
  std::mt19937_64 rng(41);
  for (DType from : {DType::kBF16, DType::kF16}) {
    std::vector<uint32_t> x(65536);
    std::iota(x.begin(), x.end(), 0u);
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) std::shuffle(x.begin(), x.end(), rng);
      for (DType to : {DType::kF8E4M3, DType::kF8E5M2}) {
        SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) +
                     (pass ? " shuffled" : " in order"));
        const MxReference got = run_quantiser(x, from, to, 2048, 32);
        const MxReference want = quantise_mx(x, from, to, 2048, 32);
        ASSERT_EQ(got.scales, want.scales);
        ASSERT_EQ(got.q, want.q);
      }
    }
  }
  // f32: per block a top exponent from the whole range, elements up to 30
  // binades below it (subnormals included), random signs and mantissas;
  // rows of 100 (a short edge block of 4).
  const int64_t rows = 2048, cols = 100;
  std::vector<uint32_t> x(static_cast<size_t>(rows * cols));
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int top = static_cast<int>((i * 4 + j / 32) % 256);  // exponent field
      const int e = std::max(0, top - static_cast<int>(bits(rng) % 31));
      const uint32_t r = bits(rng);
      x[static_cast<size_t>(i * cols + j)] =
          (r & 0x80000000u) | (static_cast<uint32_t>(std::min(e, 254)) << 23) | (r & 0x7fffffu);
    }
  x[5] = 0x7f800000u;     // an infinity
  x[300] = 0xffc00001u;   // a NaN
  x[1000] = 0x00000001u;  // the least subnormal
  for (DType to : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(std::string("f32 -> ") + std::string(dtype_name(to)));
    const MxReference got = run_quantiser(x, DType::kF32, to, rows, cols);
    const MxReference want = quantise_mx(x, DType::kF32, to, rows, cols);
    ASSERT_EQ(got.scales, want.scales);
    ASSERT_EQ(got.q, want.q);
  }
}

// A random rank-2 input with e8m0 scales: the source cut along the rows
// anywhere or along the columns at multiples of 32 (parts on devices 0-3
// of processes 0 and 1, one part replicated on device 4), the destination
// cut anywhere along either dim (devices 5-8, process 2, some shared with
// the source).
PlanInput random_mx_input(std::mt19937_64& rng, int64_t rows, int64_t cols) {
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  PlanInput in;
  for (int64_t dev = 0; dev < 9; ++dev) {
    const int32_t p = dev < 2 ? 0 : dev < 5 ? 1 : 2;
    in.topology.add({dev, p, p, 0});
  }
  TensorSpec t;
  t.name = "w";
  t.shape = {rows, cols};
  const DType froms[] = {DType::kF32, DType::kBF16, DType::kF16};
  t.dtype = froms[uni(0, 2)];
  t.dst_dtype = uni(0, 1) ? DType::kF8E4M3 : DType::kF8E5M2;
  Box full;
  full.rank = 2;
  full.hi[0] = rows;
  full.hi[1] = cols;
  const int sd = static_cast<int>(uni(0, 1));
  const int64_t step = sd == 1 ? kMxBlock : 1;
  std::vector<int64_t> cuts{0};
  for (int64_t c = step; c < t.shape[static_cast<size_t>(sd)] && cuts.size() < 4; c += step)
    if (uni(0, 3) == 0) cuts.push_back(c);
  cuts.push_back(t.shape[static_cast<size_t>(sd)]);
  std::vector<LayoutEntry> src;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Box b = full;
    b.lo[sd] = cuts[i];
    b.hi[sd] = cuts[i + 1];
    src.push_back({static_cast<int64_t>(i), 0, b});
  }
  src.push_back({4, 0, src[static_cast<size_t>(uni(0, static_cast<int64_t>(src.size()) - 1))].box});
  t.src = Layout::from_boxes(t.shape, src, 1, ReduceOp::kSum, "src");
  const int dd = static_cast<int>(uni(0, 1));
  const int64_t k = std::min<int64_t>(uni(1, 4), t.shape[static_cast<size_t>(dd)]);
  std::vector<LayoutEntry> dst;
  for (int64_t i = 0; i < k; ++i) {
    Box b = full;
    const Split split{t.shape[static_cast<size_t>(dd)], k};
    b.lo[dd] = split.lo(i);
    b.hi[dd] = split.hi(i);
    dst.push_back({i == 0 || uni(0, 1) ? 5 + i : i, 0, b});
  }
  t.dst = Layout::from_boxes(t.shape, dst, 1, ReduceOp::kSum, "dst");
  in.tensors.push_back(t);
  add_block_scales(in.tensors, 0, "w.scale", {1, kMxBlock}, "scales", DType::kE8M0);
  return in;
}

// Invariant: random shapes (short edge blocks, rows shorter than a block),
// sources cut at block boundaries with a replica, destinations cut
// anywhere (blocks cut by destination boxes), values with NaN, infinities,
// zeros and subnormals, with and without a staging budget, through the
// plan format and the host executor: every q and every scale equals the
// reference.
TEST(MxScales, RandomLayoutsWithSpecialValuesMatchTheReference) {
  std::mt19937_64 rng(4141);
  std::uniform_int_distribution<uint32_t> bits;
  for (int c = 0; c < 40; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const int64_t cols = std::uniform_int_distribution<int64_t>(1, 150)(rng);
    PlanInput in = random_mx_input(rng, rows, cols);
    if (c % 2) in.options.staging_budget_bytes = 256;
    const Plan plan = decode_plan(encode_plan(make_plan(in)));
    const TensorSpec& w = plan.tensors()[0];
    const TensorSpec& sc = plan.tensors()[1];
    ASSERT_EQ(sc.dtype, DType::kE8M0);
    ASSERT_EQ(w.scale_dtype, DType::kE8M0);
    const DType from = w.dtype, to = out_dtype(w);
    // Values: random magnitudes per block (from subnormal to huge), with
    // some specials.
    std::vector<uint32_t> x(static_cast<size_t>(rows * cols));
    for (size_t k = 0; k < x.size(); ++k) {
      const float mags[] = {1e-42f, 1e-30f, 1e-3f, 1.0f, 700.0f, 1e30f};
      const float v = (static_cast<float>(bits(rng) % 2001) / 1000.0f - 1.0f) *
                      mags[(k / 32 + static_cast<size_t>(c)) % 6];
      const uint32_t r = bits(rng) % 97;
      const float s = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : r < 6 ? 0.0f : v;
      x[k] = cast_bits(DType::kF32, from, numeric::f32_bits(s));
    }
    const MxReference ref = quantise_mx(x, from, to, rows, cols);
    std::vector<std::vector<std::byte>> src, dst_w, dst_s;
    std::vector<TensorBuffers> views(2);
    for (size_t e = 0; e < w.src.num_entries(); ++e)
      src.push_back(cut(x, cols, w.src.box(e), dtype_size(from)));
    for (size_t e = 0; e < w.dst.num_entries(); ++e)
      dst_w.emplace_back(static_cast<size_t>(w.dst.box(e).volume()), std::byte{0x55});
    for (size_t e = 0; e < sc.dst.num_entries(); ++e)
      dst_s.emplace_back(static_cast<size_t>(sc.dst.box(e).volume()), std::byte{0x55});
    for (auto& b : src) views[0].src.push_back({b.data(), static_cast<int64_t>(b.size())});
    for (auto& b : dst_w) views[0].dst.push_back({b.data(), static_cast<int64_t>(b.size())});
    for (auto& b : dst_s) views[1].dst.push_back({b.data(), static_cast<int64_t>(b.size())});
    execute_host(plan, views);
    const std::vector<uint32_t> q32(ref.q.begin(), ref.q.end());
    const std::vector<uint32_t> s32(ref.scales.begin(), ref.scales.end());
    for (size_t e = 0; e < w.dst.num_entries(); ++e)
      ASSERT_EQ(dst_w[e], cut(q32, cols, w.dst.box(e), 1)) << "values, entry " << e;
    for (size_t e = 0; e < sc.dst.num_entries(); ++e)
      ASSERT_EQ(dst_s[e], cut(s32, sc.shape[1], sc.dst.box(e), 1)) << "scales, entry " << e;
  }
}

// Invariant: the oracle's own MXFP8 reference (its source values, block by
// block) agrees with the executors on random rank-2 layouts, in one process
// and across in-process ranks each quantising its own shards; a scale
// poisoned by the oracle is never its right value.
TEST(MxScales, RandomLayoutsMeetTheOracleAcrossRanks) {
  std::mt19937_64 rng(77);
  for (int c = 0; c < 12; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 20)(rng);
    const int64_t cols = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    PlanInput in = random_mx_input(rng, rows, cols);
    if (c % 2) in.options.staging_budget_bytes = 512;
    const Plan plan = decode_plan(encode_plan(make_plan(in)));
    OracleBuffers buf = fill_sources(plan);
    for (const auto& shard : buf.dst[1]) {
      std::vector<std::byte> poisoned(shard.begin(), shard.end());
      OracleReport r;
      check_plan_destination_shard(plan.tensors(), 1, static_cast<size_t>(&shard - &buf.dst[1][0]),
                                   poisoned, r);
      EXPECT_EQ(r.mismatches, r.elements);  // every poisoned scale is wrong
    }
    execute_host(plan, buf.views());
    const OracleReport report = check_destinations(plan, buf);
    ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches, first "
                             << (report.first.empty() ? "" : report.first[0].tensor);
    if (c % 3 == 0) {
      EXPECT_EQ(thread_transport::execute_parts_and_check(in, 200 + c, c % 2 == 0, false), "");
    }
  }
}

std::string one(const std::string& dst, const std::string& dtype = "bf16") {
  return R"({"meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1]},
                        "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3]}},
             "tensors": [{"name": "w", "shape": [64, 96], "dtype": ")" +
         dtype + R"(", "src": {"mesh": "a", "spec": ["x", null]}, "dst": )" + dst + "}]}";
}

std::string mx_dst(const std::string& scales) {
  return R"({"mesh": "b", "spec": [null, "y"], "dtype": "f8e4m3", "scales": )" + scales + "}";
}

// Invariant: e8m0 scales need the block [1, ..., 1, 32], an fp8 cast and
// a scale dtype the library knows; no tensor of a spec has dtype e8m0;
// each refusal names the field.
TEST(MxScales, SpecErrorsNameTheField) {
  using testing::expect_spec_refused;
  const auto bad = ErrorCode::kInvalidArgument;
  expect_spec_refused(one(mx_dst(R"({"name": "s", "block": [1, 16], "dtype": "e8m0"})")), bad,
                      "tensors[0].dst.scales.block[1]", "need the block [1, ..., 1, 32]");
  expect_spec_refused(one(mx_dst(R"({"name": "s", "block": [2, 32], "dtype": "e8m0"})")), bad,
                      "tensors[0].dst.scales.block[0]", "got [2, 32]");
  expect_spec_refused(one(mx_dst(R"({"name": "s", "block": [32], "dtype": "e8m0"})")), bad,
                      "tensors[0].dst.scales.block", "has 1 extents, the tensor has rank 2");
  expect_spec_refused(one(mx_dst(R"({"name": "s", "block": [1, 32], "dtype": "e4m3"})")), bad,
                      "tensors[0].dst.scales.dtype", "unknown dtype \"e4m3\"");
  expect_spec_refused(one(mx_dst(R"({"name": "s", "block": [1, 32], "dtype": "u8"})")),
                      ErrorCode::kUnsupported, "tensors[0].dst.scales.dtype",
                      "f32 (DeepSeek-V3's) or e8m0 (MXFP8's), not u8");
  expect_spec_refused(one(R"({"mesh": "b", "spec": [null, "y"], "dtype": "bf16",
                              "scales": {"name": "s", "block": [1, 32], "dtype": "e8m0"}})",
                          "f32"),
                      ErrorCode::kUnsupported, "tensors[0].dst.scales",
                      "destination dtype of f8e4m3 or f8e5m2");
  expect_spec_refused(one(R"({"mesh": "b", "spec": [null, "y"]})", "e8m0"), bad, "tensors[0].dtype",
                      "unknown dtype \"e8m0\"");
  // A source shard that cuts a 32-element block: 96 columns over 2 devices.
  expect_spec_refused(
      R"({"meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1]},
                     "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3]}},
          "tensors": [{"name": "w", "shape": [64, 96], "dtype": "bf16",
                       "src": {"mesh": "a", "spec": [null, "x"]}, "dst": )" +
          mx_dst(R"({"name": "s", "block": [1, 32], "dtype": "E8M0"})") + "}]}",
      ErrorCode::kUnsupported, "tensors[0].dst.scales.block", "cuts a block of [1, 32]");
  // Accepted: the alias, any case; the scale tensor is e8m0, one byte.
  const Spec s = parse_spec(one(mx_dst(R"({"name": "s", "block": [1, 32],
                                           "dtype": "Float8_E8M0FNU"})")));
  ASSERT_EQ(s.input.tensors.size(), 2u);
  EXPECT_EQ(s.input.tensors[1].dtype, DType::kE8M0);
  EXPECT_EQ(s.input.tensors[1].shape, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(dtype_size(DType::kE8M0), 1);
  EXPECT_EQ(dtype_name(DType::kE8M0), "e8m0");
  // make_plan checks what a hand-built input claims.
  PlanInput in = s.input;
  in.tensors[0].scale_dtype = DType::kF32;
  try {
    (void)make_plan(in);
    ADD_FAILURE() << "planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), bad);
    EXPECT_NE(std::string(e.what()).find("tensors[0].scale_dtype: f32 is not the dtype of its "
                                         "scale tensor (e8m0)"),
              std::string::npos)
        << e.what();
  }
  in = s.input;
  in.tensors[0].scale_tensor = -1;
  in.tensors[0].scale_block.clear();
  try {
    (void)make_plan(in);
    ADD_FAILURE() << "planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), bad);
    EXPECT_NE(std::string(e.what()).find("tensors[1].dtype: e8m0 is only the dtype of MXFP8"),
              std::string::npos)
        << e.what();
  }
}

// Invariant: a plan with e8m0 scales sets required_features bit 5 (32)
// besides 8 and 16, decodes to the same plan and re-encodes to its bytes;
// the bit without an e8m0 tensor and an e8m0 tensor without the bit are
// refused, naming the field.
TEST(MxScales, PlanFormatBit) {
  const Spec s = parse_spec(one(mx_dst(R"({"name": "s", "block": [1, 32], "dtype": "e8m0"})")));
  const Plan plan = make_plan(s.input);
  std::vector<uint8_t> bytes = encode_plan(plan);
  EXPECT_EQ(fb::GetMutablePlan(bytes.data())->required_features(),
            kPlanFeatureCasts | kPlanFeatureBlockScales | kPlanFeatureMxScales);
  const Plan back = decode_plan(bytes);
  EXPECT_EQ(back.tensors()[1].dtype, DType::kE8M0);
  EXPECT_EQ(back.tensors()[0].scale_dtype, DType::kE8M0);
  EXPECT_EQ(back.fingerprint(), plan.fingerprint());
  EXPECT_EQ(encode_plan(back), bytes);
  EXPECT_NE(kPlanKnownFeatures & kPlanFeatureMxScales, 0u);
  const auto corrupt = testing::expect_plan_corrupt;
  std::vector<uint8_t> no_bit = bytes;
  fb::GetMutablePlan(no_bit.data())
      ->mutate_required_features(kPlanFeatureCasts | kPlanFeatureBlockScales);
  corrupt(no_bit, "tensors[1].dtype: e8m0 but required_features lacks the MXFP8 scales bit (32)");
  // f32 scales: no bit 32; the bit alone is refused.
  const Spec f = parse_spec(one(mx_dst(R"({"name": "s", "block": [1, 32]})")));
  std::vector<uint8_t> p = encode_plan(make_plan(f.input));
  EXPECT_EQ(fb::GetMutablePlan(p.data())->required_features(),
            kPlanFeatureCasts | kPlanFeatureBlockScales);
  fb::GetMutablePlan(p.data())->mutate_required_features(
      kPlanFeatureCasts | kPlanFeatureBlockScales | kPlanFeatureMxScales);
  corrupt(p, "has the MXFP8 scales bit (32) but no tensor has dtype e8m0");
  // An f32 scale tensor of blocks [2, 32] relabelled e8m0 (bit set): the
  // scale tensor's dtype names the rule, whose block this is not.
  const Spec f2 = parse_spec(one(mx_dst(R"({"name": "s", "block": [2, 32]})")));
  std::vector<uint8_t> q = encode_plan(make_plan(f2.input));
  auto* root = fb::GetMutablePlan(q.data());
  root->mutate_required_features(kPlanFeatureCasts | kPlanFeatureBlockScales |
                                 kPlanFeatureMxScales);
  root->mutable_tensors()->GetMutableObject(1)->mutate_dtype(fb::DType::E8M0);
  corrupt(q, "tensors[0].scale_block[0]: e8m0 (MXFP8) scales need the block [1, ..., 1, 32]");
}

// The spec of tests/data/mx_scales.rsplan (tests/data/README.md): two
// processes of two devices; w (bf16 -> f8e4m3, 100 columns: a short edge
// block) into column shards that cut a block, v (f16 -> f8e5m2, rank 3)
// (source shards of dim 2, whole blocks) into shards of dim 0.
constexpr const char* kGoldenMxSpec = R"({
  "meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1], "processes": [0, 1]},
             "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3], "processes": [0, 1]}},
  "tensors": [
    {"name": "w", "shape": [16, 100], "dtype": "bf16", "src": {"mesh": "a", "spec": ["x", null]},
     "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "f8e4m3",
             "scales": {"name": "w.scale", "block": [1, 32], "dtype": "e8m0"}}},
    {"name": "v", "shape": [4, 3, 64], "dtype": "f16", "src": {"mesh": "a", "spec": [null, null, "x"]},
     "dst": {"mesh": "b", "spec": ["y", null, null], "dtype": "f8e5m2",
             "scales": {"name": "v.scale", "block": [1, 1, 32], "dtype": "e8m0"}}}]})";

// tests/data/mx_scales.rsplan (read by the Go and Rust binding tests)
// decodes with the MXFP8 bit, holds the spec's tensors (the e8m0 scale
// tensors and their derived layouts) and executes bit for bit against the
// oracle. RESHARD_WRITE_MX_PLAN=PATH writes the plan there first (to
// regenerate the file).
TEST(MxScales, GoldenFileHoldsTheSpecsScaleTensors) {
  const Spec spec = parse_spec(kGoldenMxSpec);
  if (const char* out = std::getenv("RESHARD_WRITE_MX_PLAN")) {
    const std::vector<uint8_t> bytes = encode_plan(make_plan(spec.input));
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  std::ifstream f(std::string(RESHARD_SOURCE_DIR) + "/tests/data/mx_scales.rsplan",
                  std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(fb::GetPlan(bytes.data())->required_features(),
            kPlanFeatureCasts | kPlanFeatureBlockScales | kPlanFeatureMxScales);
  const Plan plan = decode_plan(bytes);
  // The plan's tensors are the spec's (what the planner chooses is not).
  const std::vector<TensorSpec> want = make_plan(spec.input).tensors();
  ASSERT_EQ(plan.tensors().size(), 4u);
  for (size_t t = 0; t < 4; ++t) {
    const TensorSpec& a = plan.tensors()[t];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, want[t].name);
    EXPECT_EQ(a.shape, want[t].shape);
    EXPECT_EQ(a.dtype, want[t].dtype);
    EXPECT_EQ(a.dst_dtype, want[t].dst_dtype);
    EXPECT_EQ(a.scale_tensor, want[t].scale_tensor);
    EXPECT_EQ(a.scale_block, want[t].scale_block);
    EXPECT_TRUE(a.src == want[t].src);
    EXPECT_TRUE(a.dst == want[t].dst);
  }
  EXPECT_EQ(plan.tensors()[2].name, "w.scale");
  EXPECT_EQ(plan.tensors()[2].dtype, DType::kE8M0);
  EXPECT_EQ(plan.tensors()[2].shape, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(plan.tensors()[3].shape, (std::vector<int64_t>{4, 3, 2}));
  OracleBuffers buf = fill_sources(plan);
  execute_host(plan, buf.views());
  const OracleReport report = check_destinations(plan, buf);
  EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
}

}  // namespace
}  // namespace reshard
