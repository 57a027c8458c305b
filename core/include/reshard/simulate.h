// reshard — fleet simulator (docs/simulate.md): predicts how long a plan's
// messages take on a cluster described by a few link capacities, and the
// lower bound of the same data movement on that cluster over every plan.
//
// The simulator reads messages (source device, destination device, stage,
// round, bytes) — those of a plan's process parts, or of any other schedule
// of the same data (the modelled peers below) — and the device -> process /
// host mapping of the plan's Topology; simulate() knows nothing of the
// planner.
//
// Model (flow level, deterministic):
//  - links, each direction separately: per device an intra-host port in and
//    out (NVLink), per NIC group an out and in link (a device uses the NIC
//    group of its position on its host), per host an optional uplink cap in
//    and out. A message between two devices of one host uses the sender's
//    intra-host out port and the receiver's in port; between hosts the
//    sender's NIC out, the receiver's NIC in and both hosts' caps.
//  - the flows active at a moment share every link max-min fairly
//    (progressive filling); rates change only when a flow starts or ends.
//  - order as the engine executes a part (docs/distributed.md): each process
//    works through the rounds of each stage in order, stages side by side:
//    it moves to the next round of a stage once all its messages of the
//    current one (sent and received) completed. A message starts flowing
//    alpha_seconds after both its processes reached its round of its stage
//    and every message in its `after` completed: what it forwards arrived.
//    So a relay forwards round r (stage 1) as soon as the chunks it
//    forwards arrived, while it still receives round r + 1 of stage 0, and
//    a process waits for its slowest peer of a round before the next round
//    of that stage.
//  - local copies (a device to itself) take no time; α is paid per message.
//  - a flow within a millionth of its bytes of its end at an event completes
//    with it (equal flows split by a remainder byte end in one event).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/layout.h"
#include "reshard/plan.h"

namespace reshard {

// A cluster's links (the JSON topology file of `reshard simulate`,
// docs/simulate.md). Bandwidths are bytes per second in each direction.
struct ClusterTopology {
  std::string name;          // free text, echoed in reports
  double alpha_seconds = 0;  // per message
  // Per device, each direction: its intra-host port (e.g. NVLink).
  double intra_host_bytes_per_second = 0;
  // Per NIC, each direction.
  double nic_bytes_per_second = 0;
  // NICs per host; 0 means one per device of the host. With n NICs and m
  // devices, the NICs form min(n, m) groups (NIC k in group k·G/n) and
  // device i of the host (by id order) uses group i·G/m.
  int32_t nics_per_host = 0;
  // Optional cap per host and direction on all its NIC traffic (0: none).
  double host_link_bytes_per_second = 0;
  friend bool operator==(const ClusterTopology&, const ClusterTopology&) = default;
};

// Throws Error(kInvalidArgument, field, detail) naming `prefix` + the
// member, e.g. "nic_bytes_per_second: must be positive and finite, got -1".
void validate(const ClusterTopology& cluster, const std::string& prefix = "");
// Parses the JSON form: an object with the members above (name optional,
// alpha_seconds, intra_host_bytes_per_second, nic_bytes_per_second
// required; nics_per_host, host_link_bytes_per_second optional) and an
// optional "sources" array of strings (citations, ignored). Unknown keys,
// wrong types and bad values are kInvalidArgument naming the key; malformed
// JSON is kParse.
ClusterTopology parse_cluster_topology(std::string_view json_text);
// Reads and parses a file; an unreadable file is kInvalidArgument naming it.
ClusterTopology load_cluster_topology(const std::string& path);
// The JSON form (without sources), read back equal by parse_cluster_topology.
std::string cluster_topology_json(const ClusterTopology& cluster);

// One message to simulate.
struct SimMessage {
  int64_t src_device = 0;
  int64_t dst_device = 0;
  uint32_t stage = 0;
  uint32_t round = 0;  // within its stage
  int64_t bytes = 0;
  // Indices (in the same vector) of the messages that must complete before
  // this one starts: for a message of a later stage, those that brought
  // what it forwards (plan_messages derives them from the pieces).
  std::vector<uint32_t> after = {};
  friend bool operator==(const SimMessage&, const SimMessage&) = default;
};

// The messages of every process part `plan` holds (each message once: the
// sender's copy), in part order.
std::vector<SimMessage> plan_messages(const Plan& plan);
// The messages of the plan of `input`, planned one process part at a time
// (PlanScope::kProcess, on `threads` threads each) and reduced to its
// messages before the next part is planned: memory is the messages, never
// the pieces of more than one part. `parts_planned` (optional) is called
// after each part with (done, total).
//
// Memory is known before it is spent: the global statistics give the
// plan's message count first, and above `max_bytes` (PlanRequest::
// max_plan_bytes' convention: 0 half the memory available,
// kUnlimitedPlanBytes none) the call fails with kResourceExhausted naming
// sim_memory_estimate(messages) and the limit, before any part is planned.
// `max_stats_pieces`: PlanRequest::max_stats_pieces of every plan made (the
// global statistics' work, checked before they start).
std::vector<SimMessage> plan_messages_by_part(
    const PlanInput& input, int32_t threads = 1,
    const std::function<void(int64_t, int64_t)>& parts_planned = nullptr,
    int64_t max_bytes = kUnlimitedPlanBytes, int64_t max_stats_pieces = 0);

// The memory, about, that planning a plan of `messages` messages part by
// part and simulating it take at their peak: kSimBytesPerMessage each (the
// messages, their dependencies and the simulator's per-flow state, planning
// included). Measured peak resident size over the message count: 523 bytes
// for dsv3_m2n with a 1 GiB budget (884 MB, 1.69 M messages with many
// dependencies), 256 for the 405B plan at 1,024 devices in one round
// (270 MB, 1.05 M messages); the estimate takes the larger.
inline constexpr int64_t kSimBytesPerMessage = 512;
int64_t sim_memory_estimate(int64_t messages);

// The streaming simulator's memory (simulate_plan), from the global
// statistics: the compact records of every message
// (kSimStreamBytesPerMessage each: varint ends, size and dependencies in
// their lanes' round order; dependencies vary, so this term is about, and
// the records are also counted as the parts are added), the lanes' tables
// (one lane per device and stage at most, with its counts by round and
// first record block), and the event loop's state, which holds one round of
// each lane: at most one message of each (source, destination, stage)
// stream (the per-device send_messages summed), each with one dependency
// (kSimLiveBytesPerMessage each, a bound of the loop's vectors, tables and
// nodes for a message and one dependency). simulate_plan stops, after any
// part, when the records and lanes counted so far with the other terms pass
// its limit. Planning the parts is held to PlanRequest::max_plan_bytes
// separately (one batch of parts at a time).
inline constexpr int64_t kSimStreamBytesPerMessage = 16;
inline constexpr int64_t kSimLiveBytesPerMessage = 640;
int64_t sim_stream_memory_estimate(const PlanStats& stats);

struct SimPlanOptions {
  int32_t threads = 1;  // PlanRequest::threads: parts planned at once, one each
  // Called after each part is planned with (done, total); optional.
  std::function<void(int64_t, int64_t)> parts_planned = nullptr;
  // Memory limit (PlanRequest::max_plan_bytes' convention: 0 half the
  // memory available, kUnlimitedPlanBytes none): above it, from the global
  // statistics before any part is planned, kResourceExhausted naming
  // "max_bytes", simulate_plan_memory's estimate and the limit.
  int64_t max_bytes = 0;
  int64_t max_stats_pieces = 0;  // PlanRequest::max_stats_pieces
};

enum class LinkClass : int32_t {
  kIntraOut = 0,
  kIntraIn = 1,
  kNicOut = 2,
  kNicIn = 3,
  kHostOut = 4,
  kHostIn = 5,
};
std::string_view link_class_name(LinkClass cls) noexcept;  // "nic_in", ...

struct SimLink {
  LinkClass cls = LinkClass::kNicIn;
  int32_t host = 0;
  int64_t device = -1;  // intra-host ports: the device; -1 otherwise
  int32_t nic = -1;     // NIC links: the group on its host; -1 otherwise
  double bytes_per_second = 0;
};

struct SimStage {
  uint32_t stage = 0;
  double start_seconds = 0;  // first of its messages became ready
  double end_seconds = 0;    // last of its messages completed
  int64_t messages = 0;
  int64_t bytes = 0;
};

struct SimResult {
  double seconds = 0;  // last message completed (0 without messages)
  int64_t messages = 0;
  int64_t bytes = 0;
  std::vector<SimStage> per_stage;  // ascending stage, stages with messages
  // The link that spent the longest time saturated (its flows at its
  // capacity, it being a bottleneck of the max-min allocation), and that
  // time; absent without messages of positive size.
  std::optional<SimLink> binding;
  double binding_saturated_seconds = 0;
  int64_t events = 0;  // rate recomputations
  // simulate_plan from a PlanInput: the wall seconds planning the parts and
  // reducing them to records took (the rest of the call simulated); 0
  // otherwise.
  double plan_seconds = 0;
  // simulate_plan: the plan's own α–β estimate (PlanStats::cost_seconds, the
  // objective the planner decides by; docs/planner.md §8) on the costs it
  // was planned with; 0 from simulate().
  double estimate_seconds = 0;
};

// Simulates `messages` on `cluster` with `devices` mapping each device to its
// process and host. Validates the cluster; a message with a negative size or
// from a device to itself is kInvalidArgument naming "messages[i]".
SimResult simulate(const Topology& devices, const ClusterTopology& cluster,
                   std::vector<SimMessage> messages);

// The plan of `input` simulated as simulate(input.topology, cluster,
// plan_messages_by_part(input)) simulates it, with the same result, but
// streamed: every part is planned once (one batch of parts at a time, on one
// computation of the global statistics) and reduced to compact records
// before the next batch; the simulation keeps flow state only for the
// messages of the rounds its lanes are in. Memory: sim_stream_memory_estimate.
SimResult simulate_plan(const PlanInput& input, const ClusterTopology& cluster,
                        const SimPlanOptions& options = {});
// The memory simulate_plan(input, cluster, options) is held to before it
// plans any part: sim_stream_memory_estimate of the plan's statistics plus
// what planning one batch of parts takes (make_plan's estimate of the
// busiest part alone, times the parts planned at once). Costs one
// computation of the global statistics.
int64_t simulate_plan_memory(const PlanInput& input, const ClusterTopology& cluster,
                             const SimPlanOptions& options = {});
// The same for a plan holding every process part (plan_messages' messages).
SimResult simulate_plan(const Plan& plan, const ClusterTopology& cluster);

// A lower bound on the time of any plan moving the data of `input` on
// `cluster` (relays, trees and reductions in any order included), from the
// planner's bounds (docs/design.md §2.2) over link capacities: the largest
// of, for every device, α + the bytes it must receive (send) over its
// intra-host port plus its NIC group; for every host, α + the bytes it must
// take in (send out) over its NICs (capped by the host link); and α + every
// message's bytes over every device's capacity together, α + the bytes that
// must cross hosts over every host's NICs together.
struct SimBound {
  double seconds = 0;
  std::string kind;  // "device_recv", "device_send", "host_recv", "host_send", "devices"
                     // (every device together), "hosts" (every host together),
                     // "holder_hosts" (the hosts holding copies together), "none"
  int64_t id = -1;   // the device or host (-1 for "devices" and "hosts"); for
                     // "holder_hosts" the set's first host, -1 for every host
                     // holding anything
  int64_t bytes = 0;
  double bytes_per_second = 0;  // the capacity it is divided by
  // The fewest devices each of those bytes is needed on beyond their end
  // (a device's or host's bytes to send, a host's to take in; 1 for the
  // other kinds): each is sent that many times or forwarded, a forward
  // α after its data arrived, so with n > 1 the term is
  // min(bytes / bps + (2 - 1/n) α, α + n bytes / bps) (docs/simulate.md).
  int64_t fan = 1;
};
SimBound simulate_lower_bound(const PlanInput& input, const ClusterTopology& cluster);

// The same data movement scheduled the way common systems do it
// (docs/simulate.md):
//  - rank0_broadcast: every source device sends the bytes of the tensors it
//    holds (each replica group's share split over its holders) to the
//    lowest source device (stage 0), which then broadcasts every tensor
//    whole to every destination device down a pipelined chain ordered by
//    (host, device), in `chunks` chunks (stage 1);
//  - direct_p2p: the single-hop plan (PlanOptions::relays and
//    reduce_scatter off): every destination pulls its slices from holders;
//  - layered (M2N's hierarchical path): each destination box (all entries
//    with the same summand and box form one cell) is injected into one
//    device of the first host needing it (its source bytes split over each
//    source replica group's holders), forwarded down a chain of the other
//    hosts needing it (one device each, rotating over the hosts' devices
//    that need it), and fanned out inside every host to its other devices
//    that need it; in `chunks` chunks, chunk j injected in round j, crossing
//    hop i in round j + i and fanned out in the round after (one stage, so
//    the chain pipelines). Messages between the same devices in the same
//    round are fused: the chunks are those of the fused bytes per transfer
//    (the sum over cells moving between the same devices at the same hop). A destination holding
//    part of its box still receives all of it (the peer does not look at its own shards).
// `chunks` 0: four per hop of the longest chain (at least 4).
std::vector<SimMessage> rank0_broadcast_messages(const PlanInput& input, int32_t chunks = 0);
std::vector<SimMessage> direct_p2p_messages(const PlanInput& input, int32_t threads = 1);
std::vector<SimMessage> layered_messages(const PlanInput& input, int32_t chunks = 0);

}  // namespace reshard
