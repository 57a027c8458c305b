// The up-front refusal of plans whose statistics would track more device
// pairs than the limit allows (core/src/plan/stream_bound.h): refused from
// per-dimension arithmetic before anything is enumerated, and never for a
// plan that would fit, because the bound is a true lower bound.
#include "plan/stream_bound.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>

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
    const auto t0 = std::chrono::steady_clock::now();
    try {
      make_plan(in, PlanRequest{scope, 0, true});
      FAIL() << "planned";
    } catch (const Error& e) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

}  // namespace
}  // namespace reshard
