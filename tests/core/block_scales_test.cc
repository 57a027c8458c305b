// Block scales (docs/spec.md "Block scales", reshard/block_scales.h): fp8
// destinations with per-block f32 scales. Checked bit for bit against a
// reference quantiser written here over the global array (NaN, infinities,
// subnormals, zero blocks, short edge blocks), on random block-aligned
// layouts through the host executor and across in-process ranks, and the
// spec, plan-format and executor refusals.
#include "reshard/block_scales.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/block_scales_reference.h"
#include "core/device_path_testing.h"
#include "core/spec_refusal.h"
#include "core/thread_transport.h"
#include "reshard/cast.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/numeric.h"
#include "reshard/oracle.h"
#include "reshard/plan_generated.h"
#include "reshard/spec.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

using testing::cut;
using testing::quantise;
using testing::Reference;
using testing::to_f32;

// Source values: each block of its own magnitude (from 1e-41, subnormal in
// f32 and zero or subnormal in bf16, and 1e-37, whose amax / 448 is
// subnormal and so clamped to 2^-126, to 3e38), one block of zeros, one
// with NaN and both infinities, the rest random signs and mantissas.
std::vector<uint32_t> special_values(DType d, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float mags[] = {1e-41f, 1e-37f, 1e-6f, 1.0f, 300.0f, 500.0f, 6e4f, 3e38f};
  std::vector<uint32_t> x(static_cast<size_t>(rows * cols));
  const int64_t nc = (cols + bc - 1) / bc;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t b = (i / br) * nc + j / bc;
      float v = u(rng) * mags[b % 8];
      if (b == 1) v = 0.0f;
      if (b == 2 && j % 7 == 0) v = (i + j) % 3 == 0 ? NAN : (i % 2 ? INFINITY : -INFINITY);
      x[static_cast<size_t>(i * cols + j)] = cast_bits(DType::kF32, d, numeric::f32_bits(v));
    }
  return x;
}

std::string spec_with(const std::string& dtype, const std::string& dst, int64_t rows,
                      int64_t cols) {
  const std::string r = std::to_string(rows), c = std::to_string(cols);
  return R"({"meshes": {"a": {"axis_names": ["x"], "shape": [3], "devices": [0, 1, 2],
                              "processes": [0, 0, 1]},
                        "b": {"axis_names": ["y"], "shape": [3], "devices": [3, 4, 5],
                              "processes": [1, 2, 2]}},
             "tensors": [{"name": "w", "shape": [)" +
         r + ", " + c + R"(], "dtype": ")" + dtype +
         R"(", "src": {"boxes": [{"device": 0, "lo": [0, 0], "hi": [128, )" + c +
         R"(]}, {"device": 1, "lo": [128, 0], "hi": [)" + r + ", " + c +
         R"(]}, {"device": 2, "lo": [0, 0], "hi": [)" + r + ", " + c + R"(]}]},
             "dst": )" +
         dst + "}]}";
}

// Invariant: the destination holds the reference quantiser's q and the
// scale tensor its scales, bit for bit, for f32/bf16/f16 sources into
// f8e4m3 and f8e5m2, with short edge blocks, destination boxes that cut
// blocks (each scale sent to every device whose box touches its block),
// replicas of the source (every holder computes the same scales) and a
// staging budget (messages across processes in rounds).
TEST(BlockScales, MatchTheReferenceQuantiserBitForBit) {
  const int64_t rows = 300, cols = 200, br = 128, bc = 64;
  int cases = 0;
  for (const auto& [from, to] : {std::pair{DType::kBF16, DType::kF8E4M3},
                                 {DType::kF32, DType::kF8E4M3},
                                 {DType::kF16, DType::kF8E5M2},
                                 {DType::kBF16, DType::kF8E5M2}}) {
    for (const char* dst_spec :
         {R"({"mesh": "b", "spec": [null, "y"]})", R"({"mesh": "b", "spec": ["y", null]})"}) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) + " " +
                   dst_spec);
      const std::string dst = std::string(dst_spec).substr(0, std::string(dst_spec).size() - 1) +
                              R"(, "dtype": ")" + std::string(dtype_name(to)) +
                              R"(", "scales": {"name": "w.scale", "block": [128, 64]}})";
      Spec s = parse_spec(spec_with(std::string(dtype_name(from)), dst, rows, cols));
      ASSERT_EQ(s.input.tensors.size(), 2u);
      s.input.options.staging_budget_bytes = cases % 2 ? 4096 : 0;
      const Plan plan = decode_plan(encode_plan(make_plan(s.input)));
      const TensorSpec& w = plan.tensors()[0];
      const TensorSpec& sc = plan.tensors()[1];
      EXPECT_EQ(sc.shape, (std::vector<int64_t>{3, 4}));
      // Each destination device holds the scale of every block its box
      // touches; each source device those of the blocks it holds.
      ASSERT_EQ(sc.dst.num_entries(), w.dst.num_entries());
      for (size_t e = 0; e < w.dst.num_entries(); ++e) {
        const Box b = w.dst.box(e), s_box = sc.dst.box(e);
        EXPECT_EQ(sc.dst.device(e), w.dst.device(e));
        EXPECT_EQ(s_box.lo[0], b.lo[0] / br);
        EXPECT_EQ(s_box.hi[0], (b.hi[0] + br - 1) / br);
        EXPECT_EQ(s_box.lo[1], b.lo[1] / bc);
        EXPECT_EQ(s_box.hi[1], (b.hi[1] + bc - 1) / bc);
      }
      EXPECT_EQ(sc.src.box(1).lo[0], 1);  // device 1: rows 128..300, blocks 1..3
      EXPECT_EQ(sc.src.box(1).hi[0], 3);
      const std::vector<uint32_t> x = special_values(from, rows, cols, br, bc, 17 + cases);
      const Reference ref = quantise(x, from, to, rows, cols, br, bc);
      // Sources from x; no buffers for the scale tensor's source.
      std::vector<std::vector<std::byte>> src, dst_w, dst_s;
      std::vector<TensorBuffers> views(2);
      for (size_t e = 0; e < w.src.num_entries(); ++e)
        src.push_back(cut(x, cols, w.src.box(e), dtype_size(from)));
      for (size_t e = 0; e < w.dst.num_entries(); ++e)
        dst_w.emplace_back(static_cast<size_t>(w.dst.box(e).volume()), std::byte{0x55});
      for (size_t e = 0; e < sc.dst.num_entries(); ++e)
        dst_s.emplace_back(static_cast<size_t>(sc.dst.box(e).volume() * 4), std::byte{0x55});
      for (auto& b : src) views[0].src.push_back({b.data(), static_cast<int64_t>(b.size())});
      for (auto& b : dst_w) views[0].dst.push_back({b.data(), static_cast<int64_t>(b.size())});
      for (auto& b : dst_s) views[1].dst.push_back({b.data(), static_cast<int64_t>(b.size())});
      execute_host(plan, views);
      std::vector<uint32_t> q32(ref.q.begin(), ref.q.end());
      std::vector<uint32_t> s32(ref.scales.size());
      for (size_t i = 0; i < s32.size(); ++i) s32[i] = numeric::f32_bits(ref.scales[i]);
      for (size_t e = 0; e < w.dst.num_entries(); ++e)
        EXPECT_EQ(dst_w[e], cut(q32, cols, w.dst.box(e), 1)) << "values, entry " << e;
      for (size_t e = 0; e < sc.dst.num_entries(); ++e)
        EXPECT_EQ(dst_s[e], cut(s32, sc.shape[1], sc.dst.box(e), 4)) << "scales, entry " << e;
      ++cases;
    }
  }
  // The special values are there: some q NaN, some zero blocks scaled 1.
  const std::vector<uint32_t> x = special_values(DType::kBF16, rows, cols, br, bc, 1);
  const Reference ref = quantise(x, DType::kBF16, DType::kF8E4M3, rows, cols, br, bc);
  EXPECT_EQ(ref.scales[1], 1.0f);
  EXPECT_EQ(ref.scales[9], 0x1p-126f);  // 1e-37 / 448 is subnormal
  EXPECT_TRUE(
      std::any_of(ref.q.begin(), ref.q.end(), [](uint8_t q) { return (q & 0x7f) == 0x7f; }));
  // No finite value becomes NaN (f8e4m3 has no infinity), tiny blocks too.
  for (size_t k = 0; k < x.size(); ++k)
    if (std::isfinite(to_f32(DType::kBF16, x[k]))) {
      ASSERT_NE(ref.q[k] & 0x7f, 0x7f) << k;
    }
  EXPECT_EQ(cases, 8);
}

// ------------------------------------------------------ random layouts

// A spec-free input: tensor `shape` of `dtype` cast to `to` with blocks
// `block`, its source split along dim `sd` at multiples of the block
// (uneven, one part replicated), its destination split along dim `dd` at
// any points, devices over three processes.
PlanInput random_input(std::mt19937_64& rng) {
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int rank = static_cast<int>(uni(1, 3));
  std::vector<int64_t> shape(static_cast<size_t>(rank)), block(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    shape[static_cast<size_t>(d)] = uni(1, rank == 1 ? 700 : 40);
    block[static_cast<size_t>(d)] = uni(1, shape[static_cast<size_t>(d)] + 3);
  }
  PlanInput in;
  // Process 0: the source's parts (devices 0-4); 1: its replica (5); 2:
  // destinations (6-9; others share the source's devices).
  for (int64_t dev = 0; dev < 10; ++dev) {
    const int32_t p = dev < 5 ? 0 : dev == 5 ? 1 : 2;
    in.topology.add({dev, p, p, 0});
  }
  TensorSpec t;
  t.name = "w";
  t.shape = shape;
  const DType froms[] = {DType::kF32, DType::kBF16, DType::kF16};
  t.dtype = froms[uni(0, 2)];
  t.dst_dtype = uni(0, 1) ? DType::kF8E4M3 : DType::kF8E5M2;
  Box full;
  full.rank = rank;
  for (int d = 0; d < rank; ++d) full.hi[d] = shape[static_cast<size_t>(d)];
  // Source: cuts at block multiples along sd, one device per part, and a
  // replica of a random part on another device.
  const int sd = static_cast<int>(uni(0, rank - 1));
  const int64_t nb = (shape[static_cast<size_t>(sd)] + block[static_cast<size_t>(sd)] - 1) /
                     block[static_cast<size_t>(sd)];
  std::vector<int64_t> cuts{0};
  for (int64_t b = 1; b < nb; ++b)
    if (uni(0, 2) == 0) cuts.push_back(b * block[static_cast<size_t>(sd)]);
  cuts.push_back(shape[static_cast<size_t>(sd)]);
  std::vector<LayoutEntry> src;
  for (size_t i = 0; i + 1 < cuts.size() && src.size() < 5; ++i) {
    Box b = full;
    b.lo[sd] = cuts[i];
    b.hi[sd] =
        i + 2 == cuts.size() || src.size() == 4 ? shape[static_cast<size_t>(sd)] : cuts[i + 1];
    src.push_back({static_cast<int64_t>(src.size()), 0, b});
  }
  src.push_back({5, 0, src[static_cast<size_t>(uni(0, static_cast<int64_t>(src.size()) - 1))].box});
  t.src = Layout::from_boxes(shape, src, 1, ReduceOp::kSum, "src");
  // Destination: k parts along dd at any points, some devices shared with
  // the source (local copies).
  const int dd = static_cast<int>(uni(0, rank - 1));
  const int64_t k = uni(1, 4);
  std::vector<LayoutEntry> dst;
  for (int64_t i = 0; i < k; ++i) {
    Box b = full;
    const Split split{shape[static_cast<size_t>(dd)], k};
    b.lo[dd] = split.lo(i);
    b.hi[dd] = split.hi(i);
    dst.push_back({i == 0 || uni(0, 1) ? 6 + i : i, 0, b});
  }
  t.dst = Layout::from_boxes(shape, dst, 1, ReduceOp::kSum, "dst");
  in.tensors.push_back(t);
  add_block_scales(in.tensors, 0, "w.scale", block, "scales");
  return in;
}

// Invariant: random ranks, shapes, blocks and block-aligned source layouts
// (short edge blocks, blocks larger than the tensor, replicas), destinations
// cut anywhere: every destination element and every scale equals the
// oracle's reference (computed from its own source values block by block),
// on the host executor and across in-process ranks (each rank quantising
// its own shards), with and without a staging budget.
TEST(BlockScales, RandomAlignedLayoutsMeetTheReference) {
  std::mt19937_64 rng(2024);
  for (int c = 0; c < 24; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    PlanInput in = random_input(rng);
    if (c % 2) in.options.staging_budget_bytes = 1024;
    const Plan plan = decode_plan(encode_plan(make_plan(in)));
    OracleBuffers buf = fill_sources(plan);
    execute_host(plan, buf.views());
    const OracleReport report = check_destinations(plan, buf);
    ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches, first "
                             << (report.first.empty() ? "" : report.first[0].tensor);
    if (c % 3 == 0) {
      EXPECT_EQ(thread_transport::execute_parts_and_check(in, 100 + c, c % 2 == 0, false), "");
    }
  }
}

// ------------------------------------------------------------ refusals

std::string one(const std::string& src, const std::string& dst) {
  return R"({"meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1]},
                        "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3]}},
             "tensors": [{"name": "w", "shape": [256, 256], "dtype": "bf16", "src": )" +
         src + R"(, "dst": )" + dst + "}]}";
}

// Invariant: every bad "scales" is refused, the field named.
TEST(BlockScales, SpecErrorsNameTheField) {
  const std::string src = R"({"mesh": "a", "spec": ["x", null]})";
  const auto dst = [](const std::string& scales, const std::string& dtype = "f8e4m3") {
    return R"({"mesh": "b", "spec": [null, "y"], "dtype": ")" + dtype + R"(", "scales": )" +
           scales + "}";
  };
  // Accepted: the DeepSeek-V3 form.
  const Spec ok = parse_spec(one(src, dst(R"({"name": "w.s", "block": [128, 128]})")));
  ASSERT_EQ(ok.input.tensors.size(), 2u);
  EXPECT_EQ(ok.input.tensors[1].shape, (std::vector<int64_t>{2, 2}));
  (void)make_plan(ok.input);
  const std::string f = "tensors[0].dst.scales";
  testing::expect_spec_refused(one(src, dst(R"({"name": "w.s", "block": [128]})")),
                               ErrorCode::kInvalidArgument, f + ".block",
                               "has 1 extents, the tensor has rank 2");
  testing::expect_spec_refused(one(src, dst(R"({"name": "w.s", "block": [128, 0]})")),
                               ErrorCode::kInvalidArgument, f + ".block[1]", "at least 1");
  testing::expect_spec_refused(one(src, dst(R"({"name": "w.s", "block": [128, 128]})", "bf16")),
                               ErrorCode::kUnsupported, f, "f8e4m3 or f8e5m2, not bf16");
  testing::expect_spec_refused(
      one(src, R"({"mesh": "b", "spec": [null, "y"], "scales": {"name": "w.s",
                    "block": [128, 128]}})"),
      ErrorCode::kUnsupported, f, "f8e4m3 or f8e5m2, not bf16");
  testing::expect_spec_refused(
      one(src, dst(R"({"name": "w.s", "block": [128, 128], "dtype": "f8e4m3"})")),
      ErrorCode::kUnsupported, f + ".dtype", "e8m0");
  testing::expect_spec_refused(one(src, dst(R"({"name": "w", "block": [128, 128]})")),
                               ErrorCode::kInvalidArgument, f + ".name",
                               "duplicate tensor name \"w\"");
  testing::expect_spec_refused(one(src, dst(R"({"name": "w.s", "blocks": [128, 128]})")),
                               ErrorCode::kInvalidArgument, f + ".blocks",
                               "did you mean \"block\"");
  testing::expect_spec_refused(one(src, dst(R"({"block": [128, 128]})")),
                               ErrorCode::kInvalidArgument, f, "name");
  testing::expect_spec_refused(
      one(R"({"mesh": "a", "spec": ["x", null], "scales": {"name": "s", "block": [1, 1]}})",
          R"({"mesh": "b", "spec": [null, "y"], "dtype": "f8e4m3"})"),
      ErrorCode::kInvalidArgument, "tensors[0].src.scales", "belong to the destination");
  // A source shard that cuts a block: 256 rows over 2 is 128 each, which
  // cuts blocks of 96 rows.
  testing::expect_spec_refused(one(src, dst(R"({"name": "w.s", "block": [96, 128]})")),
                               ErrorCode::kUnsupported, f + ".block",
                               "cuts a block of [96, 128] in dim 0");
}

// Invariant: make_plan checks a scale tensor built by hand against the
// derived one (a C++ caller cannot make a plan whose scale layouts differ).
TEST(BlockScales, MakePlanChecksTheScaleTensor) {
  const Spec ok = parse_spec(one(R"({"mesh": "a", "spec": ["x", null]})",
                                 R"({"mesh": "b", "spec": [null, "y"], "dtype": "f8e4m3",
                                     "scales": {"name": "w.s", "block": [128, 128]}})"));
  const auto refused = [&](auto edit, const std::string& field, const std::string& words) {
    PlanInput in = ok.input;
    edit(in.tensors);
    try {
      (void)make_plan(in);
      ADD_FAILURE() << "accepted: " << field;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(field, 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  using T = std::vector<TensorSpec>;
  refused([](T& t) { t[0].scale_tensor = 0; }, "tensors[0].scale_tensor", "the tensor itself");
  refused([](T& t) { t[0].scale_tensor = 5; }, "tensors[0].scale_tensor", "out of range");
  refused([](T& t) { t[1].dst = t[1].src; }, "tensors[1].dst", "not the layout derived");
  refused([](T& t) { t[1].dtype = DType::kBF16; }, "tensors[1].dtype", "must be f32");
  refused([](T& t) { t[0].scale_block = {64, 128}; }, "tensors[1].shape", "not the scale shape");
  refused([](T& t) { t[0].dst_dtype = DType::kBF16; }, "tensors[0].dst_dtype", "f8e4m3 or f8e5m2");
  refused(
      [](T& t) {
        t[1].scale_block = {1, 1};
      },
      "tensors[1].scale_block", "given without a scale tensor");
}

// Invariant: a plan with block scales sets required_features bit 16 and
// decodes to itself; without the bit, with the bit and no scales, or with a
// damaged scale tensor index it is kCorrupt.
TEST(BlockScales, PlanFormatBit) {
  const Spec s = parse_spec(one(R"({"mesh": "a", "spec": ["x", null]})",
                                R"({"mesh": "b", "spec": [null, "y"], "dtype": "f8e5m2",
                                    "scales": {"name": "w.s", "block": [64, 256]}})"));
  const Plan plan = make_plan(s.input);
  std::vector<uint8_t> bytes = encode_plan(plan);
  EXPECT_EQ(fb::GetMutablePlan(bytes.data())->required_features(),
            kPlanFeatureCasts | kPlanFeatureBlockScales);
  const Plan back = decode_plan(bytes);
  EXPECT_EQ(back.tensors()[0].scale_tensor, 1);
  EXPECT_EQ(back.tensors()[0].scale_block, (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(back.fingerprint(), plan.fingerprint());
  EXPECT_EQ(encode_plan(back), bytes);
  const auto corrupt = testing::expect_plan_corrupt;
  std::vector<uint8_t> no_bit = bytes;
  fb::GetMutablePlan(no_bit.data())->mutate_required_features(kPlanFeatureCasts);
  corrupt(no_bit, "tensors[0].scale_tensor: present but required_features lacks the block scales");
  std::vector<uint8_t> self = bytes;
  fb::GetMutablePlan(self.data())->mutable_tensors()->GetMutableObject(0)->mutate_scale_tensor(0);
  corrupt(self, "tensors[0].scale_tensor: 0 is the tensor itself");
  // A reader that knows the casts but not this bit refuses the plan (the
  // bit is outside kPlanKnownFeatures of such a reader).
  EXPECT_NE(kPlanKnownFeatures & kPlanFeatureBlockScales, 0u);
  // Without scales: no bit; the bit alone is refused.
  PlanInput plain = s.input;
  plain.tensors.pop_back();
  plain.tensors[0].scale_tensor = -1;
  plain.tensors[0].scale_block.clear();
  std::vector<uint8_t> p = encode_plan(make_plan(plain));
  EXPECT_EQ(fb::GetMutablePlan(p.data())->required_features(), kPlanFeatureCasts);
  EXPECT_FALSE(
      reinterpret_cast<const flatbuffers::Table*>(fb::GetMutablePlan(p.data())->tensors()->Get(0))
          ->CheckField(fb::Tensor::VT_SCALE_TENSOR));
  fb::GetMutablePlan(p.data())->mutate_required_features(kPlanFeatureCasts |
                                                         kPlanFeatureBlockScales);
  corrupt(p, "has the block scales bit (16) but no tensor has a scale_tensor");
}

// Copies on the host, memory said to be CUDA's.
class DeviceTransport final : public testing::OneProcessDeviceTransport {
 public:
  DeviceTransport() : OneProcessDeviceTransport("device emulation") {}
  void run_copies(int64_t, int32_t, std::span<const CopyOp>) override {
    ADD_FAILURE() << "a copy ran";
  }
};

// Invariant: executing every process at once (kAllProcesses, whose copies
// run on the host) on memory the host cannot touch refuses a plan with
// block scales before any copy, naming the transport.
TEST(BlockScales, DevicePathRefusesScalePlans) {
  const Spec s = parse_spec(one(R"({"mesh": "a", "spec": ["x", null]})",
                                R"({"mesh": "b", "spec": [null, "y"], "dtype": "f8e4m3",
                                    "scales": {"name": "w.s", "block": [128, 128]}})"));
  const Plan plan = make_plan(s.input);
  OracleBuffers buf = fill_sources(plan);
  Engine engine(std::make_unique<DeviceTransport>());
  try {
    engine.execute(plan, kAllProcesses, buf.views());
    ADD_FAILURE() << "executed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("device emulation transport"), std::string::npos)
        << e.what();
  }
}

// Invariant: on the device path across ranks (each rank's engine hands
// its copies to the transport: the scales as kBlockScales ops into
// staging, every pack and local copy out of a scaled source as a kQuantise
// op, applied here with the host quantiser), the two small scale specs
// (f32 scales; e8m0 beside them) meet the oracle, values and scales, on
// 3 ranks, unbudgeted and in 16 KiB rounds.
TEST(BlockScales, DevicePathAcrossRanksMeetsTheOracle) {
  for (const char* name : {"zero3_fp8_scales_small.json", "zero3_mxfp8_small.json"}) {
    for (const int64_t budget : {int64_t{0}, int64_t{16384}}) {
      SCOPED_TRACE(std::string(name) + " budget " + std::to_string(budget));
      PlanInput in = load_spec(std::string(RESHARD_SOURCE_DIR) + "/tests/data/" + name).input;
      in.options.staging_budget_bytes = budget;
      EXPECT_EQ(thread_transport::execute_parts_and_check(in, 41, false, true), "");
    }
  }
}

}  // namespace
}  // namespace reshard
