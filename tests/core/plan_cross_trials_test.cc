// Context::decide_device_cross prices its trials only as far as the
// decision needs (plan/cross_decision.cc): where the single-hop guard
// applies, a trial stops once provably above what it is compared with, and
// one group's decision is left open while the plan is above the single-hop
// plan by either rule. The decisions, and the plans, are those of every
// trial priced whole (the guard's stops off).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "plan/context.h"
#include "plan/estimate.h"
#include "relay_fleets.h"
#include "reshard/plan.h"
#include "reshard/wire.h"
#include "test_scale.h"

namespace reshard {
namespace {

using testing::mesh;
using testing::named;
using testing::one_tensor;

struct GuardOn {
  GuardOn() { planning::choice_override().single_hop = -1; }
  ~GuardOn() {
    planning::choice_override().single_hop = 0;
    planning::set_guard_stops(true);
  }
};

// decide_device_cross's decisions (the open one made), and its work.
struct Decided {
  std::vector<bool> cross;
  bool open = false;
  int64_t stops = 0, visits = 0;
};

Decided decide(const PlanInput& in, bool stops) {
  planning::set_guard_stops(stops);
  const int64_t limit = planning::resolve_limit(PlanRequest{}.max_plan_bytes);
  planning::Context ctx(in);
  ctx.build();
  ctx.decide_pre_reduce(limit);
  ctx.decide_reductions(limit);
  Decided d;
  const int64_t stopped = planning::guard_stops_taken();
  const int64_t visited = planning::relay_parts_visited();
  ctx.decide_device_cross(limit);
  d.open = ctx.device_cross_open();
  d.stops = planning::guard_stops_taken() - stopped;
  d.visits = planning::relay_parts_visited() - visited;
  ctx.settle_device_cross(limit, false);
  for (const planning::TensorCtx& t : ctx.tensors) d.cross.push_back(t.device_cross);
  return d;
}

// H hosts of D devices (the source, sharded by `src`) into R replicas of M
// devices on hosts of their own (the destination sharded in each), with
// `extra` like tensors of another shape (a second group).
PlanInput fleet(int64_t H, int64_t D, int64_t R, int64_t M, int src, bool dst_rows, int64_t rows,
                double alpha, int extra) {
  std::vector<int32_t> hosts;
  for (int64_t i = 0; i < H * D; ++i) hosts.push_back(static_cast<int32_t>(i / D));
  for (int64_t i = 0; i < R * M; ++i) hosts.push_back(static_cast<int32_t>(H + i / M));
  std::vector<std::vector<std::string>> sd(2), dd(2);
  if (src == 0) sd[0] = {"h", "d"};
  if (src == 1) sd[1] = {"h", "d"};
  if (src == 2) sd[0] = {"d"};
  dd[dst_rows ? 0 : 1] = {"k"};
  const NamedSharding s = named(mesh({"h", "d"}, {H, D}, 0), sd);
  const NamedSharding d = named(mesh({"r", "k"}, {R, M}, H * D), dd);
  PlanInput in = one_tensor({rows, 2048}, DType::kF32, s, d, hosts);
  for (int e = 0; e < extra; ++e) {
    TensorSpec t = in.tensors.front();
    t.name = "extra" + std::to_string(e);
    t.shape = {rows / 2, 1024};
    t.src = Layout::from_named(s, t.shape, "src");
    t.dst = Layout::from_named(d, t.shape, "dst");
    in.tensors.push_back(t);
  }
  in.options.alpha_seconds = alpha;
  in.options.staging_budget_bytes = int64_t{1} << 20;
  return in;
}

// 2 hosts of 4 devices (a shard on each device of a host) into 2 replicas
// of 8 devices, 4 MiB at α 50 µs: the plan is above the single-hop plan's
// estimate with and without the device rule, so the decision is left open,
// and neither trial is priced whole: 24 relay parts visited against 192 (the
// trials priced whole), and the same decision once made, and the same
// plan. Fails where trials are priced whole (no stop, nothing open).
TEST(PlanCrossTrials, TrialsAboveTheSingleHopPlanAreLeftOpen) {
  GuardOn on;
  const PlanInput in = fleet(2, 4, 2, 8, 2, false, 512, 5e-5, 0);
  const Decided whole = decide(in, false);
  const Decided fast = decide(in, true);
  EXPECT_EQ(fast.cross, whole.cross);
  EXPECT_FALSE(whole.open);
  EXPECT_TRUE(fast.open);
  EXPECT_EQ(whole.visits, 192);
  EXPECT_EQ(fast.visits, 24);
  EXPECT_EQ(fast.stops, 2);  // the plan without the rule and with it
  int64_t visits[2] = {0, 0};
  std::vector<uint8_t> bytes[2];
  for (int stops : {0, 1}) {
    planning::set_guard_stops(stops == 1);
    const int64_t before = planning::relay_parts_visited();
    bytes[stops] = encode_plan(make_plan(in));
    visits[stops] = planning::relay_parts_visited() - before;
  }
  EXPECT_EQ(bytes[1], bytes[0]);
  std::printf("relay parts visited planning: %lld whole, %lld stopped\n",
              static_cast<long long>(visits[0]), static_cast<long long>(visits[1]));
  EXPECT_LT(visits[1] * 4, visits[0]);
}

// f(input) on the sampled fleets of a grid (a trainer on H hosts of D
// devices feeding R replicas of M devices, sources and destinations laid
// out by rows or columns, small and large tensors, two α, one or two
// groups of like tensors), each under a trace naming it.
template <class F>
void each_fleet(F&& f) {
  int grid = 0;
  for (int64_t H : {2, 3})
    for (int64_t D : {2, 4})
      for (int64_t R = 2; R <= H; ++R)
        for (int64_t M : {4, 8})
          for (int src : {0, 1, 2})
            for (int64_t rows : {32, 512})
              for (double alpha : {1e-6, 5e-5})
                for (int extra : {0, 2}) {
                  if (!sampled_case(grid++)) continue;
                  const bool dst_rows = (grid % 2) == 0;
                  SCOPED_TRACE(std::to_string(H) + "x" + std::to_string(D) + " into " +
                               std::to_string(R) + "x" + std::to_string(M) + ", source " +
                               std::to_string(src) + (dst_rows ? ", rows" : ", columns") + ", " +
                               std::to_string(rows) + " rows, alpha " + std::to_string(alpha) +
                               ", extra " + std::to_string(extra));
                  f(fleet(H, D, R, M, src, dst_rows, rows, alpha, extra));
                }
}

// Random fleets (a trainer feeding inference replicas, one or two groups
// of like tensors): the device rule's decisions and the plans (and a
// process's part) with the trials stopped equal those of every trial
// priced whole; some trials stop, and some decisions are left open.
TEST(PlanCrossTrials, StoppedTrialsDecideAsWholeOnes) {
  GuardOn on;
  int cases = 0, stopped = 0, open = 0, crossed = 0;
  int64_t visits[2] = {0, 0};
  each_fleet([&](const PlanInput& in) {
    const Decided whole = decide(in, false);
    const Decided fast = decide(in, true);
    EXPECT_EQ(fast.cross, whole.cross);
    EXPECT_EQ(whole.stops, 0);
    EXPECT_FALSE(whole.open);
    ++cases;
    stopped += fast.stops > 0;
    open += fast.open;
    for (bool c : whole.cross) crossed += c;
    visits[0] += whole.visits;
    visits[1] += fast.visits;
    planning::set_guard_stops(false);
    const Plan full = make_plan(in);
    planning::set_guard_stops(true);
    const Plan plan = make_plan(in);
    EXPECT_EQ(encode_plan(plan), encode_plan(full));
    if (fast.stops == 0) return;  // a process part where trials stopped
    const int32_t p = full.processes().back();
    EXPECT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), full.part(p));
  });
  std::printf(
      "%d fleets: %d with a trial stopped, %d left open, %d tensors crossing; relay parts "
      "visited %lld whole, %lld stopped\n",
      cases, stopped, open, crossed, static_cast<long long>(visits[0]),
      static_cast<long long>(visits[1]));
  EXPECT_GT(stopped, 0);
  EXPECT_GT(open, 0);
  EXPECT_GT(crossed, 0);
  EXPECT_LT(visits[1], visits[0]);
}

// Every trial counted large (set_cross_trial_visits): a group is tried
// only where the plan without it is estimated above 1.10 times its lower
// bound (over all plans, so no trial could gain more). Over the fleets of
// the test above, where that skips a trial the priced ones would take, the
// plan is within 1.10 of its bound (the gate reads the right figures) and
// the groups it differs in are off, and where the plan is farther the
// trials are made as before (decisions equal).
TEST(PlanCrossTrials, LargeTrialsAreMadeOnlyFarFromTheBound) {
  GuardOn on;
  int changed = 0, tried = 0;
  each_fleet([&](const PlanInput& in) {
    const Decided priced = decide(in, true);
    const int64_t before = planning::set_cross_trial_visits(-1);
    const Decided gated = decide(in, true);
    const Plan plan = make_plan(in);
    planning::set_cross_trial_visits(before);
    EXPECT_LE(gated.visits, priced.visits);
    if (gated.cross == priced.cross) {
      for (bool c : gated.cross) tried += c;
      return;
    }
    ++changed;
    // A skipped trial leaves its group off, and every later
    // one is skipped too (the estimate only falls).
    for (size_t i = 0; i < gated.cross.size(); ++i) {
      if (gated.cross[i] != priced.cross[i]) {
        EXPECT_FALSE(gated.cross[i]);
      }
    }
    const PlanStats& st = plan.stats();
    EXPECT_LE(st.cost_seconds, 1.10 * st.lower_bound_cost_seconds);
  });
  std::printf("%d fleets' decisions changed by the gate; %d tensors crossing after trials\n",
              changed, tried);
  EXPECT_GT(changed, 0);
  EXPECT_GT(tried, 0);
}

}  // namespace
}  // namespace reshard
