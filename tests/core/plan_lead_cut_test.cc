// Lead parts down to cross_min_bytes (TensorCtx::fine_lead,
// Context::decide_lead_cut, docs/planner.md §5.1): relays inside a host cut
// a region that does not fall evenly on the host's entries into a part per
// entry from twice split_min_bytes a part; below that, one entry leads the
// whole region and every like tensor's ingress lands on the same entries.
// Groups of like tensors take parts down to cross_min_bytes where the whole
// plan's α–β estimate drops.
#include <gtest/gtest.h>

#include <cstdio>

#include "plan/context.h"
#include "plan/enumerate.h"
#include "relay_fleets.h"
#include "reshard/plan.h"

namespace reshard {
namespace {

using namespace testing::fleet_names;  // NOLINT(google-build-using-namespace)

struct FineLead {
  explicit FineLead(int v) { planning::choice_override().fine_lead = v; }
  ~FineLead() { planning::choice_override().fine_lead = -1; }
};

PlanStats stats_with(const PlanInput& in, int fine_lead) {
  const FineLead f(fine_lead);
  return make_plan(in, {PlanScope::kGlobal}).stats();
}

// `holders` devices of host 0 each hold the whole [512, 1024] f32 tensor
// (2 MiB); 4 devices of host 1 each need all of it. One region (n = 1) on
// M = 4 entries: 512 KiB a part, below twice split_min_bytes (1 MiB), at
// least cross_min_bytes (α = 5 µs at 25 GB/s: 31,250 bytes).
PlanInput replicated_into_four(int64_t holders, std::vector<int64_t> shape = {512, 1024}) {
  std::vector<int32_t> hosts(static_cast<size_t>(holders), 0);
  hosts.resize(static_cast<size_t>(holders + 4), 1);
  PlanInput in = one_tensor(shape, DType::kF32, named(mesh({"a"}, {holders}, 0), {{}, {}}),
                            named(mesh({"k"}, {4}, holders), {{}, {}}), hosts);
  in.options.alpha_seconds = 5e-6;
  in.options.inter_host_bytes_per_second = 25e9;
  in.options.intra_host_bytes_per_second = 100e9;
  in.options.staging_budget_bytes = 0;
  return in;
}

// By hand, 4 holders: the region (2 MiB >= split_min_bytes) is split over
// the holders either way. One leader takes 2 MiB in over its NIC and sends
// 3 x 2 MiB = 6 MiB to the others: at least 2 MiB / 25 GB/s = 83.9 µs. Four
// parts of 128 rows: each entry takes 512 KiB in (21.0 µs) and sends 3 x
// 512 KiB = 1.5 MiB over NVLink (15.7 µs); with an α each for the holders'
// sends and the forwards, at most 21.0 + 15.7 + 4 x 5 = 56.7 µs even with
// no overlap of the stages.
TEST(PlanLeadCut, PartsSpreadTheIngressOfRegionsBelowTwiceSplitMin) {
  const PlanInput in = replicated_into_four(4);
  const PlanStats whole = stats_with(in, 0), parts = stats_with(in, 1);
  const int64_t MiB = 1 << 20;
  EXPECT_EQ(whole.max_send_bytes, 6 * MiB);
  EXPECT_EQ(parts.max_send_bytes, 3 * MiB / 2);
  for (const PlanStats* st : {&whole, &parts}) {
    EXPECT_EQ(st->cross_host_bytes, 2 * MiB);
    EXPECT_EQ(st->max_recv_bytes, 2 * MiB);
    EXPECT_EQ(st->stages, 2);
  }
  EXPECT_GE(whole.cost_seconds, 2.0 * MiB / 25e9);
  EXPECT_LE(parts.cost_seconds, 0.5 * MiB / 25e9 + 1.5 * MiB / 100e9 + 4 * 5e-6);
  // The estimate's choice is the cheaper plan, and it executes exactly.
  const Plan chosen = make_plan(in);
  EXPECT_EQ(chosen.stats().max_send_bytes, parts.max_send_bytes);
  EXPECT_EQ(chosen.stats().cost_seconds, parts.cost_seconds);
  ASSERT_NO_FATAL_FAILURE(testing::execute_every_stage(chosen, 2));
  for (int32_t p : chosen.processes())
    ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), chosen.part(p))
        << "process " << p;
  std::printf("4 holders into 4 entries of a host: estimate %.1f us one leader, %.1f us parts\n",
              whole.cost_seconds * 1e6, parts.cost_seconds * 1e6);
}

// Each choice is the cheaper plan by the estimate, byte for byte: one or
// more holders into a replicated host at two α's and three sizes (the parts
// win all 12 that differ; where they cost more, the plan without them is
// kept, the decider's own comparison).
TEST(PlanLeadCut, TheEstimateChoosesTheCheaperPlan) {
  int parts_won = 0, whole_won = 0;
  for (int64_t holders : {1, 2, 4})
    for (int64_t rows : {32, 128, 512})
      for (double alpha : {5e-6, 5e-5}) {
        SCOPED_TRACE(std::to_string(holders) + " holders, " + std::to_string(rows) +
                     " rows, alpha " + std::to_string(alpha));
        PlanInput in = replicated_into_four(holders, {rows, 1024});
        in.options.alpha_seconds = alpha;
        const PlanStats whole = stats_with(in, 0), parts = stats_with(in, 1);
        const PlanStats chosen = make_plan(in, {PlanScope::kGlobal}).stats();
        const PlanStats& want = parts.cost_seconds < whole.cost_seconds ? parts : whole;
        EXPECT_EQ(chosen.cost_seconds, want.cost_seconds);
        EXPECT_EQ(chosen.max_send_bytes, want.max_send_bytes);
        EXPECT_EQ(chosen.messages, want.messages);
        if (parts.max_send_bytes == whole.max_send_bytes) continue;  // nothing to choose
        ++(&want == &parts ? parts_won : whole_won);
      }
  std::printf("fine lead parts taken in %d cases, refused in %d\n", parts_won, whole_won);
  EXPECT_GT(parts_won, 0);
}

// fine_lead reaches a plan only through relay_cut, which a route reads
// only where it does not cross hosts (Enumerator::route): a region routed
// across hosts is the same with it on or off, and fine_lead_differs does
// not count it. One holder on host 0 into R hosts of 2 entries each
// (replicated, [rows, 1024] f32): the one region (n = 1, M = 2) is at
// least cross_min_bytes a part and below twice split_min_bytes, so
// fine_lead would cut it, but R > 1 receiving hosts from one holder host
// cross (`few`). The statistics with fine_lead set on the tensor by hand
// equal those without (the oracle), and planning the estimate's choice
// runs no more passes than with fine_lead off: counting every region
// fine_lead cuts, the decider ran a whole pass per group where the plan
// sat above kNearBound times its bound (the DeepSeek-V3-class MoE sync at
// 4,096 devices, bench/plan_scale.py: 8 trial passes, 131 s against 17).
TEST(PlanLeadCut, RegionsThatCrossHostsAreNotTried) {
  int above = 0;
  for (int64_t R : {2, 4, 8})
    for (int64_t rows : {64, 256}) {
      SCOPED_TRACE(std::to_string(R) + " hosts, " + std::to_string(rows) + " rows");
      std::vector<int32_t> hosts = {0};
      for (int64_t i = 0; i < 2 * R; ++i) hosts.push_back(static_cast<int32_t>(1 + i / 2));
      PlanInput in = one_tensor({rows, 1024}, DType::kF32, named(mesh({"a"}, {1}, 0), {{}, {}}),
                                named(mesh({"r", "k"}, {R, 2}, 1), {{}, {}}), hosts);
      in.options.alpha_seconds = 5e-6;
      in.options.inter_host_bytes_per_second = 25e9;
      in.options.intra_host_bytes_per_second = 100e9;
      in.options.staging_budget_bytes = 0;
      // The oracle: fine_lead on by hand against off.
      PlanStats by_hand[2];
      for (int on : {0, 1}) {
        planning::Context ctx(in);
        ctx.build();
        ctx.tensors[0].fine_lead = on == 1;
        planning::compute_stats(ctx, by_hand[on], in.options, true);
      }
      EXPECT_EQ(by_hand[1].cost_seconds, by_hand[0].cost_seconds);
      EXPECT_EQ(by_hand[1].max_send_bytes, by_hand[0].max_send_bytes);
      EXPECT_EQ(by_hand[1].max_recv_bytes, by_hand[0].max_recv_bytes);
      EXPECT_EQ(by_hand[1].messages, by_hand[0].messages);
      EXPECT_EQ(by_hand[1].cross_host_bytes, by_hand[0].cross_host_bytes);
      EXPECT_EQ(by_hand[1].stages, by_hand[0].stages);
      // ... which fine_lead_cut alone would try (the region is cut).
      const PlanOptions o = in.options;
      planning::Enumerator en(o, false, true);
      planning::Context ctx(in);
      ctx.build();
      const Box whole = ctx.tensors[0].dst->box(0);
      EXPECT_TRUE(en.fine_lead_cut(ctx.tensors[0], 2, whole, 1));
      EXPECT_FALSE(en.relay_cut(ctx.tensors[0], 2, whole, 1));
      EXPECT_FALSE(en.fine_lead_differs(ctx.tensors[0]));
      // Passes: the estimate's choice against fine_lead off.
      int64_t passes[2] = {0, 0};
      PlanStats st[2];
      for (int i : {0, 1}) {
        const FineLead f(i == 0 ? 0 : -1);
        const int64_t before = planning::stats_passes();
        st[i] = make_plan(in, {PlanScope::kGlobal}).stats();
        passes[i] = planning::stats_passes() - before;
      }
      EXPECT_EQ(passes[1], passes[0]);
      EXPECT_EQ(st[1].cost_seconds, st[0].cost_seconds);
      above += st[0].cost_seconds > 1.10 * st[0].lower_bound_cost_seconds;
      std::printf("%ld hosts, %ld rows: %ld passes, estimate %.2f us, %.3fx its bound\n",
                  static_cast<long>(R), static_cast<long>(rows), static_cast<long>(passes[1]),
                  st[1].cost_seconds * 1e6, st[1].cost_seconds / st[1].lower_bound_cost_seconds);
    }
  // Where the plan is near its bound the decider stops after one pass
  // (which the global statistics take): the cases above it count.
  EXPECT_GT(above, 0);
}

}  // namespace
}  // namespace reshard
