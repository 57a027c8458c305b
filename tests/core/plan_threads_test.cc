// PlanRequest::threads changes how fast a plan is made, never the plan: the
// same inputs planned with 1, 2, 3 or 8 threads give equal parts, statistics
// and fingerprints and byte-identical encodings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "random_cases.h"
#include "reshard/error.h"
#include "reshard/plan.h"
#include "reshard/wire.h"
#include "test_scale.h"

namespace reshard {
namespace {

const std::vector<int32_t> kThreadCounts = {2, 3, 8};

PlanRequest request(PlanScope scope, int32_t process, bool stats, int32_t threads) {
  PlanRequest r;
  r.scope = scope;
  r.process = process;
  r.global_stats = stats;
  r.threads = threads;
  return r;
}

// Asserts that `in` plans identically with every thread count: the whole
// plan, and every `process_every`-th process part planned alone (with and
// without the global statistics), counted in `parts_checked`. Returns the
// single-threaded whole plan.
Plan expect_same_on_any_thread_count(const PlanInput& in, size_t process_every = 1,
                                     size_t* parts_checked = nullptr,
                                     const std::vector<int32_t>& thread_counts = kThreadCounts) {
  Plan base = make_plan(in, request(PlanScope::kAll, 0, true, 1));
  const std::vector<uint8_t> base_bytes = encode_plan(base);
  for (int32_t n : thread_counts) {
    SCOPED_TRACE("threads " + std::to_string(n));
    const Plan p = make_plan(in, request(PlanScope::kAll, 0, true, n));
    EXPECT_EQ(p.fingerprint(), base.fingerprint());
    EXPECT_EQ(p.parts(), base.parts());
    EXPECT_EQ(p.stats().per_device, base.stats().per_device);
    EXPECT_EQ(encode_plan(p), base_bytes) << "whole plan";
  }
  const std::vector<int32_t> processes = base.processes();
  for (size_t i = 0; i < processes.size(); i += process_every) {
    const int32_t proc = processes[i];
    SCOPED_TRACE("process " + std::to_string(proc));
    if (parts_checked) ++*parts_checked;
    EncodeOptions eo;
    eo.all_parts = false;
    eo.process = proc;
    const Plan one = make_plan(in, request(PlanScope::kProcess, proc, true, 1));
    EXPECT_EQ(one.part(proc), base.part(proc));
    const std::vector<uint8_t> one_bytes = encode_plan(one, eo);
    // The worker bytes of the whole plan carry the same part, and besides
    // it the list of every part's digest (which a part planned alone
    // cannot know).
    const Plan from_whole = decode_plan(encode_plan(base, eo));
    EXPECT_EQ(from_whole.part(proc), decode_plan(one_bytes).part(proc));
    EXPECT_EQ(from_whole.part_digests().size(), base.processes().size());
    for (int32_t n : thread_counts) {
      SCOPED_TRACE("threads " + std::to_string(n));
      const Plan p = make_plan(in, request(PlanScope::kProcess, proc, true, n));
      EXPECT_EQ(p.fingerprint(), base.fingerprint());
      EXPECT_EQ(p.part(proc), base.part(proc));
      EXPECT_EQ(encode_plan(p, eo), one_bytes) << "process part";
      const Plan bare = make_plan(in, request(PlanScope::kProcess, proc, false, n));
      EXPECT_EQ(bare.part(proc), base.part(proc)) << "part without global statistics";
    }
  }
  return base;
}

TEST(PlanThreads, RandomCasesPlanIdenticallyOnAnyThreadCount) {
  const int cases = scaled_cases(400);
  int64_t many_rounds = 0, with_regions = 0, multi_proc = 0, many_tensors = 0, disjoint = 0,
          partial = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    // Up to 16 tensors so that the tensor ranges planned concurrently hold
    // several tensors each, and sometimes the property test's shape.
    testing::CaseOptions o{5, 64, c % 3 == 0 ? 3 : 16, c % 2 ? 13 : 40, true, true};
    testing::CaseGen gen(70000 + static_cast<uint64_t>(c), o);
    const PlanInput in = gen.input();
    // Below full scale (the sanitizer builds: 113 s under ASan with every
    // part) the parts of every third process planned alone.
    const Plan base = expect_same_on_any_thread_count(in, RESHARD_TEST_SCALE >= 100 ? 1 : 3);
    ASSERT_FALSE(HasFailure());
    many_rounds += base.stats().rounds >= 10;
    multi_proc += base.processes().size() > 1;
    many_tensors += in.tensors.size() > 8;
    for (const auto& [p, part] : base.parts()) with_regions += !part.regions.empty();
    bool shared = false;
    for (const auto& t : in.tensors) {
      partial += t.src.partial() || t.dst.partial();
      for (const auto& se : t.src.entries())
        for (const auto& de : t.dst.entries()) shared |= se.device == de.device;
    }
    disjoint += !shared;
  }
  // The generator must exercise what the invariant is about.
  EXPECT_GT(many_rounds, cases / 10);
  EXPECT_GT(with_regions, cases / 10);
  EXPECT_GT(multi_proc, cases / 2);
  EXPECT_GT(many_tensors, cases / 5);
  EXPECT_GT(disjoint, cases / 20);
  EXPECT_GT(partial, cases / 10);
  std::printf(
      "%d cases: %lld with >= 10 rounds, %lld parts with regions, %lld multi-process, %lld with "
      "> 8 tensors, %lld disjoint, %lld partial tensors\n",
      cases, (long long)many_rounds, (long long)with_regions, (long long)multi_proc,
      (long long)many_tensors, (long long)disjoint, (long long)partial);
}

// A larger case than the random ones: 48 FSDP-sharded weights over 64
// devices (8 processes) to a dp=8 x tp=8 mesh, part overlapping, with a
// staging budget small enough for hundreds of rounds, so every tensor range,
// stream range and message range planned concurrently is busy. Below full
// scale (the sanitizer builds: 138 s under ASan and 81 s under TSan with
// 2, 3 and 8 threads) 3 threads alone (unequal ranges), and the parts of
// every (100 / RESHARD_TEST_SCALE)-th process planned alone: 1 of the 8
// (the sanitizer presets' 10).
TEST(PlanThreads, ManyTensorsAndRoundsPlanIdentically) {
  PlanInput in;
  auto src = std::make_shared<Mesh>();
  src->axis_names = {"fsdp"};
  src->shape = {64};
  src->devices.resize(64);
  std::iota(src->devices.begin(), src->devices.end(), 0);
  auto dst = std::make_shared<Mesh>();
  dst->axis_names = {"dp", "tp"};
  dst->shape = {8, 8};
  dst->devices.resize(64);
  std::iota(dst->devices.begin(), dst->devices.end(), 32);
  for (int64_t d = 0; d < 96; ++d)
    in.topology.add(DeviceInfo{d, static_cast<int32_t>(d / 12), static_cast<int32_t>(d / 24),
                               static_cast<int32_t>(d % 12)});
  for (int i = 0; i < 48; ++i) {
    TensorSpec t;
    t.name = "w" + std::to_string(i);
    t.shape = {96 + 8 * (i % 5), 40 + 3 * (i % 7)};
    t.dtype = i % 2 ? DType::kBF16 : DType::kF32;
    t.src = Layout::from_named({src, {{"fsdp"}, {}}, {}, ReduceOp::kSum}, t.shape, "src");
    t.dst = Layout::from_named({dst,
                                i % 3 == 0 ? std::vector<std::vector<std::string>>{{}, {"tp"}}
                                           : std::vector<std::vector<std::string>>{{"tp"}, {}},
                                {},
                                ReduceOp::kSum},
                               t.shape, "dst");
    in.tensors.push_back(std::move(t));
  }
  in.options.staging_budget_bytes = 2048;
  const size_t every = RESHARD_TEST_SCALE >= 100 ? 1 : 100 / std::max(RESHARD_TEST_SCALE, 1);
  size_t parts = 0;
  const Plan base = expect_same_on_any_thread_count(
      in, every, &parts, RESHARD_TEST_SCALE >= 100 ? kThreadCounts : std::vector<int32_t>{3});
  EXPECT_GT(base.stats().rounds, 100);
  EXPECT_EQ(base.processes().size(), 8u);
  EXPECT_EQ(parts, (8 + every - 1) / every) << "process parts planned alone";
}

// The error a plan fails with does not depend on the thread count: the
// first failing tensor in tensor order is reported, as a single thread
// meets it, though a later tensor's range may fail first.
TEST(PlanThreads, ErrorIsTheFirstInTensorOrder) {
  PlanInput in;
  for (int64_t d = 0; d < 4; ++d) in.topology.add(DeviceInfo{d, 0, 0, static_cast<int32_t>(d)});
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"x"};
  mesh->shape = {2};
  mesh->devices = {2, 3};
  for (int i = 0; i < 12; ++i) {
    TensorSpec t;
    t.name = "t" + std::to_string(i);
    t.shape = {8, 4};
    // Tensors 5 and up hold only rows [0, 4) at the source.
    LayoutEntry e;
    e.device = 0;
    e.box.rank = 2;
    e.box.hi[0] = i >= 5 ? 4 : 8;
    e.box.hi[1] = 4;
    t.src = Layout::from_boxes(t.shape, {e}, 1, ReduceOp::kSum, "src");
    t.dst = Layout::from_named({mesh, {{"x"}, {}}, {}, ReduceOp::kSum}, t.shape, "dst");
    in.tensors.push_back(std::move(t));
  }
  // No global statistics (no budget, no routes to pipeline): the part's
  // enumeration fails.
  in.options.staging_budget_bytes = 0;
  in.options.relays = false;
  in.options.reduce_scatter = false;
  for (int32_t n : {1, 2, 3, 8, 0}) {
    SCOPED_TRACE("threads " + std::to_string(n));
    try {
      // No limit: the memory estimate would need the global statistics,
      // whose enumeration would meet the error first.
      PlanRequest r = request(PlanScope::kProcess, 0, false, n);
      r.max_plan_bytes = kUnlimitedPlanBytes;
      (void)make_plan(in, r);
      ADD_FAILURE() << "planned a source that does not cover the destination";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("tensors[5].src"), std::string::npos) << e.what();
    }
  }
}

TEST(PlanThreads, NegativeThreadCountIsRejected) {
  testing::CaseGen gen(1);
  const PlanInput in = gen.input();
  try {
    (void)make_plan(in, request(PlanScope::kAll, 0, true, -1));
    ADD_FAILURE() << "accepted threads = -1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("request.threads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace reshard
