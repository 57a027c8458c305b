// Sub-messages in the plan format (schema/plan.fbs, Messages.sub,
// required_features bit 128): exact round trips of a planner plan whose
// messages are cut into several of one stage, round and devices, its
// execution against the oracle, and every check of the decoder with the
// error code and the field it names.
#include "sub_messages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/plan_builder.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/plan_generated.h"
#include "reshard/simulate.h"
#include "reshard/wire.h"
#include "scratch_plans.h"

namespace reshard {
namespace {

using scratch_plans::decode_error;
using scratch_plans::expect_corrupt;
using sub_messages::count_subs;
using sub_messages::relay_input;
using sub_messages::with_subs;

Plan sub_plan() { return with_subs(make_plan(relay_input()), 3); }

TEST(SubMessages, RoundTripIsExactAndExecutes) {
  const Plan plain = make_plan(relay_input());
  EXPECT_EQ(fb::GetPlan(encode_plan(plain).data())->required_features() & kPlanFeatureSubMessages,
            0u);
  const Plan plan = with_subs(plain, 3);
  ASSERT_GT(count_subs(plan), 0u);
  const std::vector<uint8_t> bytes = encode_plan(plan);
  EXPECT_NE(fb::GetPlan(bytes.data())->required_features() & kPlanFeatureSubMessages, 0u);
  const Plan back = decode_plan(bytes);
  EXPECT_EQ(back.parts(), plan.parts());
  EXPECT_EQ(encode_plan(back), bytes);
  OracleBuffers buffers = fill_sources(back);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(back, views);
  EXPECT_TRUE(check_destinations(back, buffers).ok());
  // One part at a time: the bit where that part has a sub above 0.
  for (const auto& [process, part] : plan.parts()) {
    EncodeOptions o;
    o.all_parts = false;
    o.process = process;
    const std::vector<uint8_t> one = encode_plan(plan, o);
    bool subs = false;
    for (const auto* list : {&part.sends, &part.recvs})
      for (const Message& m : *list) subs |= m.sub > 0;
    EXPECT_EQ((fb::GetPlan(one.data())->required_features() & kPlanFeatureSubMessages) != 0, subs)
        << "process " << process;
    EXPECT_EQ(decode_plan(one).part(process), part);
  }
}

// Invariant: a plan with subs executes to the oracle's values through
// execute_host and through the engine over the local transport (whole
// plan, 1 and 3 threads), with and without a staging budget (rounds cut;
// a process a device or a host).
TEST(SubMessages, EngineMatchesOracle) {
  for (const bool per_host : {false, true}) {
    for (const int64_t budget : {int64_t{0}, int64_t{2048}}) {
      const Plan plan = with_subs(make_plan(relay_input(per_host, budget)), 3);
      ASSERT_GT(count_subs(plan), 0u) << per_host << " " << budget;
      {
        OracleBuffers buffers = fill_sources(plan);
        const std::vector<TensorBuffers> views = buffers.views();
        execute_host(plan, views);
        EXPECT_TRUE(check_destinations(plan, buffers).ok()) << per_host << " " << budget;
      }
      for (int32_t threads : {1, 3}) {
        OracleBuffers buffers = fill_sources(plan);
        const std::vector<TensorBuffers> views = buffers.views();
        Engine engine(make_local_transport());
        ExecuteOptions o;
        o.threads = threads;
        engine.execute(plan, kAllProcesses, views, o);
        EXPECT_TRUE(check_destinations(plan, buffers).ok())
            << per_host << " " << budget << " threads " << threads;
      }
    }
  }
}

// Invariant: the simulator keeps sub-messages apart: plan_messages gives
// one SimMessage per sub, and a forward's sub waits only for the messages
// that brought its own pieces (here: the sub of the same index, as
// bench_forward_lag --stagger builds by hand), not for every sub of the
// stream; the streamed simulation (simulate_plan's path) and the one over
// plan_messages agree.
TEST(SubMessages, SimulatorKeepsSubsApart) {
  const Plan plain = make_plan(relay_input());
  const Plan plan = with_subs(plain, 3);
  const std::vector<SimMessage> m = plan_messages(plan);
  const std::vector<SimMessage> m0 = plan_messages(plain);
  size_t messages = 0;
  for (const auto& [p, part] : plan.parts()) messages += part.sends.size();
  ASSERT_EQ(m.size(), messages);
  ASSERT_GT(m.size(), m0.size());
  // Each forward's dependencies are messages of the same stream position:
  // a sub-message of a forward of pieces j.. waits for exactly one message
  // per feeding stream, whose bytes are its own (pieces cut alike).
  size_t forwards = 0;
  for (const SimMessage& s : m) {
    if (s.stage == 0) continue;
    ++forwards;
    ASSERT_FALSE(s.after.empty());
    for (uint32_t a : s.after) EXPECT_EQ(m[a].bytes, s.bytes);
  }
  EXPECT_GT(forwards, 0u);
  // Streamed and whole agree.
  ClusterTopology c;
  c.alpha_seconds = 1e-5;
  c.intra_host_bytes_per_second = 1e9;
  c.nic_bytes_per_second = 1e8;
  const double whole = simulate(plan.topology(), c, m).seconds;
  const double streamed = simulate_plan(plan, c).seconds;
  EXPECT_NEAR(streamed, whole, 1e-9 * whole);
}

// The sub column of the first part's sends that has one, and the index of
// its first message with sub 1.
struct SubColumn {
  fb::ProcessPart* part = nullptr;
  size_t part_index = 0;
  size_t at = 0;
};

SubColumn find_sub(std::vector<uint8_t>& bytes) {
  fb::Plan* root = fb::GetMutablePlan(bytes.data());
  for (flatbuffers::uoffset_t i = 0; i < root->parts()->size(); ++i) {
    fb::ProcessPart* p = root->mutable_parts()->GetMutableObject(i);
    const auto* sub = p->sends() ? p->sends()->sub() : nullptr;
    for (flatbuffers::uoffset_t k = 0; sub && k < sub->size(); ++k)
      if (sub->Get(k) == 1) return {p, i, k};
  }
  return {};
}

TEST(SubMessages, DigestCoversTheSub) {
  std::vector<uint8_t> bytes = encode_plan(sub_plan());
  SubColumn c = find_sub(bytes);
  ASSERT_NE(c.part, nullptr);
  fb::Messages* sends = c.part->mutable_sends();
  sends->mutable_sub()->Mutate(static_cast<flatbuffers::uoffset_t>(c.at), 7);
  expect_corrupt(bytes, {".digest"});
}

// In-place edits with the digests cleared (as in a plan written before
// digests), so that the semantic checks meet them.
class SubMessagesMutation : public ::testing::Test {
 protected:
  void SetUp() override { set(encode_plan(sub_plan())); }
  void set(std::vector<uint8_t> bytes) {
    bytes_ = std::move(bytes);
    fb::Plan* root = fb::GetMutablePlan(bytes_.data());
    for (flatbuffers::uoffset_t i = 0; i < root->parts()->size(); ++i)
      ASSERT_TRUE(root->mutable_parts()->GetMutableObject(i)->mutate_digest(0));
    ASSERT_TRUE(root->mutate_parts_digest(0));
    if (const auto* list = root->part_digests(); list != nullptr) {
      const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(list) - bytes_.data());
      flatbuffers::WriteScalar<uint32_t>(bytes_.data() + at, 0);
    }
  }
  fb::Plan* root() { return fb::GetMutablePlan(bytes_.data()); }
  std::string field(const SubColumn& c, size_t k) {
    return "parts[" + std::to_string(c.part_index) + "].sends[" + std::to_string(k) + "].sub";
  }
  std::vector<uint8_t> bytes_;
};

TEST_F(SubMessagesMutation, UnmodifiedBufferDecodes) {
  ErrorCode code = ErrorCode::kOk;
  EXPECT_EQ(decode_error(bytes_, &code), "");
}

TEST_F(SubMessagesMutation, SubsStrictlyIncrease) {
  const auto original = bytes_;
  // Equal to the previous message's sub (0).
  SubColumn c = find_sub(bytes_);
  ASSERT_NE(c.part, nullptr);
  auto* sub = c.part->mutable_sends()->mutable_sub();
  const auto at = static_cast<flatbuffers::uoffset_t>(c.at);
  sub->Mutate(at, 0);
  expect_corrupt(bytes_, {field(c, c.at), "is not above the previous message's sub 0"});
  // Below it: the next message (sub 2) set to 0.
  bytes_ = original;
  c = find_sub(bytes_);
  sub = c.part->mutable_sends()->mutable_sub();
  ASSERT_EQ(sub->Get(at + 1), 2u);
  sub->Mutate(at + 1, 0);
  expect_corrupt(bytes_, {field(c, c.at + 1), "is not above the previous message's sub 1"});
}

TEST_F(SubMessagesMutation, FeatureBit) {
  // A sub above 0 without the bit.
  ASSERT_TRUE(
      root()->mutate_required_features(root()->required_features() & ~kPlanFeatureSubMessages));
  const SubColumn c = find_sub(bytes_);
  ASSERT_NE(c.part, nullptr);
  expect_corrupt(bytes_, {".sub", "required_features lacks the sub-messages bit (128)"});
  // The bit in a plan without subs.
  set(encode_plan(make_plan(relay_input())));
  ASSERT_TRUE(
      root()->mutate_required_features(root()->required_features() | kPlanFeatureSubMessages));
  expect_corrupt(bytes_, {"required_features", "no message has a sub above 0"});
}

TEST_F(SubMessagesMutation, SubColumnSize) {
  // The sub column one value shorter than the message columns.
  const SubColumn c = find_sub(bytes_);
  ASSERT_NE(c.part, nullptr);
  const auto* sub = c.part->sends()->sub();
  const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(sub) - bytes_.data());
  flatbuffers::WriteScalar<uint32_t>(bytes_.data() + at, sub->size() - 1);
  expect_corrupt(bytes_, {"parts[" + std::to_string(c.part_index) + "].sends.sub"});
}

}  // namespace
}  // namespace reshard
