// The planner's cost options taken from the cluster a plan is simulated on
// (what `reshard simulate --plan-costs topology` does, tools/cmd_simulate.cc):
// α, the intra-host and per-NIC bandwidths and the NICs per host, so the
// planner decides by an estimate of the links the simulator models.
#pragma once

#include "reshard/plan.h"
#include "reshard/simulate.h"

namespace reshard {

inline void plan_with_cluster_costs(PlanOptions& o, const ClusterTopology& c) {
  o.alpha_seconds = c.alpha_seconds;
  o.intra_host_bytes_per_second = c.intra_host_bytes_per_second;
  o.inter_host_bytes_per_second = c.nic_bytes_per_second;
  o.nics_per_host = c.nics_per_host;
}

}  // namespace reshard
