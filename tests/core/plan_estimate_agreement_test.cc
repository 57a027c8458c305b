// The α–β estimate (plan/stage_cost.h) against the fleet simulator on the
// shipped bench specs, each planned with the H100 topology's costs as
// `reshard simulate --topology` plans them (docs/planner.md §8): the
// estimate is what the planner decides by, so it must say what the
// simulator says.
#include <gtest/gtest.h>

#include <string>

#include "cluster_costs.h"
#include "reshard/simulate.h"
#include "reshard/spec.h"

namespace reshard {
namespace {

const std::string kRoot = RESHARD_SOURCE_DIR;

// The estimate over the simulated time of `spec` (under bench/specs).
double estimate_ratio(const std::string& spec) {
  Spec s = load_spec(kRoot + "/bench/specs/" + spec + ".json");
  const ClusterTopology c =
      load_cluster_topology(kRoot + "/bench/topologies/h100_8gpu_ndr400.json");
  plan_with_cluster_costs(s.input.options, c);
  const SimResult r = simulate_plan(s.input, c);
  return PlanStats::ratio(r.estimate_seconds, r.seconds);
}

// Every bench spec within 10% of the simulator, but one (below), and
// psum_grads_dp32_tp8, whose plan takes seconds to make (two stages of
// 24k messages; `reshard simulate` reads 1.000 there).
TEST(EstimateAgreement, BenchSpecsWithinTenPercentOfTheSimulator) {
  for (const char* spec :
       {"mid_regions_one_holder_to_8_hosts", "moe_experts_ep8_to_2_hosts",
        "one_holder_to_2_hosts_of_8", "one_holder_to_8_hosts", "pipeline_2x2_replicated_dst",
        "psum_16k_2_holders_to_4_hosts", "psum_2_holder_hosts_of_4_to_2_hosts",
        "psum_dp16_replicated", "psum_dp4_hosts_of_2", "replicated_sources_one_host",
        "rl_sync_fsdp8_to_2x_tp4", "three_level_hosts_dp_tp",
        "trainer_2_hosts_of_4_to_2_replicas_of_8", "two_holder_hosts_to_6_hosts"}) {
    const double r = estimate_ratio(spec);
    EXPECT_GE(r, 0.9) << spec;
    EXPECT_LE(r, 1.1) << spec;
  }
}

// The receiving hosts' NICs take stage 0 at the holders' pace and carry
// the forwards of stage 1 behind the rest of it: within 5% with the link
// from a later stage's start (stage_cost.h), 0.906 without it.
TEST(EstimateAgreement, TwoHolderHostsForwardBehindTheRestOfStageZero) {
  const double r = estimate_ratio("two_holder_hosts_to_6_hosts");
  EXPECT_GE(r, 0.95);
  EXPECT_LE(r, 1.05);
}

// rl_sync_uneven_replicas_4_to_2_hosts, pipelined: its forwards read a
// relay's stream from device 7 three to four rounds late, where the
// estimate counts one round (kForwardLagRounds); which pieces a forward's
// round reads is beyond the statistics.
TEST(EstimateAgreement, UnevenReplicasForwardLateBeyondTheModelledLag) {
  const double r = estimate_ratio("rl_sync_uneven_replicas_4_to_2_hosts");
  EXPECT_GE(r, 0.85);
  EXPECT_LE(r, 1.1);
}

}  // namespace
}  // namespace reshard
