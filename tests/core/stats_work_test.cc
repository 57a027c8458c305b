// Work and plan bytes known before planning (issue 36): the floor of the
// global statistics' piece visits that make_plan checks right after
// building its context (core/src/plan/stats_work.h), and the plan bytes of
// one process's part that estimate_plan reports beside every part's
// (PlanEstimate::process_*).
#include "plan/stats_work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>

#include "fsdp_to_tp8.h"
#include "plan/context.h"
#include "random_cases.h"
#include "reshard/error.h"
#include "reshard/plan.h"
#include "reshard/wire.h"
#include "test_scale.h"

namespace reshard {
namespace {

// Whether one statistics pass over a fresh context of `in` (schedule on or
// off) refuses at `limit` piece visits.
bool pass_refuses(const PlanInput& in, int64_t limit, bool schedule) {
  planning::Context ctx(in);
  ctx.build();
  ctx.max_stats_pieces = limit;
  PlanStats st;
  try {
    planning::compute_stats(ctx, st, ctx.staging_options(), schedule, nullptr, -1);
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "request.max_stats_pieces") << e.what();
    return true;
  }
  return false;
}

// Oracle: the statistics' own count (compute_stats's check on its first
// pass, with or without the round schedule, with or without a budget, and
// relays on or off) is never below the floor, so a pass refuses one visit
// below it; the floor refuses make_plan only where that pass would.
TEST(StatsWork, FloorIsNeverAboveAPassCount) {
  const int cases = scaled_cases(200, 40);
  int positive = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseOptions o{4, 64, c % 3 == 0 ? 1 : 6, c % 2 ? 13 : 40, true, true};
    testing::CaseGen gen(36000 + static_cast<uint64_t>(c), o);
    PlanInput in = gen.input();
    if (c % 3 == 1) in.options.staging_budget_bytes = 0;
    if (c % 4 == 2) in.options.relays = false;
    if (c % 5 == 0) in.options.split_min_bytes = 16;
    planning::Context ctx(in);
    ctx.build();
    const int64_t floor = planning::stats_visits_floor(ctx);
    if (floor < 1) continue;
    ++positive;
    for (bool schedule : {false, true})
      EXPECT_TRUE(pass_refuses(in, floor - 1, schedule)) << "schedule " << schedule;
  }
  EXPECT_GE(positive, cases / 2);
}

// fsdp_to_tp8(n) (fsdp_to_tp8.h): above 16,384
// devices every piece is enumerated, so the floor is the statistics' count
// itself, n^2 (each of the 8 destination cells' n/8 entries meets the n
// source shards its box overlaps); at 1,024 devices without a budget, per
// cell the lesser of entries x regions and their sum: 8 (1,024 + 128).
TEST(StatsWork, FloorByHand) {
  {
    PlanInput in = fsdp_to_tp8(65536);
    planning::Context ctx(in);
    ctx.build();
    size_t groups = 0;
    EXPECT_EQ(planning::stats_visits_floor(ctx, &groups), int64_t{65536} * 65536);
    EXPECT_EQ(groups, 1u);
  }
  PlanInput in = fsdp_to_tp8(1024);
  in.options.staging_budget_bytes = 0;
  planning::Context ctx(in);
  ctx.build();
  EXPECT_EQ(planning::stats_visits_floor(ctx), 8 * (1024 + 128));
}

// The refusal at 65,536 devices comes before any decision (the device
// rule's layouts alone took seconds there): well within a second of CPU
// after the context is built, naming the floor, the limit and the field.
TEST(StatsWork, FleetOf65536IsRefusedBeforeAnyDecision) {
  const PlanInput in = fsdp_to_tp8(65536);
  const std::clock_t t0 = std::clock();
  try {
    make_plan(in, PlanRequest{PlanScope::kGlobal, 0, true});
    FAIL() << "planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(e.field(), "request.max_stats_pieces");
    const std::string m = e.what();
    EXPECT_NE(m.find("would visit at least 4,294,967,296 pieces"), std::string::npos) << m;
    EXPECT_NE(m.find("above the limit of 2,147,483,648"), std::string::npos) << m;
  }
  EXPECT_LT(static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC, 5.0);
}

// Invariant: the figures of request.process's part bracket its plan bytes:
// process_least_encoded_bytes <= encode_plan of the part <=
// process_encoded_bytes, and it counts the part's messages exactly, under
// any budget, with scope kAll (every part's figures beside it) or
// kProcess.
TEST(PartBytes, EstimateBracketsTheEncodedPart) {
  const int cases = scaled_cases(60, 15);
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseOptions o{4, 64, c % 3 == 0 ? 3 : 8, c % 2 ? 13 : 40, true, true};
    testing::CaseGen gen(36500 + static_cast<uint64_t>(c), o);
    PlanInput in = gen.input();
    if (c % 3 == 0) in.options.staging_budget_bytes = 4096 + 97 * c;  // many rounds and cuts
    if (c % 3 == 1) in.options.staging_budget_bytes = 0;
    if (c % 5 == 0) in.options.split_min_bytes = 16;
    const Plan whole = make_plan(in);
    for (int32_t p : whole.processes()) {
      SCOPED_TRACE("process " + std::to_string(p));
      PlanRequest all{PlanScope::kAll, p, true};
      all.max_plan_bytes = kUnlimitedPlanBytes;
      const PlanEstimate e = estimate_plan(in, all);
      PlanRequest one{PlanScope::kProcess, p, true};
      one.max_plan_bytes = kUnlimitedPlanBytes;
      const PlanEstimate e1 = estimate_plan(in, one);
      EXPECT_EQ(e1.process_encoded_bytes, e.process_encoded_bytes);
      EXPECT_EQ(e1.process_least_encoded_bytes, e.process_least_encoded_bytes);
      const Plan part = make_plan(in, one);
      const ProcessPart& pp = part.parts().at(p);
      EXPECT_EQ(e.process_messages, static_cast<int64_t>(pp.sends.size() + pp.recvs.size()));
      EncodeOptions eo;
      eo.all_parts = false;
      eo.process = p;
      const int64_t bytes = static_cast<int64_t>(encode_plan(part, eo).size());
      EXPECT_LE(e.process_least_encoded_bytes, bytes);
      EXPECT_GE(e.process_encoded_bytes, bytes);
    }
  }
}

// kGlobal, and a process that owns no device: no part, no figures.
TEST(PartBytes, NoPartNoFigures) {
  const PlanInput in = fsdp_to_tp8(64);
  PlanRequest r{PlanScope::kGlobal, 0, true};
  EXPECT_EQ(estimate_plan(in, r).process_encoded_bytes, 0);
  r.scope = PlanScope::kAll;
  r.process = 64;  // processes are 0..63
  EXPECT_EQ(estimate_plan(in, r).process_encoded_bytes, 0);
  r.process = 5;
  EXPECT_GT(estimate_plan(in, r).process_least_encoded_bytes, 0);
}

}  // namespace
}  // namespace reshard
