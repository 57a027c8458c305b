// Internal: the state one make_plan call shares between its steps
// (validation, intersection, source assignment, parts, statistics).
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/enumerate.h"
#include "plan/rounds.h"
#include "reshard/plan.h"

namespace reshard::planning {

// A routed pass of the global statistics that the single-hop guard
// (Context::decide_single_hop) would reject stops early: once a piece of a
// later stage has been accounted (the plan has stages to weigh) and the
// floor of the estimate so far (stage_cost_floor, which only grows as
// pieces are added) is above the single-hop plan's estimate, the whole
// pass's estimate is above it too, and the guard takes the single-hop plan
// whatever the rest of the pass holds. The statistics are then only
// cost_seconds (that floor), stages (at least 2) and the plan-independent
// lower bounds; the counts and the round figures are partial, and the
// caller computes the statistics again after the guard (it changed the
// plan). `single_cost` gives the single-hop estimate, called at most once,
// when the pass first has a later stage.
struct GuardStop {
  std::function<double()> single_cost;
  bool stopped = false;
};

class GroupMemo;

// What one device contributes to the process part of its process, for the
// memory estimate (estimate_parts). Pieces are counted before round cutting.
struct DeviceCounts {
  int64_t local_pieces = 0;  // local pieces received
  int64_t send_pieces = 0;   // network pieces sent
  int64_t recv_pieces = 0;   // network pieces received
  int64_t regions = 0;       // pieces with their own region (at most one box each)
  int64_t streams = 0;       // (source, destination) streams it is an end of
  int64_t messages = 0;      // messages of those streams after round cutting
  int64_t cuts = 0;          // round cuts in those streams (messages - streams)
};

// Shared state of one make_plan call.
struct Context {
  const PlanInput& input;
  std::vector<TensorCtx> tensors;
  std::vector<int64_t> devices;  // sorted unique devices of all layouts
  std::map<const Geometry*, GeoTopo> topo;
  std::vector<int32_t> processes;
  // Pre-reduction on the holders' hosts (Enumerator::reduce_part): on with
  // relays and reduce-scatter for partial sources, unless, under a staging
  // budget, the most scratch one device would hold is above half the budget
  // (decide_pre_reduce, from the global statistics of the plan with it);
  // rounds are then cut at the budget less that most (`scratch_reserve`,
  // staging_options), so scratch and staged bytes together stay below the
  // budget on every device.
  bool pre_reduce = false;
  int64_t scratch_reserve = 0;
  // Relays across hosts cut a run into sub-runs led by different entries of
  // a host (Enumerator::layout_parts). On, unless a staging budget cannot
  // stage the peers they add on some device: compute_stats then turns it
  // off for the whole plan and starts again (the parts follow, as every
  // process decides alike).
  bool relay_split = true;
  // The global statistics track every stream's bytes for the round
  // schedule: under a staging budget always; without one once a plan of
  // several stages is pipelined (rounds.h, RoundRule), compute_stats then
  // setting this and starting again.
  bool track_streams = false;
  // With track_streams, the global statistics also keep each stream's bytes
  // per group of like tensors, enumerating every piece, to count the spread
  // cuts a plan makes (rounds.h, spread_stream_cuts): compute_stats sets it
  // where it takes spread cuts, and starts again.
  bool track_spread = false;
  // A pass of the global statistics that counts keyed cuts of K keys and
  // granule g (rounds.h, key_blocks; compute_stats sets them for the pass it
  // starts again with, and clears them after): every piece is enumerated
  // and each stream's keys and each round's bytes counted. 0: a plain pass.
  int64_t keyed_keys = 0, keyed_granule = 0;
  // The keyed pass's blocks are fine ones (rounds.h, tensor_key_blocks);
  // whether the last keyed pass took its cuts (StatsPass::finish).
  bool keyed_fine = false, keyed_taken = false;
  // The most piece visits one pass of the global statistics may take
  // (PlanRequest::max_stats_pieces resolved; -1: no limit), checked up
  // front by the first compute_stats (stats_visits), which sets
  // stats_checked.
  int64_t max_stats_pieces = -1;
  bool stats_checked = false;
  // Where set (Context::decide_single_hop, during its tries), the passes
  // without the round schedule take groups of like tensors accounted by
  // per-cell arithmetic from it, each computed once per decisions
  // (group_memo.h).
  GroupMemo* group_memo = nullptr;
  // relay_split before decide_pre_reduce tried bands (their streams may turn
  // it off), restored where nothing pre-reduces in the end; empty where no
  // bands were tried.
  std::optional<bool> split_before_bands;
  // Settles pre_reduce under a budget (after build; max_bytes as
  // compute_stats's): where every partial tensor pre-reducing would put more
  // than half the budget in scratch on some device, groups of like tensors
  // (reduce_groups) pre-reduce one at a time, smallest first, while the
  // most scratch stays within half the budget; the others take
  // TensorCtx::kReduceScatter. scratch_reserve is what is kept.
  void decide_pre_reduce(int64_t max_bytes);
  // Partial tensors (whole destination) grouped by layouts, shape and dtype,
  // in the order of their first tensors; one group for all past 16.
  std::vector<std::vector<size_t>> reduce_groups() const;
  void set_reduce(const std::vector<size_t>& group, TensorCtx::Reduce mode);
  // With α > 0 (PlanOptions::alpha_seconds) and reduce-scatter on, sets the
  // partial tensors' TensorCtx::reduce (after decide_pre_reduce) by the
  // whole plan's α–β estimate (PlanStats::cost_seconds): from every tensor
  // at kPreReduce, each group of like tensors (same layouts, shape and
  // dtype; one group for all above 16 groups) in turn takes the mode going
  // less far where that lowers the estimate by more than 5% (near-ties keep
  // the plan nearer the byte bounds). The routes choose their parts, gathers
  // and chains cell by cell and do not see the stages the other choices add,
  // so a plan could otherwise come out slower by the estimate than its
  // single-hop plan. A pure function of the input: every process decides
  // alike.
  void decide_reductions(int64_t max_bytes);
  // With relays on, sets TensorCtx::device_cross (after decide_reductions):
  // groups of like tensors (same layouts, shape and dtype; one group for all
  // past 16) whose cells would cross by the device rule alone
  // (Enumerator::device_crosses) take it in turn where that lowers the whole
  // plan's α–β estimate (PlanStats::cost_seconds). Single-hop into no more
  // hosts than the source spans keeps every host NIC at its bound but can
  // load a holder device R times over (a trainer on 2 hosts feeding 2
  // inference replicas: 2x); the relay halves it at the cost of a stage,
  // which the estimate weighs. A pure function of the input.
  // Where the single-hop guard applies (guard_stop) and one group is tried,
  // the decision may be left open (cross_open_, cross_decision.cc): when
  // the plan with the group by either rule is provably slower than the
  // single-hop plan, the guard takes the single-hop plan whichever it is,
  // and no routed pass reads it; a pass or decider that would read it
  // (compute_stats, decide_lead_cut) decides it first, as it would have
  // been decided here (settle_device_cross).
  void decide_device_cross(int64_t max_bytes);
  // The open decision of decide_device_cross made, in the state it was
  // left open in (restored around it); nothing where none is open, or
  // where `only_routed` and no tensor of its group takes a route.
  void settle_device_cross(int64_t max_bytes, bool only_routed = true);
  // Whether decide_device_cross left its decision open.
  bool device_cross_open() const { return cross_open_.has_value(); }
  // With relays on, α > 0 and the estimate above kNearBound times its
  // lower bound, sets TensorCtx::fine_lead (after
  // decide_device_cross): groups of like tensors (same layouts, shape and
  // dtype; one group for all past 16) some of whose regions relays inside a
  // host would cut into lead parts only with it
  // (Enumerator::fine_lead_differs) take it in turn where that lowers the
  // whole plan's α–β estimate (PlanStats::cost_seconds). One leader per
  // region puts every like tensor's ingress on the same entries of a host;
  // parts down to cross_min_bytes spread it over all of them, at an α a
  // part, which the estimate weighs. A pure function of the input.
  void decide_lead_cut(int64_t max_bytes);
  // With relays on, α > 0 and devices sharing a NIC group of g >= 2 NICs
  // (fewest_group_nics), on a plan of several stages, at most
  // kBandScalePieces pieces and an estimate above kNearBound times its
  // lower bound, sets every tensor's TensorCtx::band_scale (after
  // decide_lead_cut): g, 2g, ... up to kRelayBands in turn while each
  // lowers the whole plan's α–β estimate (PlanStats::cost_seconds). Bands
  // of relay_chunk_bytes are 8 α of one NIC's bandwidth; a device behind g
  // NICs moves them g times faster and pays the same α
  // (pipeline_2x2_replicated_dst: 4 devices on hosts of 8 NICs). A pure
  // function of the input.
  void decide_band_scale(int64_t max_bytes);
  // On a plan of at most kJointTrialPieces single-hop pieces (every
  // tensor's stats_visits), each geometry pair whose tensors count their
  // bytes together (TensorCtx::joint_entry, set by build) keeps it only
  // where the whole plan's α–β estimate is not lower without it (after
  // decide_band_scale): many small like tensors' chunk forwarded by every
  // device of a host is faster on the H100 topology's costs and slower on
  // the default ones (mid_regions_one_holder_to_8_hosts). A pure function
  // of the input.
  void decide_joint_entry(int64_t max_bytes);
  // With relays on, sets TensorCtx::transit (after decide_lead_cut, before
  // decide_band_scale; transit.cc): groups of like tensors (same layouts,
  // shape and dtype; one group for all past 16) of one summand whose
  // destination cells have one entry each, and whose crossing bytes load
  // some host's NIC groups unevenly (build_transit), take transit relays in
  // turn where that lowers the whole plan's α–β estimate. A pure function
  // of the input.
  void decide_transit(int64_t max_bytes);
  // The tables TensorCtx::transit points into.
  std::deque<std::unique_ptr<TransitTable>> transit_tables;
  // The single-hop guard (after decide_device_cross): a plan is never
  // slower, by its own α–β estimate (PlanStats::cost_seconds), than the
  // single-hop plan it could have built. Groups of like tensors with a
  // route (relays, or a reduce route) take TensorCtx::single_hop in turn,
  // largest first (the 15 largest on their own, the rest as one group),
  // where that lowers the whole plan's estimate; then, where the plan with
  // every tensor single-hop is faster still, every tensor takes it. Routes
  // are chosen cell by cell by bytes and host NICs and cannot see the
  // stages and per-device α they add; this is where the estimate weighs
  // them. A pure function of the input: every process decides alike.
  // `routed`: the statistics of the plan as the other deciders left it,
  // where the caller has them (else they are computed); a plan of one
  // stage takes no route and is left alone. Returns whether anything
  // changed (the caller's statistics are then stale).
  // `routed` may be the statistics of a pass that stopped early
  // (GuardStop::stopped): their cost_seconds is then a floor of the routed
  // plan's estimate, above single_hop_estimate's, and their stages and
  // lower bounds are the routed plan's.
  bool decide_single_hop(int64_t max_bytes, const PlanStats* routed = nullptr);
  // The single-hop guard's yardstick: the estimate of the plan with every
  // group of decide_single_hop's single-hop (as it computes it, from the
  // routed state, which is restored), computed once and kept until
  // decide_single_hop uses it. Called from inside a routed pass of the
  // global statistics (GuardStop).
  double single_hop_estimate(int64_t max_bytes);
  // A GuardStop for the routed statistics (after decide_device_cross),
  // where stopping provably changes no plan: the guard applies, and the
  // staging budget is above 16 bytes for every peer a device can have in a
  // stage (2 * devices * kRelayBands), so no pass can turn relay_split off
  // or start again to track streams (compute_stats): the context after a
  // stopped pass is what the whole pass would have left. Else nullopt.
  std::optional<GuardStop> guard_stop(int64_t max_bytes);
  // After a decider changed reduce modes: where no tensor pre-reduces any
  // more, no scratch is reserved (and bands and relay_split are as without
  // pre-reduction); else the reserve is the scratch the plan now holds.
  void settle_scratch(int64_t max_bytes);
  PlanOptions staging_options() const;
  // compute_stats of the plan as the decisions stand, with the staging
  // options and the round schedule (what the deciders estimate and the
  // global statistics report), with each device's counts, stage loads and
  // round rule where not null. The last whole pass is kept with the
  // decisions it saw (pass_key): where they have not changed since (a
  // decider's last trial taken), it is the answer, not computed again. A
  // pass that `guard` stopped is not kept.
  void scheduled_stats(PlanStats& st, int64_t max_bytes,
                       std::vector<DeviceCounts>* counts = nullptr,
                       std::vector<DeviceLoad>* stage_loads = nullptr, RoundRule* rule = nullptr,
                       GuardStop* guard = nullptr);

  explicit Context(const PlanInput& in) : input(in) {}

 private:
  // decide_single_hop's groups: like tensors with a route, largest first,
  // past kMaxReduceGroups - 1 the rest as one.
  std::vector<std::vector<size_t>> single_hop_groups() const;
  std::optional<double> single_hop_cost_;  // single_hop_estimate's, until used
  // decide_device_cross's decision left open (cross_decision.cc): the
  // group, a stopped pass's statistics (their cost a floor above `single`,
  // the single-hop plan's estimate, whichever rule the group takes), and
  // the decisions as they stood.
  // The decisions a pass reads (pass_key's), per tensor and of the
  // context, taken and put back (cross_decision.cc).
  struct Decisions {
    // Per tensor: single_hop, reduce, bands, cross, lead, band scale.
    std::vector<std::array<int64_t, 7>> tensors;
    bool pre_reduce = false, relay_split = true, track_streams = false, track_spread = false;
    int64_t scratch_reserve = 0;

    explicit Decisions(const Context& c);
    void restore(Context& c) const;
  };
  struct CrossOpen {
    std::vector<size_t> group;
    PlanStats stopped;
    double single = 0;
    Decisions then;
  };
  std::optional<CrossOpen> cross_open_;
  // The estimate of the plan as the decisions stand (scheduled_stats), or
  // nullopt where it is provably above `above` (a pass stopped by a
  // GuardStop at `above`).
  std::optional<double> estimate_unless_above(double above, int64_t max_bytes,
                                              PlanStats* stopped = nullptr);
  // decide_device_cross for one group where the guard applies: whether it
  // takes the device rule, or nullopt with the decision left open.
  std::optional<bool> cross_one_group(const std::vector<size_t>& g, int64_t max_bytes);
  // Whether decide_device_cross tries group g on a plan estimated at
  // `least`: always where the trial's pass is small (kCrossTrialVisits,
  // context.cc), else only where `least` is above kNearBound times the
  // plan's lower bound (over all plans: no trial can gain more than that).
  bool cross_trial_pays(const std::vector<size_t>& g, double least);
  std::optional<double> cross_bound_;  // cross_trial_pays' lower bound, once computed
  // Whether the open decision's group would change decide_lead_cut's
  // groups by either rule (Enumerator::fine_lead_differs reads the rule).
  bool lead_reads_open_cross(Enumerator& en);

 public:
  // compute_stats (stats.cc) on a pass where decide_device_cross's open
  // decision matters: with `guard`, true where the pass is provably above
  // the guard's single-hop estimate (`st` then holds a stopped pass's
  // figures, guard->stopped set); else the decision is made first.
  bool pass_on_open_cross(PlanStats& st, GuardStop* guard, int64_t max_bytes);

 private:
  // What compute_stats reads of the decisions besides the input: per tensor
  // its single-hop flag, reduce mode, bands and device rule; the context's
  // pre-reduction, scratch reserve, split runs and stream tracking; and
  // max_bytes.
  std::vector<int64_t> pass_key(int64_t max_bytes) const;
  // Whether some tensor is large enough for relay bands (decide_band_scale).
  bool may_band(const PlanOptions& o) const;
  // The fewest NICs a device of the plan shares its NIC group with
  // (PlanOptions::nics_per_host, reshard::nic_group; 1 with one NIC per
  // device).
  int32_t fewest_group_nics() const;
  struct KeptPass {
    std::vector<int64_t> key;
    PlanStats st;
    std::vector<DeviceCounts> counts;
    std::vector<DeviceLoad> stage_loads;
    RoundRule rule;
  };
  std::optional<KeptPass> kept_;  // scheduled_stats's last whole pass

 public:
  uint32_t dense(int64_t device) const {
    return static_cast<uint32_t>(std::lower_bound(devices.begin(), devices.end(), device) -
                                 devices.begin());
  }

  // Collects the devices, per-geometry topology and tensor contexts.
  void build();
};

// Entries of geometry topo `gt` on process p.
inline std::pair<const uint32_t*, const uint32_t*> entries_on(const GeoTopo& gt, int32_t p) {
  auto it = std::lower_bound(gt.procs.begin(), gt.procs.end(), p);
  if (it == gt.procs.end() || *it != p) return {nullptr, nullptr};
  const size_t k = static_cast<size_t>(it - gt.procs.begin());
  return {gt.proc_entries.data() + gt.proc_offsets[k],
          gt.proc_entries.data() + gt.proc_offsets[k + 1]};
}

// Global statistics of the plan of `ctx` (core/src/plan/stats.cc). With
// `schedule`, also those of the round schedule (rounds, messages, peak
// staging), which need every stream's bytes; a process planning only its
// part needs just the per-device figures and skips them. `counts` (when not
// null) receives every device's DeviceCounts, indexed like ctx.devices:
// exact piece and stream counts, and message and cut counts that are exact
// with `schedule` and an upper bound without.
// `max_bytes` (kUnlimitedPlanBytes: none) caps the bookkeeping of device
// pairs that exchange data, which a plan where every device talks to every
// other makes quadratic in the devices: past it, kResourceExhausted.
// `reference`: enumerate every piece of every tensor, as the parts do,
// instead of the per-cell arithmetic and the per-cell enumeration of tiled
// destinations (the same figures, slower: what the tests compare them with).
// `stage_loads` (when not null) receives what round cutting needs
// (plan/rounds.h): each device's messages and bytes in each stage, at
// [stage * ctx.devices.size() + dense device], where rounds are cut (a
// staging budget, or pipelined stages); `rounds` the rule that cuts them.
// `guard` (when not null): the pass may stop early, as GuardStop says.
void compute_stats(Context& ctx, PlanStats& st, const PlanOptions& o, bool schedule,
                   std::vector<DeviceCounts>* counts = nullptr, int64_t max_bytes = -1,
                   bool reference = false, std::vector<DeviceLoad>* stage_loads = nullptr,
                   RoundRule* rounds = nullptr, GuardStop* guard = nullptr);

// Whether Context::guard_stop may stop passes (on; tests turn it off to
// compare plans with and without).
bool guard_stops();
void set_guard_stops(bool on);
// Tests: the visits above which decide_device_cross tries a group only far
// from the lower bound (kCrossTrialVisits, context.cc, unless set); returns
// the figure before.
int64_t set_cross_trial_visits(int64_t visits);
// Routed passes stopped so far in this process (compute_stats counts them; tests read it).
int64_t& guard_stops_taken();
// Passes of the global statistics computed so far in this process
// (compute_stats counts them, restarts included; tests read it).
int64_t& stats_passes();
// Relay parts the global statistics' routed cells visited so far in this
// process (compute_stats counts them; tests read it): one per (entry,
// part), or one per part where a cell's entries take a source's parts
// alike (an all-to-all among them, the device rule's cells).
int64_t& relay_parts_visited();
// (Entry, holder) sums of an all-to-all cell's direct parts the global
// statistics took at once (RoutedCells::a2a_direct_entry), in this
// process (tests read it).
int64_t& direct_sums_taken();
// (Entry, holder) sums of an all-to-all cell's entered parts' stage-0
// pieces the global statistics took at once (RoutedCells::
// a2a_entered_flush), in this process (tests read it).
int64_t& entered_sums_taken();
// All-to-all cells that found their pairs' stream table (RoutedCells::
// A2aStreams) made by an earlier group of the same pass, in this process
// (tests read it).
int64_t& a2a_tables_shared();
// Regions of all-to-all cells the global statistics took from their runs
// (RoutedCells::a2a_runs), in this process (tests read it); and whether
// they may (on unless a test turns it off to compare with the regions
// taken part by part).
int64_t& a2a_runs_taken();
bool a2a_runs_on();
void set_a2a_runs(bool on);

// Whether a process part's enumeration replays the pieces of like tensors
// (planner.cc, build_chunk): on unless a test turns it off to compare the
// parts with those of every tensor enumerated on its own.
bool replay_like();
void set_replay_like(bool on);
// The most pieces a tensor range keeps to replay (0: the default, 1 MiB of
// them); tests lower it to reach the kinds that enumerate every tensor.
size_t replay_pieces_cap();
void set_replay_pieces_cap(size_t pieces);

}  // namespace reshard::planning
