// Relay bands sized to the device's NIC group (TensorCtx::band_scale,
// Context::decide_band_scale, docs/planner.md §5.4): bands of
// relay_chunk_bytes are 8 α of one NIC; a device behind a group of g NICs
// moves them g times faster at the same α, so plans whose devices share
// groups of g >= 2 NICs try bands of g, 2g, ... times relay_chunk_bytes and
// keep the largest that still lowers the whole plan's α–β estimate.
#include <gtest/gtest.h>

#include <cstdio>

#include "plan/enumerate.h"
#include "relay_fleets.h"
#include "reshard/plan.h"

namespace reshard {
namespace {

using namespace testing::fleet_names;  // NOLINT(google-build-using-namespace)

struct BandScale {
  explicit BandScale(uint32_t v) { planning::choice_override().band_scale = v; }
  ~BandScale() { planning::choice_override().band_scale = 0; }
};

PlanStats stats_with(const PlanInput& in, uint32_t scale) {
  const BandScale b(scale);
  return make_plan(in, {PlanScope::kGlobal}).stats();
}

// bench/specs/pipeline_2x2_replicated_dst.json on the H100 topology's
// costs, every size and α over 16 (the estimate's choices are the same; the
// plan executes in a fraction of the time): a [1024, 1024] f32 tensor
// sharded [x, y] over 4 devices of host 0 goes to [x, replicated] over 4
// devices of host 1, hosts of `nics` NICs. Each source device's 512 x 512
// block (1 MiB) enters one device of host 1 (stage 0), which forwards it to
// its mate (stage 1).
PlanInput pipeline_2x2(int32_t nics) {
  PlanInput in =
      one_tensor({1024, 1024}, DType::kF32, named(mesh({"x", "y"}, {2, 2}, 0), {{"x"}, {"y"}}),
                 named(mesh({"x", "y"}, {2, 2}, 4), {{"x"}, {}}), {0, 0, 0, 0, 1, 1, 1, 1});
  in.options.alpha_seconds = 5e-6 / 16;
  in.options.inter_host_bytes_per_second = 50e9;
  in.options.intra_host_bytes_per_second = 450e9;
  in.options.split_min_bytes = 1 << 16;
  in.options.nics_per_host = nics;
  in.options.staging_budget_bytes = 0;
  return in;
}

// By hand: relay_chunk_bytes = 8 x 0.3125 µs x 50 GB/s = 125,000 bytes; a
// block of 1 MiB = 1,048,576 bytes takes min(8, 1,048,576 / (125,000 s))
// bands at scale s: 8, 4, 2 and 1 at s = 1, 2, 4, 8. Every band is a piece
// of stage 0 and one of stage 1 on each of the 4 streams: 8 x bands pieces.
TEST(PlanBandScale, BandsAreRelayChunksTimesTheScale) {
  const PlanInput in = pipeline_2x2(8);
  const std::pair<uint32_t, int64_t> bands[] = {{1, 8}, {2, 4}, {4, 2}, {8, 1}};
  for (const auto& [scale, n] : bands) {
    const PlanStats st = stats_with(in, scale);
    EXPECT_EQ(st.pieces, 8 * n) << "scale " << scale;
    EXPECT_EQ(st.stages, 2);
    EXPECT_EQ(st.cross_host_bytes, int64_t{4} << 20);
  }
}

// 4 devices on a host of 8 NICs: groups of 2 NICs (reshard::nic_group), so
// the scales tried are 2, 4 and 8, in turn while each lowers the estimate.
// By the estimate the 8-band plan pays 8 α on each stream of stage 0; 4
// bands (scale 2) are below it (planner 40: 2 bands, scale 4, were lower
// still; since planner 41 a plan of two moving stages is also priced
// pipelined at 2 rounds, which lowers the 1-band plan and raises none, so
// scale 4 is now above scale 2 and the decider stops there). On hosts of 4
// NICs (one a device) nothing is tried: the plan is the scale-1 plan.
TEST(PlanBandScale, DevicesBehindTwoNicsTakeTheBandsTheEstimatePrefers) {
  // Keyed cuts and sub-messages off: since planner 41 they are priced on
  // this plan too, and the estimate they set (11.7 us) is the same at
  // every band scale.
  struct NoKeyed {
    NoKeyed() { planning::choice_override().keyed = -1; }
    ~NoKeyed() { planning::choice_override().keyed = 0; }
  } no_keyed;
  const PlanInput in = pipeline_2x2(8);
  double cost[9] = {};
  for (uint32_t s : {1u, 2u, 4u, 8u}) cost[s] = stats_with(in, s).cost_seconds;
  // The decider's walk: up while the next scale is lower.
  uint32_t taken = 1;
  while (taken < 8 && cost[2 * taken] < cost[taken]) taken *= 2;
  EXPECT_GT(taken, 1u) << "the bands are taken";
  const Plan chosen = make_plan(in);
  EXPECT_EQ(chosen.stats().pieces, 8 * (8 / taken));  // 8 x bands pieces (above)
  EXPECT_EQ(chosen.stats().cost_seconds, cost[taken]);
  ASSERT_NO_FATAL_FAILURE(testing::execute_every_stage(chosen, 2));
  for (int32_t p : chosen.processes())
    ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), chosen.part(p))
        << "process " << p;
  std::printf(
      "pipeline 2x2, 2 NICs a device: estimate %.1f / %.1f / %.1f / %.1f us at scale 1 / 2 / 4 / "
      "8\n",
      cost[1] * 1e6, cost[2] * 1e6, cost[4] * 1e6, cost[8] * 1e6);

  const PlanInput one_nic = pipeline_2x2(4);
  EXPECT_EQ(make_plan(one_nic, {PlanScope::kGlobal}).stats().pieces, 64);
  EXPECT_EQ(make_plan(one_nic, {PlanScope::kGlobal}).stats().cost_seconds,
            stats_with(one_nic, 1).cost_seconds);
}

}  // namespace
}  // namespace reshard
