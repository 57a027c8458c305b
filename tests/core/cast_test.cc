// Casts in flight (docs/spec.md "Casts", reshard/cast.h): the reference
// conversion against ml_dtypes, the spec and plan-format rules, and random
// layouts with a cast destination executed on the host and through the
// engine's device path, checked by the oracle bit for bit.
#include "reshard/cast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/copy_op_host.h"
#include "core/device_path_testing.h"
#include "core/random_cases.h"
#include "core/spec_refusal.h"
#include "core/staged_cases.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan_generated.h"
#include "reshard/spec.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

struct Reference {
  const char* from;
  const char* to;
  uint32_t count;
  uint64_t hash;
};

// tests/core/cast_reference.py with ml_dtypes 0.6.0 (numpy's float16 for f16).
const Reference kReference[] = {
    {"f32", "f16", 1501441u, 0x64590bd13e3f3e85u},
    {"f32", "bf16", 1501441u, 0x57d1a30acfffd99au},
    {"f32", "f8e4m3", 1501441u, 0x3cf7fb81f2f13662u},
    {"f32", "f8e5m2", 1501441u, 0xef5a4b3e67889179u},
    {"f16", "f32", 63490u, 0xa251597e93c2503fu},
    {"f16", "bf16", 63490u, 0x5cc9080ff1f9e3ffu},
    {"f16", "f8e4m3", 63490u, 0x4d30eec33ed15440u},
    {"f16", "f8e5m2", 63490u, 0x3ec4a28b60379281u},
    {"bf16", "f32", 65282u, 0xbc60f5dd0fa83fbfu},
    {"bf16", "f16", 65282u, 0x32aa9af1c8a73fffu},
    {"bf16", "f8e4m3", 65282u, 0xac580166a7ff2ff0u},
    {"bf16", "f8e5m2", 65282u, 0xdfec9a42489ecac1u},
    {"f8e4m3", "f32", 254u, 0x80a0126fdb0adc95u},
    {"f8e4m3", "f16", 254u, 0x48e7a6d1cb31c815u},
    {"f8e4m3", "bf16", 254u, 0x5b751be23ceaea05u},
    {"f8e4m3", "f8e5m2", 254u, 0x7b9fa65a9cd5b6b7u},
    {"f8e5m2", "f32", 250u, 0x7bb732bc267d51bbu},
    {"f8e5m2", "f16", 250u, 0xda7c05b4bfc3c7bbu},
    {"f8e5m2", "bf16", 250u, 0xc91d0fff6731de7bu},
    {"f8e5m2", "f8e4m3", 250u, 0xaf8035943bbc6140u},
};

bool is_nan(DType d, uint32_t bits) {
  unsigned char b[4];
  std::memcpy(b, &bits, 4);
  return std::isnan(cast_detail::load_f32(d, b));
}

// The input set of cast_reference.py, NaNs dropped.
std::vector<uint32_t> inputs(DType d) {
  std::vector<uint32_t> v;
  if (d == DType::kF32) {
    for (uint64_t k = 0; k < (1u << 20); ++k) v.push_back(static_cast<uint32_t>(k << 12));
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u})
      for (uint32_t b = 0; b < (1u << 16); ++b) v.push_back((b << 16) | low);
    for (uint64_t i = 0; i < (1u << 18); ++i)
      v.push_back(static_cast<uint32_t>((i * 2654435761u) & 0xffffffffu));
  } else {
    const uint32_t n = dtype_size(d) == 2 ? 1u << 16 : 1u << 8;
    for (uint32_t b = 0; b < n; ++b) v.push_back(b);
  }
  std::vector<uint32_t> out;
  for (uint32_t b : v)
    if (!is_nan(d, b)) out.push_back(b);
  return out;
}

// Invariant: every supported pair casts as ml_dtypes does, bit for bit,
// over every 8- and 16-bit pattern and 1.5 million f32 patterns (every tie
// of every narrower format among them).
TEST(Cast, MatchesMlDtypesBitForBit) {
  for (const Reference& r : kReference) {
    const DType from = parse_dtype(r.from, "from");
    const DType to = parse_dtype(r.to, "to");
    ASSERT_TRUE(cast_supported(from, to));
    const std::vector<uint32_t> in = inputs(from);
    ASSERT_EQ(in.size(), r.count) << r.from;
    uint64_t h = 0;
    for (size_t i = 0; i < in.size(); ++i)
      h += (uint64_t{cast_bits(from, to, in[i])} + 1) * ((i + 1) * 0x9E3779B97F4A7C15u);
    EXPECT_EQ(h, r.hash) << r.from << " -> " << r.to;
  }
}

// Invariant: NaN stays NaN (sign kept) for every NaN pattern of the narrow
// formats and f32's quiet and signalling NaNs; the stated edge cases.
TEST(Cast, NanInfinityOverflowAndSubnormals) {
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
  for (DType from : all) {
    std::vector<uint32_t> nans = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u};
    if (from != DType::kF32) {
      nans.clear();
      const uint32_t n = dtype_size(from) == 2 ? 1u << 16 : 1u << 8;
      for (uint32_t b = 0; b < n; ++b)
        if (is_nan(from, b)) nans.push_back(b);
    }
    for (DType to : all) {
      if (from == to) continue;
      for (uint32_t b : nans) ASSERT_TRUE(is_nan(to, cast_bits(from, to, b))) << b;
    }
  }
  const auto f32 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  const DType F = DType::kF32, E4 = DType::kF8E4M3, E5 = DType::kF8E5M2;
  EXPECT_EQ(cast_bits(F, E4, f32(448.0f)), 0x7eu);
  EXPECT_EQ(cast_bits(F, E4, f32(464.0f)), 0x7eu);   // the tie rounds to even (448)
  EXPECT_EQ(cast_bits(F, E4, f32(464.01f)), 0x7fu);  // overflow: NaN, not saturated
  EXPECT_EQ(cast_bits(F, E4, f32(-1e9f)), 0xffu);
  EXPECT_EQ(cast_bits(F, E4, f32(INFINITY)), 0x7fu);  // e4m3fn has no infinity
  EXPECT_EQ(cast_bits(F, E4, f32(0x1p-10f)), 0x00u);  // half the least subnormal: even (0)
  EXPECT_EQ(cast_bits(F, E4, f32(-0x1.0002p-10f)), 0x81u);
  EXPECT_EQ(cast_bits(F, E5, f32(61440.0f)), 0x7cu);  // the tie above 57344: infinity
  EXPECT_EQ(cast_bits(F, E5, f32(-INFINITY)), 0xfcu);
  EXPECT_EQ(cast_bits(F, DType::kBF16, f32(0x1.01p0f)), 0x3f80u);  // ties to even
  EXPECT_EQ(cast_bits(F, DType::kBF16, f32(0x1.03p0f)), 0x3f82u);
  EXPECT_FALSE(cast_supported(DType::kF64, DType::kF32));
  EXPECT_FALSE(cast_supported(DType::kI32, DType::kF32));
  EXPECT_FALSE(cast_supported(DType::kF32, DType::kF32));
}

// Invariant: cast_box follows the descriptor's strides on both sides
// (elements of each side's dtype) and refuses unsupported pairs.
TEST(Cast, CastBoxIsElementwiseOverTheDescriptor) {
  Box src_box, region;
  src_box.rank = region.rank = 2;
  src_box.hi[0] = 5;
  src_box.hi[1] = 7;
  region.lo[0] = 1;
  region.hi[0] = 4;
  region.lo[1] = 2;
  region.hi[1] = 6;
  std::vector<float> src(35);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 1.37f - 20.0f;
  std::vector<uint8_t> dst(12, 0xaa);
  cast_box(make_copy_desc(region, src_box, region), DType::kF32, DType::kF8E4M3, src.data(),
           dst.data());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) {
      const float v = src[static_cast<size_t>((r + 1) * 7 + c + 2)];
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      EXPECT_EQ(dst[static_cast<size_t>(r * 4 + c)], cast_bits(DType::kF32, DType::kF8E4M3, bits));
    }
  EXPECT_THROW(cast_box(make_copy_desc(region, src_box, region), DType::kI32, DType::kF32,
                        src.data(), dst.data()),
               Error);
}

std::string one_tensor_spec(const std::string& tensor) {
  return R"({"meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1]},
                        "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3]}},
             "tensors": [)" +
         tensor + "]}";
}

void expect_spec_error(const std::string& tensor, ErrorCode code, const std::string& field,
                       const std::string& words) {
  testing::expect_spec_refused(one_tensor_spec(tensor), code, field, words);
}

// Invariant: every bad cast in a spec is refused with the field's path.
TEST(Cast, SpecErrorsNameTheField) {
  const std::string head = R"({"name": "w", "shape": [4, 6], "dtype": )";
  expect_spec_error(head + R"("bf16", "src": {"mesh": "a", "spec": ["x"]},
      "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "f9"}})",
                    ErrorCode::kInvalidArgument, "tensors[0].dst.dtype", "unknown dtype");
  expect_spec_error(head + R"("i32", "src": {"mesh": "a", "spec": ["x"]},
      "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "f32"}})",
                    ErrorCode::kUnsupported, "tensors[0].dst.dtype", "no cast from i32 to f32");
  expect_spec_error(head + R"("f64", "src": {"mesh": "a", "spec": ["x"]},
      "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "f32"}})",
                    ErrorCode::kUnsupported, "tensors[0].dst.dtype", "no cast from f64");
  expect_spec_error(head + R"("f32", "src": {"mesh": "a", "spec": ["x"], "dtype": "bf16"},
      "dst": {"mesh": "b", "spec": [null, "y"]}})",
                    ErrorCode::kInvalidArgument, "tensors[0].src.dtype", "only a destination");
  expect_spec_error(
      head + R"("f32", "src": {"mesh": "a", "spec": [null], "partial": {"axes": ["x"]}},
      "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "bf16"}})",
      ErrorCode::kUnsupported, "tensors[0].dst.dtype", "not partial");
  expect_spec_error(head + R"("f32", "src": {"mesh": "a", "spec": ["x"]},
      "dst": {"mesh": "b", "spec": [null, "y"], "dtype": 8}})",
                    ErrorCode::kInvalidArgument, "tensors[0].dst.dtype", "");
  // The source's own dtype as the destination's: no cast at all.
  const Spec same =
      parse_spec(one_tensor_spec(head + R"("bf16", "src": {"mesh": "a", "spec": ["x"]},
      "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "bfloat16"}})"));
  EXPECT_FALSE(has_cast(same.input.tensors[0]));
}

// Invariant: a cast that shrinks the element moves the destination's bytes
// (cast on the sender); one that widens moves the source's (cast on the
// receiver); the statistics count those bytes.
TEST(Cast, MessagesCarryTheSmallerDtype) {
  for (const auto& [from, to, size] : {std::tuple{"bf16", "f8e4m3", 1},
                                       {"bf16", "f32", 2},
                                       {"f32", "bf16", 2},
                                       {"f16", "bf16", 2}}) {
    const Spec s = parse_spec(one_tensor_spec(
        std::string(R"({"name": "w", "shape": [64, 32], "dtype": ")") + from +
        R"(", "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": [null, "y"], "dtype": ")" +
        to + R"("}})"));
    const Plan plan = make_plan(s.input);
    EXPECT_EQ(plan.stats().network_bytes, 64 * 32 * size) << from << " -> " << to;
    EXPECT_EQ(wire_dtype(plan.tensors()[0], true),
              dtype_size(parse_dtype(to, "")) < dtype_size(parse_dtype(from, ""))
                  ? parse_dtype(to, "")
                  : parse_dtype(from, ""));
  }
}

// Invariant: a plan with a cast sets required_features bit 8 and decodes to
// the same plan; the bit without a cast, or a cast without the bit, is
// kCorrupt; a plan encoded before casts existed still decodes, without one.
TEST(Cast, PlanFormatBitAndOldPlans) {
  const Spec s = parse_spec(one_tensor_spec(
      R"({"name": "w", "shape": [8, 6], "dtype": "bf16", "src": {"mesh": "a", "spec": ["x"]},
          "dst": {"mesh": "b", "spec": [null, "y"], "dtype": "f8e5m2"}})"));
  const Plan plan = make_plan(s.input);
  std::vector<uint8_t> bytes = encode_plan(plan);
  fb::Plan* root = fb::GetMutablePlan(bytes.data());
  EXPECT_EQ(root->required_features(), kPlanFeatureCasts);
  const Plan back = decode_plan(bytes);
  EXPECT_EQ(back.tensors()[0].dst_dtype, DType::kF8E5M2);
  EXPECT_EQ(back.fingerprint(), plan.fingerprint());
  EXPECT_EQ(encode_plan(back), bytes);
  const auto corrupt = testing::expect_plan_corrupt;
  std::vector<uint8_t> no_bit = bytes;
  fb::GetMutablePlan(no_bit.data())->mutate_required_features(0);
  corrupt(no_bit, "tensors[0].dst_dtype: present but required_features lacks the casts bit");
  std::vector<uint8_t> int_cast = bytes;
  fb::GetMutablePlan(int_cast.data())
      ->mutable_tensors()
      ->GetMutableObject(0)
      ->mutate_dst_dtype(fb::DType::I8);
  corrupt(int_cast, "no cast from bf16 to i8");
  // The same inputs without a cast: no bit, and the bit alone is refused.
  PlanInput plain = s.input;
  plain.tensors[0].dst_dtype = DType{};
  std::vector<uint8_t> p = encode_plan(make_plan(plain));
  EXPECT_EQ(fb::GetMutablePlan(p.data())->required_features(), 0u);
  // Absent, not a stored 0 (the encoder forces defaults): the bytes of a
  // plan without casts are what they were before casts existed.
  EXPECT_FALSE(
      reinterpret_cast<const flatbuffers::Table*>(fb::GetMutablePlan(p.data())->tensors()->Get(0))
          ->CheckField(fb::Tensor::VT_DST_DTYPE));
  fb::GetMutablePlan(p.data())->mutate_required_features(kPlanFeatureCasts);
  corrupt(p, "has the casts bit (8) but no tensor has a dst_dtype");
  // Written by an earlier reshard (tests/data/README.md).
  std::ifstream f(std::string(RESHARD_SOURCE_DIR) + "/tests/data/scratch_tree.rsplan",
                  std::ios::binary);
  const std::vector<uint8_t> old((std::istreambuf_iterator<char>(f)),
                                 std::istreambuf_iterator<char>());
  ASSERT_FALSE(old.empty());
  const Plan o = decode_plan(old);
  for (const TensorSpec& t : o.tensors()) EXPECT_FALSE(has_cast(t));
  EXPECT_EQ(encode_plan(o), old);
}

// Copies on the host at once: the engine's device path (run_copies with
// CopyOp::kCast) on the CPU.
class HostCopiesTransport final : public testing::OneProcessDeviceTransport {
 public:
  HostCopiesTransport() : OneProcessDeviceTransport("cast emulation") {}
  void run_copies(int64_t, int32_t, std::span<const CopyOp> ops) override {
    for (const CopyOp& op : ops) testing::apply_copy_op(op, op.src, op.dst);
  }
};

// Invariant: random layouts (tests/core/random_cases.h, sources not
// partial) whose float tensors get a random destination dtype: the
// destination equals the reference cast of the source's global array, bit
// for bit, on the host executor and through the engine's device path; the
// plan round-trips through the wire format.
TEST(Cast, RandomLayoutsMeetTheReferenceCast) {
  const DType floats[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
  testing::CaseOptions o;
  o.allow_partial = false;
  o.max_devices = 16;
  int casts = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::CaseGen gen(seed * 7919, o);
    // One process, its processes' hosts kept (relays still cross hosts).
    PlanInput in = testing::in_one_process(gen.input(), 1, true);
    for (TensorSpec& t : in.tensors) {
      if (t.dtype == DType::kF64 || !dtype_is_float(t.dtype)) t.dtype = floats[gen.uni(0, 4)];
      const DType to = floats[gen.uni(0, 4)];
      if (to != t.dtype) {
        t.dst_dtype = to;
        ++casts;
      }
    }
    if (seed % 3 == 0) in.options.staging_budget_bytes = 4096;
    const Plan plan = decode_plan(encode_plan(make_plan(in)));
    OracleBuffers buf = fill_sources(plan);
    execute_host(plan, buf.views());
    const OracleReport report = check_destinations(plan, buf);
    ASSERT_TRUE(report.ok()) << "seed " << seed << ": " << report.mismatches << " mismatches";
    Engine engine(std::make_unique<HostCopiesTransport>());
    testing::expect_same_as_host(engine, plan);
  }
  EXPECT_GT(casts, 40);
}

// Invariant: the MPI tests' relay specs (stage-1 relays across and inside
// hosts) with every tensor cast, executed by one engine per process over
// in-process transports (messages packed with the cast on their sender,
// unpacked with it on their receiver, relays forwarding the destination's
// dtype or narrowing it back), host and device paths, with and without a
// staging budget: the oracle's reference cast, bit for bit.
TEST(Cast, RelaySpecsAcrossProcessesMeetTheReferenceCast) {
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(RESHARD_SOURCE_DIR) + "/tests/mpi/specs"))
    if (e.path().filename().string().rfind("relay_", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 10u);
  // Narrowing (relays forward f8), widening (relays narrow f32 back to bf16),
  // same size (cast on the receiver, relays forward f16).
  const DType to[] = {DType::kF8E4M3, DType::kF32, DType::kF16, DType::kF8E5M2};
  int staged = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i].filename().string());
    PlanInput in = load_spec(files[i].string()).input;
    for (size_t t = 0; t < in.tensors.size(); ++t) {
      ASSERT_FALSE(in.tensors[t].src.partial() || in.tensors[t].dst.partial());
      in.tensors[t].dtype = DType::kBF16;
      in.tensors[t].dst_dtype = to[(i + t) % 4];
    }
    in.options.staging_budget_bytes = i % 2 == 0 ? 0 : 8192;
    staged += make_plan(in, {PlanScope::kGlobal}).stats().stages > 1;
    EXPECT_EQ(thread_transport::execute_parts_and_check(in, 5 + i, i % 3 == 0, i % 2 == 1), "");
  }
  EXPECT_GE(staged, 8);
}

}  // namespace
}  // namespace reshard
