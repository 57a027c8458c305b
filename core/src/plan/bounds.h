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
//    number of holders;
//  - an element x of k >= 2 summands (each device holds at most one summand
//    of a tensor) needed on n devices takes at least k + n - 1 - h messages
//    of |x| bytes, h = 1 when a needer holds one of its summands, else 0 —
//    the one-way gossip bound; of them at least k - 1 are sent by holders.
//    Proof: order the messages in time and let u be the first device to
//    know the combined value, at the message m. For each summand u does
//    not hold, the first message carrying it (at or before m) is sent by a
//    device holding it, and no message is first for two summands (its
//    sender would hold both): at least k - [u holds a summand] messages.
//    Each needer other than u does not know the value when m arrives (a
//    message changes only its receiver), so it receives a message after m:
//    at least n - [u is a needer] more. A needer holding a summand is the
//    best u. All-reduce over N devices: 2 (N - 1) messages, met by a ring's
//    reduce-scatter then all-gather;
//  - the same over hosts (a host's devices pool what they know, so only
//    messages between hosts count): with no host holding every summand of
//    x, u's host misses summands, and each host that alone holds a summand
//    u lacks sends a first message (one host: one message may carry all it
//    holds); the summands u lacks held by two or more hosts none of which
//    alone holds a summand take first messages from other hosts, at least
//    their number over the most of them one host holds. Where a host holds
//    every summand it is the first u, and each needer host without them
//    takes x in once;
//  - an element whose holders (of every summand) are all on a set S of
//    hosts and that is needed on a host outside S leaves S at least once,
//    so S's NICs together send at least those bytes (replicated sources:
//    no one host must send them, the hosts holding copies together must);
//  - every byte is sent by a device and received by one, so the busiest
//    device sends and receives at least the messages' bytes over the
//    number of devices (any device may relay), the busiest host at least
//    the bytes crossing hosts over the number of hosts.
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
  // Fan-outs (0 where nothing is counted): the fewest devices any byte
  // counted in forced[d] is needed on besides d, in egress[h] on other
  // hosts, in ingress[h] on h. A byte needed on n devices beyond its
  // holders' reach is sent n times or forwarded, and a forward starts α
  // after its data arrived: the fleet simulator's bound adds up to α
  // (1 - 1/n) for it (core/src/sim/bound.cc, docs/design.md §2.2).
  std::vector<int64_t> forced_fan, ingress_fan, egress_fan;
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
  // Bytes of messages beyond one per needer device (host) lacking an
  // element that reductions take at least (the gossip facts above): the
  // devices' messages are at least the sum of `missing` plus
  // `extra_messages`, the hosts' at least the sum of `ingress` plus
  // `extra_crossings`.
  int64_t extra_messages = 0;
  int64_t extra_crossings = 0;
  // Hosts holding copies, together. An element held (every summand's
  // holders) on a set S of hosts and needed on a host outside S leaves S at
  // least once, over the NICs of S together, whichever host of S sends it:
  // per distinct S (indices into `hosts`, ascending), the bytes of the
  // elements whose holders are on exactly S and the fewest devices outside S
  // any of them is needed on; `all_holders` the same for S every host
  // holding anything of the plan (elements needed on a host that holds
  // nothing). Kept for at most kMaxHolderSets sets (a weaker bound past it);
  // only destination cells that overlap no other count (their elements are
  // counted once).
  struct HolderSet {
    std::vector<uint32_t> hosts;
    int64_t bytes = 0, fan = 0;
  };
  static constexpr size_t kMaxHolderSets = size_t{1} << 14;
  std::vector<HolderSet> holder_sets;
  HolderSet all_holders;
};

Bounds compute_bounds(const Context& ctx);

// The plan-independent bounds of `lb` into `st` (its lower_bound_* figures)
// and the α–β cost bound with the term that binds it; the statistics
// (stats.cc) call it after each pass.
void apply_bounds(const Context& ctx, const Bounds& lb, const PlanOptions& o, PlanStats& st);

}  // namespace reshard::planning
