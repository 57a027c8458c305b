// The in-process host executor (reshard/exec.h): random plans checked by the
// oracle, reductions, threading, and every validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/layout_helpers.h"
#include "core/oracle_describe.h"
#include "core/random_cases.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/numeric.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "test_scale.h"

namespace reshard {
namespace {

using testing::mesh_1d;
using testing::sharding;
using testing::tensor;

using testing::describe;

// Runs `plan` through the oracle with `threads` threads; returns the
// destination buffers.
std::vector<std::vector<std::vector<std::byte>>> run_oracle(const Plan& plan, int threads) {
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views, {threads});
  const OracleReport report = check_destinations(plan, buffers);
  EXPECT_TRUE(report.ok()) << describe(report);
  return buffers.dst;
}

// Invariant (random cases: ranks 0-5, uneven, cross-mesh, replicated,
// partial sources and destinations, explicit boxes, several processes):
// every destination element equals the oracle's value, with one thread and
// with several, and both give identical bytes.
TEST(HostExecutor, RandomPlansMatchOracleForAnyThreadCount) {
  int64_t partial = 0;
  for (int c = 0; c < scaled_cases(600); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseGen gen(5000 + static_cast<uint64_t>(c), {5, 32, 3, c % 2 ? 9 : 40, true, true});
    const PlanInput in = gen.input();
    const Plan plan = make_plan(in);
    for (const TensorSpec& t : plan.tensors()) partial += t.src.partial() || t.dst.partial();
    const auto one = run_oracle(plan, 1);
    const auto many = run_oracle(plan, 4);
    ASSERT_FALSE(::testing::Test::HasFailure());
    // Partial destinations may legitimately differ only if reduction order
    // differed; the executor fixes the order, so all bytes agree.
    ASSERT_EQ(one, many);
  }
  EXPECT_GT(partial, least_covered(60)) << "the generator must exercise partial layouts";
}

// Invariant: plans above the threading threshold (large pieces that get
// sliced by runs and by elements, many small pieces, reducing groups) give
// the oracle's values and the same bytes for 1, 3 and 8 threads.
TEST(HostExecutor, LargePlansAreSplitAcrossThreadsWithoutChangingResults) {
  auto a = mesh_1d({0, 1, 2, 3});
  auto b = mesh_1d({4, 5});
  auto c = mesh_1d({0, 1, 2, 3, 4, 5, 6, 7});
  PlanInput in;
  // Row shards to column shards: strided runs.
  in.tensors.push_back(tensor("rows_to_cols", {512, 768}, DType::kF32, sharding(a, {{"x"}, {}}),
                              sharding(b, {{}, {"x"}})));
  // Replicated to replicated on other devices: one contiguous run per piece.
  in.tensors.push_back(tensor("replicate", {3, 1 << 19}, DType::kBF16, sharding(a, {{}, {}}),
                              sharding(b, {{}, {}})));
  // Partial sum to sharded: one reducing group per destination entry.
  in.tensors.push_back(tensor("partial", {256, 1024}, DType::kBF16,
                              sharding(a, {{}, {}}, {"x"}, ReduceOp::kSum),
                              sharding(c, {{"x"}, {}})));
  // Partial max into a partial destination with fewer summands.
  in.tensors.push_back(tensor("partial_max", {64, 4096}, DType::kF16,
                              sharding(c, {{}, {}}, {"x"}, ReduceOp::kMax),
                              sharding(b, {{}, {}}, {"x"}, ReduceOp::kMax)));
  // Many tiny pieces.
  in.tensors.push_back(
      tensor("tiny", {8, 3}, DType::kI8, sharding(c, {{"x"}, {}}), sharding(a, {{}, {"x"}})));
  const Plan plan = make_plan(in);
  const auto one = run_oracle(plan, 1);
  const auto three = run_oracle(plan, 3);
  const auto eight = run_oracle(plan, 8);
  EXPECT_EQ(one, three);
  EXPECT_EQ(one, eight);
}

// Invariant: bf16 partial sums accumulate in f32 and round once. Summands
// 1, 2^-8, 2^-8 give 1 + 2^-7; rounding after each add would give 1.
TEST(HostExecutor, Bf16PartialSumRoundsOnce) {
  auto src = mesh_1d({0, 1, 2});
  auto dst = mesh_1d({3});
  PlanInput in;
  in.tensors.push_back(
      tensor("w", {5}, DType::kBF16, sharding(src, {{}}, {"x"}), sharding(dst, {{}})));
  const Plan plan = make_plan(in);
  const TensorSpec& t = plan.tensors()[0];
  ASSERT_EQ(t.src.num_entries(), 3u);
  std::vector<std::vector<uint16_t>> src_data(3);
  for (size_t e = 0; e < 3; ++e) {
    const float v = t.src.summand(e) == 0 ? 1.0f : std::ldexp(1.0f, -8);
    src_data[e].assign(5, numeric::f32_to_bf16(v));
  }
  std::vector<uint16_t> out(5, 0);
  std::vector<TensorBuffers> buffers(1);
  for (auto& s : src_data) buffers[0].src.push_back({s.data(), 10});
  buffers[0].dst.push_back({out.data(), 10});
  execute_host(plan, buffers);
  for (uint16_t v : out) EXPECT_EQ(numeric::bf16_to_f32(v), 1.0f + std::ldexp(1.0f, -7));
}

// Invariant: a mean divides the exact sum once, in the accumulation type,
// then rounds to the dtype: f32 summands 1, 2, 4 give 7/3 rounded once; bf16
// summands 1, 2^-8, 2^-8 give (1 + 2^-7) / 3 in f32, rounded once to bf16.
// Whole destinations (acc in place) and replicated ones alike, one thread
// and two.
TEST(HostExecutor, MeanDividesTheSumOnceInTheAccumulationType) {
  auto src = mesh_1d({0, 1, 2});
  auto dst = mesh_1d({3, 4});
  for (int threads : {1, 2}) {
    PlanInput in;
    in.tensors.push_back(tensor("f", {6}, DType::kF32, sharding(src, {{}}, {"x"}, ReduceOp::kMean),
                                sharding(dst, {{}})));
    in.tensors.push_back(tensor("b", {6}, DType::kBF16, sharding(src, {{}}, {"x"}, ReduceOp::kMean),
                                sharding(dst, {{"x"}})));
    const Plan plan = make_plan(in);
    std::vector<std::vector<float>> f(3);
    std::vector<std::vector<uint16_t>> b(3);
    for (size_t e = 0; e < 3; ++e) {
      const int32_t s = plan.tensors()[0].src.summand(e);
      f[e].assign(6, s == 0 ? 1.0f : s == 1 ? 2.0f : 4.0f);
      const int32_t sb = plan.tensors()[1].src.summand(e);
      b[e].assign(6, numeric::f32_to_bf16(sb == 0 ? 1.0f : std::ldexp(1.0f, -8)));
    }
    std::vector<std::vector<float>> fo(2, std::vector<float>(6, -1.0f));
    std::vector<std::vector<uint16_t>> bo(2, std::vector<uint16_t>(3, 0));
    std::vector<TensorBuffers> buffers(2);
    for (auto& s : f) buffers[0].src.push_back({s.data(), 24});
    for (auto& s : b) buffers[1].src.push_back({s.data(), 12});
    for (auto& o : fo) buffers[0].dst.push_back({o.data(), 24});
    for (auto& o : bo) buffers[1].dst.push_back({o.data(), 6});
    execute_host(plan, buffers, {threads});
    for (const auto& o : fo)
      for (float v : o) EXPECT_EQ(v, 7.0f / 3.0f);
    const uint16_t want = numeric::f32_to_bf16((1.0f + std::ldexp(1.0f, -7)) / 3.0f);
    for (const auto& o : bo)
      for (uint16_t v : o) EXPECT_EQ(v, want);
  }
}

// Invariant: a mean is refused where it has no meaning: on a partial
// destination and on an integer source, naming the field.
TEST(HostExecutor, MeanOnADestinationOrAnIntegerSourceIsRefused) {
  auto src = mesh_1d({0, 1});
  auto dst = mesh_1d({2, 3});
  PlanInput a;
  a.tensors.push_back(tensor("w", {4}, DType::kF32, sharding(src, {{}}, {"x"}, ReduceOp::kMean),
                             sharding(dst, {{}}, {"x"}, ReduceOp::kMean)));
  try {
    (void)make_plan(a);
    ADD_FAILURE() << "a partial mean destination was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tensors[0].dst.partial.op"), std::string::npos)
        << e.what();
  }
  PlanInput b;
  b.tensors.push_back(tensor("i", {4}, DType::kI32, sharding(src, {{}}, {"x"}, ReduceOp::kMean),
                             sharding(dst, {{}})));
  try {
    (void)make_plan(b);
    ADD_FAILURE() << "an integer mean was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tensors[0].src.partial.op"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
}

// Invariant: contributions fold in source summand order (s0, s1, s2, ...),
// whatever the device order and whichever piece is local, so results do not
// depend on placement. With f32 summands 2^24, 1, 1 that order gives 2^24
// (each +1 is a tie, rounding to even); the destination's own local summand
// first would give 2^24 + 2.
TEST(HostExecutor, PartialSumFoldsInSourceSummandOrder) {
  auto src = mesh_1d({5, 1, 3});  // summand i lives on devices()[i]
  auto dst = mesh_1d({3});
  PlanInput in;
  in.tensors.push_back(
      tensor("s", {2}, DType::kF32, sharding(src, {{}}, {"x"}), sharding(dst, {{}})));
  const Plan plan = make_plan(in);
  const Layout& l = plan.tensors()[0].src;
  std::vector<std::vector<float>> data(3);
  for (size_t e = 0; e < 3; ++e) data[e].assign(2, l.summand(e) == 0 ? 16777216.0f : 1.0f);
  std::vector<float> out(2, 0);
  std::vector<TensorBuffers> buffers(1);
  for (auto& d : data) buffers[0].src.push_back({d.data(), 8});
  buffers[0].dst.push_back({out.data(), 8});
  execute_host(plan, buffers);
  EXPECT_EQ(out, (std::vector<float>{16777216.0f, 16777216.0f}));
}

// Invariant: a partial destination fed by a whole source holds the value in
// its summand-0 shards and the identity everywhere else (its own previous
// contents are overwritten), so reducing its summands gives the value.
TEST(HostExecutor, PartialDestinationElementsWithoutContributionHoldTheIdentity) {
  auto src = mesh_1d({0});
  auto dst = mesh_1d({1, 2, 3});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    PlanInput in;
    in.tensors.push_back(
        tensor("v", {6}, DType::kF32, sharding(src, {{}}), sharding(dst, {{}}, {"x"}, op)));
    const Plan plan = make_plan(in);
    std::vector<float> value = {1, -2, 3, -4, 5, -6};
    std::vector<std::vector<float>> out(3, std::vector<float>(6, 123.0f));
    std::vector<TensorBuffers> buffers(1);
    buffers[0].src.push_back({value.data(), 24});
    for (auto& o : out) buffers[0].dst.push_back({o.data(), 24});
    execute_host(plan, buffers);
    const float inf = std::numeric_limits<float>::infinity();
    const float identity = op == ReduceOp::kSum ? 0.0f : op == ReduceOp::kMax ? -inf : inf;
    const Layout& l = plan.tensors()[0].dst;
    for (size_t e = 0; e < 3; ++e) {
      for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(out[e][i], l.summand(e) == 0 ? value[i] : identity)
            << reduce_op_name(op) << " entry " << e << " element " << i;
      }
    }
  }
}

// Invariant: integer partial sums wrap modulo 2^bits, like the element type.
TEST(HostExecutor, IntegerPartialSumsWrap) {
  auto src = mesh_1d({0, 1});
  auto dst = mesh_1d({0});
  PlanInput in;
  in.tensors.push_back(
      tensor("i", {2}, DType::kI8, sharding(src, {{}}, {"x"}), sharding(dst, {{}})));
  const Plan plan = make_plan(in);
  std::vector<int8_t> s0 = {100, -128};
  std::vector<int8_t> s1 = {100, -1};
  std::vector<int8_t> out(2, 0);
  std::vector<TensorBuffers> buffers(1);
  buffers[0].src = {{s0.data(), 2}, {s1.data(), 2}};
  buffers[0].dst = {{out.data(), 2}};
  execute_host(plan, buffers);
  EXPECT_EQ(out, (std::vector<int8_t>{-56, 127}));
}

// ---------------------------------------------------------------------------
// Validation: each bad input is kInvalidArgument naming the buffer, and
// nothing is written.

class HostExecutorErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = mesh_1d({0, 1});
    auto b = mesh_1d({2, 3, 4});
    in_.tensors.push_back(
        tensor("first", {6, 4}, DType::kF32, sharding(a, {{"x"}, {}}), sharding(b, {{}, {}})));
    in_.tensors.push_back(
        tensor("second", {9}, DType::kI16, sharding(a, {{}}), sharding(b, {{"x"}})));
    plan_ = make_plan(in_);
    oracle_ = fill_sources(plan_);
    views_ = oracle_.views();
    before_ = oracle_.dst;
  }

  // Expects kInvalidArgument whose message contains every one of `parts`,
  // and no destination byte changed.
  void expect_error(std::vector<std::string> parts, const Plan* plan = nullptr) {
    try {
      execute_host(plan ? *plan : plan_, views_);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      for (const std::string& p : parts) {
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << "message \"" << e.what() << "\" lacks \"" << p << "\"";
      }
    }
    EXPECT_EQ(oracle_.dst, before_) << "a failed call wrote into a destination";
  }

  PlanInput in_;
  Plan plan_;
  OracleBuffers oracle_;
  std::vector<TensorBuffers> views_;
  std::vector<std::vector<std::vector<std::byte>>> before_;
};

TEST_F(HostExecutorErrors, ValidBuffersPass) {
  execute_host(plan_, views_);
  EXPECT_TRUE(check_destinations(plan_, oracle_).ok());
}

TEST_F(HostExecutorErrors, WrongTensorCountNamesBuffers) {
  views_.pop_back();
  expect_error({"buffers", "1", "2"});
}

TEST_F(HostExecutorErrors, WrongEntryCountNamesTheSide) {
  views_[1].dst.pop_back();
  expect_error({"tensors[1].dst", "2", "3"});
  views_ = oracle_.views();
  views_[0].src.push_back(views_[0].src.back());
  expect_error({"tensors[0].src", "3"});
}

TEST_F(HostExecutorErrors, WrongByteSizeNamesTheBuffer) {
  views_[1].dst[2].bytes -= 2;
  expect_error({"tensors[1].dst[2]", "4 bytes"});
}

TEST_F(HostExecutorErrors, NullDataNamesTheBuffer) {
  views_[0].src[1].data = nullptr;
  expect_error({"tensors[0].src[1]", "null"});
}

TEST_F(HostExecutorErrors, DestinationOverlappingSourceNamesBoth) {
  // The last destination (6x4 f32) starts at the first source (3x4 f32).
  views_[0].dst[2].data = const_cast<void*>(views_[0].src[0].data);
  expect_error({"tensors[0].dst[2]", "overlaps", "tensors[0].src[0]"});
}

TEST_F(HostExecutorErrors, DestinationsOverlappingEachOtherAreRejected) {
  // Second tensor's destination 1 starts inside destination 0 of the first.
  auto* base = static_cast<std::byte*>(views_[0].dst[0].data);
  views_[1].dst[1].data = base + 8;
  expect_error({"overlaps", "tensors[0].dst[0]", "tensors[1].dst[1]"});
}

TEST_F(HostExecutorErrors, SourcesMayShareMemory) {
  // Replicas of the same source data may be one buffer.
  views_[1].src[1].data = views_[1].src[0].data;
  execute_host(plan_, views_);
  EXPECT_TRUE(check_destinations(plan_, oracle_).ok());
}

TEST(HostExecutorPlanErrors, PlanWithoutEveryPartIsRejected) {
  PlanInput in;
  for (int64_t d = 0; d < 4; ++d) in.topology.add({d, static_cast<int32_t>(d / 2), 0, 0});
  in.tensors.push_back(tensor("t", {8}, DType::kF32, sharding(mesh_1d({0, 1}), {{"x"}}),
                              sharding(mesh_1d({2, 3}), {{"x"}})));
  const Plan part = make_plan(in, {PlanScope::kProcess, 1, false});
  OracleBuffers buffers = fill_sources(part);
  const auto views = buffers.views();
  try {
    execute_host(part, views);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("process 0"), std::string::npos) << e.what();
  }
}

// Regression (issue 37): the host executor had no deadline, so a plan could
// keep it busy for as long as its copies took (a 1.2 MB plan once took 57 s
// on a 16 MB tensor). An execution running past timeout_seconds now ends
// with kTimeout naming it; with time enough the same plan is exact.
TEST(HostExecutorPlanErrors, ExecutionPastItsDeadlineIsATimeout) {
  auto a = mesh_1d({0, 1, 2, 3, 4, 5, 6, 7});
  auto b = mesh_1d({8, 9, 10, 11, 12, 13, 14, 15});
  PlanInput in;
  // 16 MB of rows to columns: strided copies, milliseconds of work.
  in.tensors.push_back(
      tensor("w", {4096, 1024}, DType::kF32, sharding(a, {{"x"}, {}}), sharding(b, {{}, {"x"}})));
  const Plan plan = make_plan(in);
  OracleBuffers buffers = fill_sources(plan);
  const auto views = buffers.views();
  for (const int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    try {
      execute_host(plan, views, {threads, 1e-4});
      ADD_FAILURE() << "16 MB copied within 0.1 ms: no deadline";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      EXPECT_NE(std::string(e.what()).find("timeout_seconds 0.0001 s"), std::string::npos)
          << e.what();
    }
  }
  for (const double bad : {0.0, -1.0, std::nan("")}) {
    try {
      execute_host(plan, views, {1, bad});
      ADD_FAILURE() << "timeout " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("timeout_seconds"), std::string::npos) << e.what();
    }
  }
  execute_host(plan, views, {2, 300});
  const OracleReport report = check_destinations(plan, buffers);
  EXPECT_TRUE(report.ok()) << describe(report);
}

}  // namespace
}  // namespace reshard
