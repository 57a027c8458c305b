// Scratch in the plan format (schema/plan.fbs, ProcessPart.scratch_*,
// PlanStats.max_scratch_bytes, required_features bit 2): exact round trips
// of hand-built reduction trees, and every semantic check of the decoder
// with the error code and the field it names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/plan_builder.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/plan_generated.h"
#include "reshard/wire.h"
#include "scratch_plans.h"

namespace reshard {
namespace {

using namespace scratch_plans;  // NOLINT(google-build-using-namespace)

Plan scratch_plan(bool host_process = false) {
  TreeCase c;
  c.per_host = {2, 3};
  c.rounds = 2;
  c.host_process = host_process;
  return tree_plan(c);
}

TEST(WireScratch, RoundTripIsExactAndExecutes) {
  for (bool host_process : {false, true}) {
    const Plan plan = scratch_plan(host_process);
    const std::vector<uint8_t> bytes = encode_plan(plan);
    EXPECT_EQ(fb::GetPlan(bytes.data())->required_features(),
              kPlanFeatureStages | kPlanFeatureScratch);
    const Plan back = decode_plan(bytes);
    EXPECT_EQ(back.parts(), plan.parts());
    EXPECT_EQ(back.stats().max_scratch_bytes, plan.stats().max_scratch_bytes);
    EXPECT_GT(back.stats().max_scratch_bytes, 0);
    EXPECT_EQ(encode_plan(back), bytes);
    OracleBuffers buffers = fill_sources(back);
    const std::vector<TensorBuffers> views = buffers.views();
    execute_host(back, views);
    EXPECT_TRUE(check_destinations(back, buffers).ok());
    // One part at a time: the bit where that part holds or names scratch.
    for (const auto& [process, part] : plan.parts()) {
      EncodeOptions o;
      o.all_parts = false;
      o.process = process;
      const std::vector<uint8_t> one = encode_plan(plan, o);
      const uint64_t bit = fb::GetPlan(one.data())->required_features() & kPlanFeatureScratch;
      bool names = !part.scratch.empty();
      for (const auto* list : {&part.local, &part.send_pieces, &part.recv_pieces})
        for (const Piece& x : *list)
          names |= x.src_entry == kScratchEntry || x.dst_entry == kScratchEntry;
      EXPECT_EQ(bit != 0, names) << "process " << process;
      EXPECT_EQ(decode_plan(one).part(process), part);
    }
  }
}

TEST(WireScratch, DigestCoversTheScratch) {
  Plan plan = scratch_plan();
  std::vector<uint8_t> bytes = encode_plan(plan);
  fb::Plan* root = fb::GetMutablePlan(bytes.data());
  bool edited = false;
  for (flatbuffers::uoffset_t i = 0; i < root->parts()->size() && !edited; ++i) {
    fb::ProcessPart* p = root->mutable_parts()->GetMutableObject(i);
    if (p->scratch_hi() == nullptr) continue;
    p->mutable_scratch_hi()->Mutate(1, p->scratch_hi()->Get(1) - 1);
    edited = true;
  }
  ASSERT_TRUE(edited);
  expect_corrupt(bytes, {".digest"});
}

// In-place edits with the digests cleared (as in a plan written before
// digests), so that the semantic checks meet them.
class WireScratchMutation : public ::testing::Test {
 protected:
  void SetUp() override { set(encode_plan(scratch_plan())); }
  void set(std::vector<uint8_t> bytes) {
    bytes_ = std::move(bytes);
    for (flatbuffers::uoffset_t i = 0; i < root()->parts()->size(); ++i)
      ASSERT_TRUE(part(i)->mutate_digest(0));
    ASSERT_TRUE(root()->mutate_parts_digest(0));
    // Without the list of part digests either (empty reads as absent).
    if (const auto* list = root()->part_digests(); list != nullptr) {
      const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(list) - bytes_.data());
      flatbuffers::WriteScalar<uint32_t>(bytes_.data() + at, 0);
    }
  }
  fb::Plan* root() { return fb::GetMutablePlan(bytes_.data()); }
  fb::ProcessPart* part(flatbuffers::uoffset_t i) {
    return root()->mutable_parts()->GetMutableObject(i);
  }
  // The first part holding scratch (a holder host's leader) and its index.
  fb::ProcessPart* leader(size_t* index = nullptr) {
    for (flatbuffers::uoffset_t i = 0; i < root()->parts()->size(); ++i) {
      if (part(i)->scratch_tensor() != nullptr && part(i)->scratch_tensor()->size() > 0) {
        if (index) *index = i;
        return part(i);
      }
    }
    return nullptr;
  }
  std::string field(const char* name) {
    size_t i = 0;
    leader(&i);
    return "parts[" + std::to_string(i) + "]." + name;
  }
  std::vector<uint8_t> bytes_;
};

TEST_F(WireScratchMutation, UnmodifiedBufferDecodes) {
  ErrorCode code = ErrorCode::kOk;
  EXPECT_EQ(decode_error(bytes_, &code), "");
}

TEST_F(WireScratchMutation, FeatureBits) {
  const auto original = bytes_;
  ASSERT_TRUE(root()->mutate_required_features(root()->required_features() | 256));
  expect_corrupt(bytes_, {"required_features", "unknown"});
  bytes_ = original;
  ASSERT_TRUE(root()->mutate_required_features(kPlanFeatureStages));
  expect_corrupt(bytes_, {field("scratch_tensor").c_str(), "scratch bit"});
  // The bit without scratch, in a plan of no scratch.
  TensorSpec t;
  t.name = "w";
  t.shape = {4, 2};
  t.src = Layout::from_boxes(t.shape, {{0, 0, rows(0, 4, 2)}, {1, 1, rows(0, 4, 2)}}, 2,
                             ReduceOp::kSum, "src");
  t.dst = Layout::from_boxes(t.shape, {{2, 0, rows(0, 4, 2)}}, 1, ReduceOp::kSum, "dst");
  PlanInput in;
  in.tensors.push_back(t);
  set(encode_plan(make_plan(in)));
  ASSERT_TRUE(root()->mutate_required_features(root()->required_features() | kPlanFeatureScratch));
  expect_corrupt(bytes_, {"required_features", "no part holds scratch and no piece names one"});
}

// Late summands (required_features bit 4; plan.h, reads_source): pieces of
// stage 1 writing a scratch from source entries (the second half of a tree
// written in stage 1 and sent on in stage 2) round-trip exactly, set the
// bit, execute to the oracle's values, and are refused without it; the bit
// in a plan without such a piece is refused too.
TEST_F(WireScratchMutation, LateSummandsNeedTheirBit) {
  TreeCase c;
  c.per_host = {2, 3};
  c.rounds = 2;
  c.late = 1;
  const Plan plan = tree_plan(c);
  const std::vector<uint8_t> bytes = encode_plan(plan);
  EXPECT_EQ(fb::GetPlan(bytes.data())->required_features(),
            kPlanFeatureStages | kPlanFeatureScratch | kPlanFeatureLateSummands);
  const Plan back = decode_plan(bytes);
  EXPECT_EQ(back.parts(), plan.parts());
  EXPECT_EQ(encode_plan(back), bytes);
  OracleBuffers buffers = fill_sources(back);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(back, views);
  EXPECT_TRUE(check_destinations(back, buffers).ok());
  set(bytes);
  ASSERT_TRUE(
      root()->mutate_required_features(root()->required_features() & ~kPlanFeatureLateSummands));
  expect_corrupt(bytes_, {".src_entry", "a piece of stage 1", "late-summands bit (4)"});
  // The bit where no piece needs it.
  set(encode_plan(scratch_plan()));
  ASSERT_TRUE(
      root()->mutate_required_features(root()->required_features() | kPlanFeatureLateSummands));
  expect_corrupt(bytes_, {"required_features", "late-summands bit (4) but no piece"});
}

TEST_F(WireScratchMutation, ScratchBoxes) {
  const auto original = bytes_;
  // Empty (hi = lo in dim 1).
  leader()->mutable_scratch_hi()->Mutate(1, 0);
  expect_corrupt(bytes_, {(field("scratch_lo") + "[0]").c_str(), "empty or outside"});
  bytes_ = original;
  // Outside the shape.
  leader()->mutable_scratch_hi()->Mutate(1, kCols + 1);
  expect_corrupt(bytes_, {(field("scratch_lo") + "[0]").c_str(), "outside the shape"});
  bytes_ = original;
  // Of another rank: one bound fewer than the tensor's rank needs.
  ASSERT_TRUE(leader()->mutable_scratch_tensor()->size() == 2);
  {
    const auto* lo = leader()->scratch_lo();
    const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(lo) - bytes_.data());
    flatbuffers::WriteScalar(bytes_.data() + at, static_cast<flatbuffers::uoffset_t>(3));
  }
  expect_corrupt(bytes_, {field("scratch_lo").c_str(), "ranks need"});
  bytes_ = original;
  // On a device of another process (device 2 is on process 2).
  leader()->mutable_scratch_device()->Mutate(0, 2);
  expect_corrupt(bytes_, {(field("scratch_device") + "[0]").c_str(), "not on process"});
  bytes_ = original;
  // Unsorted: the halves swapped.
  {
    auto* lo = leader()->mutable_scratch_lo();
    auto* hi = leader()->mutable_scratch_hi();
    lo->Mutate(0, kRows / 2);
    hi->Mutate(0, kRows);
    lo->Mutate(2, 0);
    hi->Mutate(2, kRows / 2);
  }
  expect_corrupt(bytes_, {(field("scratch_tensor") + "[1]").c_str(), "order"});
  bytes_ = original;
  // Overlapping: the upper half starts inside the lower one.
  leader()->mutable_scratch_lo()->Mutate(2, 2);
  expect_corrupt(bytes_, {(field("scratch_lo") + "[1]").c_str(), "overlaps scratch 0"});
  bytes_ = original;
  // A tensor index out of range.
  leader()->mutable_scratch_tensor()->Mutate(0, 5);
  expect_corrupt(bytes_, {(field("scratch_tensor") + "[0]").c_str(), "out of range"});
}

TEST_F(WireScratchMutation, PiecesNamingScratch) {
  const auto original = bytes_;
  // A local piece writing a scratch without its region.
  leader()->mutable_local()->mutable_region()->Mutate(0, kOverlapRegion);
  expect_corrupt(bytes_, {(field("local") + "[0].region").c_str(), "names no region"});
  bytes_ = original;
  // A local piece writing a scratch the part does not hold (the scratch
  // narrowed to 5 of the 6 columns).
  leader()->mutable_scratch_hi()->Mutate(1, kCols - 1);
  expect_corrupt(bytes_, {(field("local") + "[0].dst_entry").c_str(), "does not hold"});
  bytes_ = original;
  // A stage-0 message reading a scratch: a holder's summand into its
  // leader's scratch (the leader's first received piece).
  leader()->mutable_recv_pieces()->mutable_src_entry()->Mutate(0, kScratchEntry);
  expect_corrupt(bytes_, {(field("recv_pieces") + "[0].src_entry").c_str(), "stage 0"});
}

// stats.max_scratch_bytes against the parts: below a device's scratch is
// refused whatever parts the plan holds; above the largest is refused in a
// plan holding every part and accepted in a plan of one part (the device
// holding the most may be elsewhere).
TEST(WireScratch, MaxScratchBytesMatchesTheParts) {
  const Plan plan = scratch_plan();
  const int64_t most = plan.stats().max_scratch_bytes;
  ASSERT_GT(most, 0);
  auto with = [](std::vector<uint8_t> bytes, int64_t v) {
    EXPECT_TRUE(fb::GetMutablePlan(bytes.data())->mutable_stats()->mutate_max_scratch_bytes(v));
    return bytes;
  };
  const std::vector<uint8_t> whole = encode_plan(plan);
  EXPECT_EQ(decode_plan(with(whole, most)).stats().max_scratch_bytes, most);
  expect_corrupt(with(whole, most - 1),
                 {"stats.max_scratch_bytes", "needs " + std::to_string(most)});
  expect_corrupt(with(whole, most + 1), {"stats.max_scratch_bytes", "every process's part"});
  int checked = 0;
  for (const auto& [process, part] : plan.parts()) {
    if (part.scratch.empty()) continue;
    EncodeOptions o;
    o.all_parts = false;
    o.process = process;
    const std::vector<uint8_t> one = encode_plan(plan, o);
    EXPECT_EQ(decode_plan(with(one, most + 1)).stats().max_scratch_bytes, most + 1);
    expect_corrupt(with(one, 0), {"stats.max_scratch_bytes", "bytes of scratch"});
    ++checked;
  }
  EXPECT_GT(checked, 1);
}

TEST(WireScratch, SendReadingScratchThePartDoesNotHoldIsRefused) {
  // The leader's own summands removed (no local piece writes the scratch),
  // the scratch narrowed: its sends are the first pieces checked.
  Plan plan = scratch_plan();
  bool edited = false;
  for (auto& [p, part] : Plan::Builder::parts(plan)) {
    if (part.scratch.empty()) continue;
    part.local.clear();
    for (Scratch& s : part.scratch) s.box.hi[1] = kCols - 1;
    edited = true;
    break;
  }
  ASSERT_TRUE(edited);
  expect_corrupt(encode_plan(plan), {"send_pieces[0].src_entry", "does not hold"});
}

TEST(WireScratch, ScratchOfATensorWithoutPartialSourceIsRefused) {
  TensorSpec t;
  t.name = "w";
  t.shape = {4, 2};
  t.src = Layout::from_boxes(t.shape, {{0, 0, rows(0, 4, 2)}}, 1, ReduceOp::kSum, "src");
  t.dst = Layout::from_boxes(t.shape, {{1, 0, rows(0, 4, 2)}}, 1, ReduceOp::kSum, "dst");
  PlanInput in;
  in.tensors.push_back(t);
  Plan plan = make_plan(in);
  set_parts(plan, {{0, 0, 0, 0, 0, kScratchEntry, rows(0, 4, 2)}}, {{0, 0, rows(0, 4, 2)}});
  // A copy staging (staging_test.cc) needs required_features bit 64.
  std::vector<uint8_t> bytes = encode_plan(plan);
  auto* root = fb::GetMutablePlan(bytes.data());
  ASSERT_NE(root->required_features() & kPlanFeatureStaging, 0u);
  root->mutate_required_features(root->required_features() & ~kPlanFeatureStaging);
  expect_corrupt(bytes, {"parts[0].scratch_tensor[0]", "lacks the staging bit (64)"});
}

}  // namespace
}  // namespace reshard
