// Internal: the α–β estimate of a plan's time from its per-stage, per-device
// bytes (docs/planner.md, "The α–β estimate"; the fleet simulator's links,
// reshard/simulate.h), and the rounds a plan of several stages is cut into
// for pipelining (plan/rounds.h, RoundRule).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "plan/bounds.h"
#include "reshard/plan.h"

namespace reshard::planning {

// A device's bytes in one stage: sent, received, copied locally, and the
// parts of those sent and received across hosts.
struct Acc {
  int64_t send = 0, recv = 0, local = 0, send_inter = 0, recv_inter = 0;
};

// The rounds a plan is cut into for pipelining (rounds.h, RoundRule): S
// stages of busiest-link seconds T_s in k rounds each take about
// Σ_s T_s / k + max_s T_s (1 - 1 / k) + α k S when a relay's rounds wait
// on one another (each stage's α charged one after the other, as the
// fleet simulator's per-process rounds do), least at
// k = sqrt((Σ_s T_s - max_s T_s) / (α S)); clamped to [1,
// kMaxPipelineRounds], 1 with fewer than two stages that move data.
// (Charging α once per stage instead, stage_cost's pipeline, gave
// k = sqrt(.. / α), which the simulator found slower than one round on
// small plans of three stages.)
int64_t pipeline_rounds(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o);

// The α–β estimate, on the links the fleet simulator models
// (reshard/simulate.h): per device an intra-host port out and in, per NIC
// group an out and in link carrying all its devices' cross-host bytes
// (Bounds::group_nics; one NIC per device by default). Stage s moves
// L_s(link) = bytes / bandwidth over each link and has k_s rounds (its
// relay bands, or its pipelined rounds: RoundRule); its messages are
// concurrent, so it takes
//   T_s = α·k_s + max over links of L_s(link).
// Stages overlap as the engine runs them: a later stage forwards a band as
// soon as that band arrived, so the plan takes the larger of
//   - for every link, what it carries over every stage, Σ_s L_s(link),
//     plus α·max k_s, after one round of each stage before the first it
//     serves (the fill) and before one round of each stage after the last
//     (the drain);
//   - the pipeline: one round of every stage, then the rest of the
//     stage with the most after its first round,
//     Σ_s T_s / k_s + max_s (T_s − T_s / k_s),
// and never more than the stages one after the other, Σ_s T_s.
double stage_cost(const std::deque<std::vector<Acc>>& stage_acc,
                  const std::vector<int64_t>& stage_rounds, const Bounds& lb, const PlanOptions& o);

// A floor of stage_cost with any rounds: the most seconds one link carries
// over every stage plus α, or α per stage where something moves, if more
// (each of stage_cost's terms is at least that). It never falls as bytes
// are added, so the global statistics stop a pass the single-hop guard will
// reject once this passes the single-hop plan's estimate
// (Context::single_hop_estimate, GuardStop): keep it below stage_cost
// whenever the model changes (PlanSingleHop.StageCostFloorIsAFloor).
double stage_cost_floor(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o);

}  // namespace reshard::planning
