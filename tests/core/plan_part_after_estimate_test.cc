// plan_part_after_estimate (reshard/plan.h): `reshard plan
// --process P --out F` plans the part on the decisions and the global
// statistics of the estimate it computed first, instead of computing them
// again in make_plan.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../bench/model_cases.h"
#include "plan/context.h"
#include "plan/each_part.h"
#include "reshard/error.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

// The 405B-shaped FSDP -> DP x TP8 case (bench/model_cases.h: 2 layers, 256
// devices, 8 a host, relays inside hosts, the single-hop guard's tries),
// with and without a staging budget (rounds cut by the global figures):
// the part, its file bytes and the estimate are those of estimate_plan
// then make_plan, and the part's planning computes no statistics pass.
// Processes 0 and 5 on each budget; below full scale (the sanitizer builds,
// where the four took 135 s) process 0 on the first and 5 on the second.
TEST(PlanPartAfterEstimate, PartTakesTheEstimatesDecisionsAndStatistics) {
  bench::ModelShape m;
  m.layers = 2;
  for (int64_t budget : {int64_t{0}, int64_t{4} << 20}) {
    PlanInput in = bench::transformer_case(m, 256, 0, 256, 8, 8);
    in.options.staging_budget_bytes = budget;
    for (int32_t p : {0, 5}) {
      if (RESHARD_TEST_SCALE < 100 && (p == 0) != (budget == 0)) continue;
      const PlanRequest whole{PlanScope::kAll, p, true}, part{PlanScope::kProcess, p, true};
      int64_t before = planning::stats_passes();
      PlanStats st_two;
      const PlanEstimate e_two = estimate_plan(in, whole, &st_two);
      const int64_t estimate_passes = planning::stats_passes() - before;
      const Plan two = make_plan(in, part);
      const int64_t two_passes = planning::stats_passes() - before;
      before = planning::stats_passes();
      PlanStats st_one;
      PlanEstimate e_one;
      int checked = 0;
      const Plan one =
          plan_part_after_estimate(in, whole, part, &st_one, [&](const PlanEstimate& e) {
            e_one = e;
            ++checked;
            EXPECT_EQ(planning::stats_passes() - before, estimate_passes);
          });
      const int64_t one_passes = planning::stats_passes() - before;
      EXPECT_EQ(checked, 1);
      EXPECT_GT(two_passes, estimate_passes) << "make_plan computed its statistics";
      EXPECT_EQ(one_passes, estimate_passes) << "budget " << budget << " process " << p;
      EncodeOptions eo;
      eo.all_parts = false;
      eo.process = p;
      EXPECT_EQ(encode_plan(one, eo), encode_plan(two, eo))
          << "budget " << budget << " process " << p;
      EXPECT_EQ(e_one.memory_bytes, e_two.memory_bytes);
      EXPECT_EQ(e_one.process_encoded_bytes, e_two.process_encoded_bytes);
      EXPECT_EQ(st_one.network_bytes, st_two.network_bytes);
      EXPECT_EQ(st_one.messages, st_two.messages);
      EXPECT_EQ(st_one.rounds, st_two.rounds);
      EXPECT_EQ(st_one.cost_seconds, st_two.cost_seconds);
    }
  }
}

// A check that throws stops before the part; requests that would not decide
// alike (another memory limit) take the two calls.
TEST(PlanPartAfterEstimate, ACheckThatThrowsStopsAndUnlikeRequestsPlanApart) {
  bench::ModelShape m;
  m.layers = 1;
  const PlanInput in = bench::transformer_case(m, 64, 0, 64, 8, 8);
  const PlanRequest whole{PlanScope::kAll, 1, true}, part{PlanScope::kProcess, 1, true};
  EXPECT_THROW(plan_part_after_estimate(in, whole, part, nullptr,
                                        [](const PlanEstimate&) {
                                          throw Error(ErrorCode::kResourceExhausted, "too large");
                                        }),
               Error);
  PlanRequest other = part;
  other.max_plan_bytes = kUnlimitedPlanBytes;
  const int64_t before = planning::stats_passes();
  const Plan apart = plan_part_after_estimate(in, whole, other, nullptr, nullptr);
  EXPECT_GT(planning::stats_passes() - before, 1);
  EncodeOptions eo;
  eo.all_parts = false;
  eo.process = 1;
  EXPECT_EQ(encode_plan(apart, eo), encode_plan(make_plan(in, other), eo));
}

}  // namespace
}  // namespace reshard
