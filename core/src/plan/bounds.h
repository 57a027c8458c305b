// Internal: lower bounds on the traffic of a reshard, over every possible
// plan — single-hop, relays (an element forwarded by a device or host that
// received it), trees, and reductions in any order — not just over the
// plans this planner makes.
//
// The facts they rest on, for an element x of a tensor (or of one summand
// group of a partial tensor):
//  - a device that needs x and does not hold all of x's summands must
//    receive at least |x| bytes (one combined value; a tree may pre-reduce);
//  - a host that needs x and none of whose devices holds all of x's
//    summands must take in at least |x| bytes over its network (once, not
//    once per device: it can fan out inside);
//  - a device (host) that alone holds one summand of x, needed on another
//    device (host), must send at least |x| bytes (once: a chain or tree can
//    carry it on);
//  - every byte received is sent by some device, so the busiest sender sends
//    at least the total received over the number of devices (hosts);
//  - an element some device needs and does not hold leaves its holders at
//    least once, so the busiest holder sends at least those bytes over the
//    number of holders.
// Every fact is applied to disjoint regions of the destination cells, so an
// element needed on a device or host is counted there once, however many
// destination boxes contain it (the union): explicit boxes that overlap
// without being equal are refined into disjoint fragments (Geometry). Only
// where a group of overlapping boxes is above Geometry's fragment caps do
// its boxes contribute their maximum (still a bound, a weaker one).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/context.h"

namespace reshard::planning {

struct Bounds {
  // Per dense device of the plan (Context::devices).
  std::vector<int64_t> missing;  // bytes it must receive
  std::vector<int64_t> forced;   // bytes it must send
  // Per host (sorted ids in `hosts`): devices of the plan on it, bytes it must
  // take in over the network, bytes it must send out.
  std::vector<int32_t> hosts;
  std::vector<int64_t> host_devices, ingress, egress;
  std::vector<uint32_t> host_of_device;  // dense device -> index into hosts
  // NIC groups (PlanOptions::nics_per_host, reshard::nic_group): the group
  // of each dense device (numbered over all hosts) and each group's NICs.
  std::vector<uint32_t> group_of_device;
  std::vector<int32_t> group_nics;
  // Bytes that must leave the devices holding them (some device needs them
  // and does not hold them: a relay can forward them, but only after a
  // holder sent them once), and the devices holding anything.
  int64_t leave = 0;
  int64_t holders = 0;
};

Bounds compute_bounds(const Context& ctx);

// The plan-independent bounds of `lb` into `st` (its lower_bound_* figures)
// and the α–β cost bound with the term that binds it; the statistics
// (stats.cc) call it after each pass.
void apply_bounds(const Context& ctx, const Bounds& lb, const PlanOptions& o, PlanStats& st);

}  // namespace reshard::planning
