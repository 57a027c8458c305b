// The up-front refusal of plans whose statistics would track more device
// pairs than the limit allows (core/src/plan/stream_bound.h): refused from
// per-dimension arithmetic before anything is enumerated, and never for a
// plan that would fit, because the bound is a true lower bound.
#include "plan/stream_bound.h"

#include <gtest/gtest.h>

#include <ctime>
#include <memory>
#include <numeric>
#include <string>

#include "fsdp_to_tp8.h"
#include "plan/context.h"
#include "random_cases.h"
#include "reshard/error.h"
#include "reshard/plan.h"

namespace reshard {
namespace {

std::shared_ptr<Mesh> line(int64_t n, int64_t first = 0) {
  auto m = std::make_shared<Mesh>();
  m->axis_names = {"x"};
  m->shape = {n};
  m->devices.resize(static_cast<size_t>(n));
  std::iota(m->devices.begin(), m->devices.end(), first);
  return m;
}

Layout named(const std::shared_ptr<Mesh>& m, std::vector<std::vector<std::string>> dims,
             const std::vector<int64_t>& shape) {
  NamedSharding s;
  s.mesh = m;
  s.dims = std::move(dims);
  return Layout::from_named(s, shape, "t");
}

// 65,536 devices all-gathering a 65,536-element tensor (the 195-byte spec of
// issue 15): every device needs a piece from every other, 2^32 - 2^16 pairs.
PlanInput all_gather(int64_t n) {
  PlanInput in;
  auto m = line(n);
  for (int64_t d = 0; d < n; ++d) in.topology.add(DeviceInfo{d, 0, 0, 0});
  TensorSpec t;
  t.name = "t";
  t.shape = {n};
  t.dtype = DType::kF32;
  t.src = named(m, {{"x"}}, t.shape);
  t.dst = named(m, {{}}, t.shape);
  in.tensors.push_back(t);
  return in;
}

int64_t least_pairs(const PlanInput& in) {
  planning::Context ctx(in);
  ctx.build();
  return planning::min_device_pairs(ctx);
}

TEST(StreamBound, AllGatherOverEveryDeviceIsRefusedBeforeEnumerating) {
  const PlanInput in = all_gather(65536);
  EXPECT_EQ(least_pairs(in), int64_t{65536} * 65535);
  for (PlanScope scope : {PlanScope::kGlobal, PlanScope::kAll}) {
    // CPU seconds, not wall: a loaded machine must not fail the test.
    const std::clock_t t0 = std::clock();
    try {
      make_plan(in, PlanRequest{scope, 0, true});
      FAIL() << "planned";
    } catch (const Error& e) {
      const double seconds = static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC;
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
      EXPECT_EQ(e.field(), "request.max_plan_bytes");
      const std::string m = e.what();
      EXPECT_NE(m.find("at least 4294901760 pairs"), std::string::npos) << m;
      EXPECT_NE(m.find("above the limit"), std::string::npos) << m;
      EXPECT_NE(m.find("coarser layout"), std::string::npos) << m;
      // The running guard took 20-34 s to get there.
      EXPECT_LT(seconds, 5.0);
    }
  }
  EXPECT_THROW(estimate_plan(in), Error);
  // No limit: nothing refused up front (not planned here: it would run for
  // minutes).
}

TEST(StreamBound, PlansThatFitAreNotRefused) {
  // 20,000 devices (sparse pair tracking) whose pairs are few: one device
  // gathers everything, and a shift by one device.
  PlanInput gather;
  const int64_t n = 20000;
  auto src = line(n);
  auto dst = line(1, n);
  for (int64_t d = 0; d <= n; ++d) gather.topology.add(DeviceInfo{d, 0, 0, 0});
  TensorSpec t;
  t.name = "t";
  t.shape = {n};
  t.dtype = DType::kF32;
  t.src = named(src, {{"x"}}, t.shape);
  t.dst = named(dst, {{}}, t.shape);
  gather.tensors.push_back(t);
  EXPECT_EQ(least_pairs(gather), n);
  PlanRequest tight{PlanScope::kGlobal, 0, true};
  tight.max_plan_bytes = 1;  // below the floor every plan's bookkeeping may use
  const Plan p = make_plan(gather, tight);
  int64_t pairs = 0;
  for (const DeviceTraffic& d : p.stats().per_device) pairs += d.recv_messages;
  EXPECT_EQ(pairs, n);
}

// The bound never exceeds the pairs the statistics count, on random cases
// where it applies (one host, or relays off), so it refuses nothing that
// would have fitted.
TEST(StreamBound, IsALowerBoundOnRandomCases) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    testing::CaseGen gen(seed);
    PlanInput in = gen.input();
    if (seed % 2 == 0) {
      in.options.relays = false;
    } else {
      Topology one;
      for (DeviceInfo d : in.topology.devices()) {
        d.host = 0;
        one.add(d);
      }
      in.topology = one;
    }
    const int64_t least = least_pairs(in);
    const Plan p = make_plan(in, PlanRequest{PlanScope::kGlobal, 0, true});
    int64_t pairs = 0;
    for (const DeviceTraffic& d : p.stats().per_device) pairs += d.recv_messages;
    ASSERT_LE(least, pairs) << "seed " << seed;
    applied += least > 0;
  }
  EXPECT_GT(applied, 100);  // the bound is not trivially 0
}

// fsdp_to_tp8(n) (fsdp_to_tp8.h), the 405B plan's shape of layouts
// (bench/plan_scale.py). Under the default staging budget the statistics meet
// each of the 8 destination cells' n/8 entries with the n source shards its
// box overlaps (pieces enumerated above 16,384 devices, each stream's bytes
// added for the round schedule below): n^2 visits; without a budget, below
// 16,384 devices, per-cell arithmetic visits each cell's regions and
// entries once: 8 (n + n/8).

// `how`: "about" (the count of compute_stats's first pass) or "at least"
// (the floor make_plan checks before any decision, plan/stats_work.h).
void expect_work_refusal(const PlanInput& in, const PlanRequest& r, const std::string& visits,
                         const std::string& limit, const std::string& how = "about") {
  try {
    make_plan(in, r);
    FAIL() << "planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    EXPECT_EQ(e.field(), "request.max_stats_pieces");
    const std::string m = e.what();
    EXPECT_NE(m.find("would visit " + how + " " + visits + " pieces"), std::string::npos) << m;
    EXPECT_NE(m.find("above the limit of " + limit), std::string::npos) << m;
    EXPECT_NE(m.find("raise the limit (-1: no limit)"), std::string::npos) << m;
  }
}

// 65,536 devices: the statistics' work (some 4.3 x 10^9 visits, half an
// hour of one core) is counted from the layouts and refused within seconds,
// on every scope that computes statistics and by estimate_plan.
TEST(StatsWork, FleetOf65536IsRefusedUpFront) {
  const PlanInput in = fsdp_to_tp8(65536);
  for (PlanScope scope : {PlanScope::kGlobal, PlanScope::kAll, PlanScope::kProcess}) {
    const std::clock_t t0 = std::clock();  // CPU seconds, not wall
    expect_work_refusal(in, PlanRequest{scope, 0, true}, "4,294,967,296", "2,147,483,648",
                        "at least");
    EXPECT_LT(static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC, 5.0);
  }
  try {
    estimate_plan(in);
    FAIL() << "estimated";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "request.max_stats_pieces") << e.what();
  }
}

// The count at a size that plans (2^20 visits; 8 x (1,024 + 128) without a
// budget): refused one below it, planned at it, and not checked without a
// limit (-1) or without a memory limit.
TEST(StatsWork, LimitIsTheCountedVisits) {
  PlanInput in = fsdp_to_tp8(1024);
  PlanRequest r{PlanScope::kGlobal, 0, true};
  r.max_stats_pieces = 1048575;
  expect_work_refusal(in, r, "1,048,576", "1,048,575");
  r.max_stats_pieces = 1048576;
  EXPECT_EQ(make_plan(in, r).stats().pieces, 1048576);
  in.options.staging_budget_bytes = 0;
  r.max_stats_pieces = 9215;
  expect_work_refusal(in, r, "9,216", "9,215", "at least");
  r.max_stats_pieces = 9216;
  make_plan(in, r);
  r.max_stats_pieces = -1;
  make_plan(in, r);
  r.max_stats_pieces = 1;
  r.max_plan_bytes = kUnlimitedPlanBytes;
  make_plan(in, r);
  r.max_stats_pieces = -2;
  try {
    make_plan(in, r);
    FAIL() << "planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "request.max_stats_pieces");
  }
}

}  // namespace
}  // namespace reshard
