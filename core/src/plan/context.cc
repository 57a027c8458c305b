// Context::build: what every step of make_plan looks up.
#include "plan/context.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>

#include "plan/group_memo.h"
#include "plan/stream_bound.h"
#include "plan/transit.h"
#include "reshard/error.h"
#include "util/nic_groups.h"

namespace reshard::planning {

namespace {

// A tensor's single-hop pieces (stats_visits, enumerated), once per
// layouts, shape and element size; above `cap` where its destination's
// entries alone are (every entry takes a piece at least: a fleet of
// thousands is not counted).
class SingleHopPieces {
 public:
  explicit SingleHopPieces(int64_t split_min_bytes) : split_min_bytes_(split_min_bytes) {}
  int64_t operator()(const TensorCtx& t, int64_t cap) {
    auto [it, fresh] = memo_.try_emplace(std::make_tuple(t.sg, t.dg, t.spec->shape, t.esize), 0);
    if (fresh)
      it->second = static_cast<int64_t>(t.dst->num_entries()) > cap
                       ? cap + 1
                       : stats_visits(t, true, false, split_min_bytes_);
    return it->second;
  }

 private:
  int64_t split_min_bytes_;
  std::map<std::tuple<const Geometry*, const Geometry*, std::vector<int64_t>, int64_t>, int64_t>
      memo_;
};

}  // namespace

void Context::build() {
  std::set<const Geometry*> geos;
  for (const auto& t : input.tensors) {
    geos.insert(t.src.geometry().get());
    geos.insert(t.dst.geometry().get());
  }
  {
    std::vector<int64_t> all;
    for (const Geometry* g : geos) all.insert(all.end(), g->devices.begin(), g->devices.end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    devices = std::move(all);
  }
  if (static_cast<int64_t>(devices.size()) > kMaxDevices)
    fail(ErrorCode::kOutOfRange, "tensors",
         "the layouts hold " + std::to_string(devices.size()) + " distinct devices, more than " +
             std::to_string(kMaxDevices) + " (the most one plan holds)");
  std::set<int32_t> procs;
  for (const Geometry* g : geos) {
    GeoTopo& gt = topo[g];
    const size_t n = g->devices.size();
    gt.process.resize(n);
    gt.host.resize(n);
    gt.dense.resize(n);
    for (size_t e = 0; e < n; ++e) {
      DeviceInfo info = input.topology.info(g->devices[e]);
      gt.process[e] = info.process;
      gt.host[e] = info.host;
      gt.dense[e] = dense(g->devices[e]);
    }
    std::vector<uint32_t> order(n);
    for (uint32_t e = 0; e < n; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return gt.process[a] < gt.process[b]; });
    for (size_t i = 0; i < n; ++i) {
      const int32_t p = gt.process[order[i]];
      if (gt.procs.empty() || gt.procs.back() != p) {
        gt.procs.push_back(p);
        gt.proc_offsets.push_back(static_cast<uint32_t>(i));
        procs.insert(p);
      }
    }
    gt.proc_offsets.push_back(static_cast<uint32_t>(n));
    gt.proc_entries = std::move(order);
    std::vector<int32_t> hosts = gt.host;
    std::sort(hosts.begin(), hosts.end());
    gt.num_hosts = static_cast<int32_t>(std::unique(hosts.begin(), hosts.end()) - hosts.begin());
    std::vector<int32_t> by_host = gt.host;
    std::sort(by_host.begin(), by_host.end());
    for (size_t i = 0, j = 0; i < by_host.size(); i = j) {
      for (j = i; j < by_host.size() && by_host[j] == by_host[i];) ++j;
      gt.max_host_entries = std::max(gt.max_host_entries, static_cast<int64_t>(j - i));
    }
  }
  processes.assign(procs.begin(), procs.end());
  tensors.resize(input.tensors.size());
  for (size_t i = 0; i < input.tensors.size(); ++i) {
    const TensorSpec& s = input.tensors[i];
    TensorCtx& t = tensors[i];
    t.index = static_cast<uint32_t>(i);
    t.spec = &s;
    t.src = &s.src;
    t.dst = &s.dst;
    t.sg = s.src.geometry().get();
    t.dg = s.dst.geometry().get();
    t.st = &topo.at(t.sg);
    t.dt = &topo.at(t.dg);
    t.esize = wire_size(s);  // bytes per element in messages (casts: the smaller dtype)
    t.S = s.src.num_summands();
    t.T = s.dst.num_summands();
    t.field = "tensors[" + std::to_string(i) + "]";
  }
  // TensorCtx::share: bytes per (source, destination) geometry pair.
  std::map<std::pair<const Geometry*, const Geometry*>, double> pair_bytes;
  for (const TensorCtx& t : tensors)
    pair_bytes[{t.sg, t.dg}] += static_cast<double>(t.dst->num_elements() * t.esize);
  for (TensorCtx& t : tensors) {
    const auto own = static_cast<double>(t.dst->num_elements() * t.esize);
    t.share = own > 0 ? pair_bytes[{t.sg, t.dg}] / own : 1.0;
  }
  // TensorCtx::joint_entry: per geometry pair of several tensors, at most
  // kJointEntryPieces single-hop pieces (stats_visits, enumerated: entries
  // times the source cells each overlaps) times the destination's hosts,
  // the most runs a piece can be cut into, one per receiving host. Counted
  // once per shape and element size. On a DeepSeek-V3-class MoE sync at
  // 1,024 devices (64 receiving hosts) every like tensor's bytes counted
  // turned 47 M pieces into 2.8 G for an estimate 4% lower.
  {
    std::map<std::pair<const Geometry*, const Geometry*>, int64_t> pair_pieces;
    SingleHopPieces visits(input.options.split_min_bytes);
    for (const TensorCtx& t : tensors) {
      if (!(t.share > 1.0)) continue;
      const int64_t h = std::max<int64_t>(1, t.dt->num_hosts);
      const int64_t v = visits(t, kJointEntryPieces / h);
      const int64_t runs = v > kJointEntryPieces / h ? kJointEntryPieces + 1 : v * h;
      int64_t& sum = pair_pieces[{t.sg, t.dg}];
      sum = std::min(kJointEntryPieces + 1, sum + runs);
    }
    for (TensorCtx& t : tensors)
      t.joint_entry = t.share > 1.0 && pair_pieces[{t.sg, t.dg}] <= kJointEntryPieces;
  }
  // Pre-reduction (docs/design.md §2.4): a candidate with relays and
  // reduce-scatter on and a partial source with a whole destination;
  // decide_pre_reduce settles it under a staging budget.
  const PlanOptions& o = input.options;
  pre_reduce = false;
  scratch_reserve = 0;
  for (const TensorCtx& t : tensors) pre_reduce |= t.S > 1 && t.T == 1;
  pre_reduce = pre_reduce && o.relays && o.reduce_scatter;
}

namespace {
// A mode going less far must beat the estimate by this factor: near-ties
// keep the plan nearer the byte bounds.
constexpr double kReduceMargin = 1.05;
// The single-hop guard tries groups one by one only for plans estimated
// above this times their lower bound (the whole plans it always compares):
// each try estimates the whole plan again (a DeepSeek-V3-class MoE sync at
// 1,024 devices, 2 s a try), for at most this much to gain.
constexpr double kNearBound = 1.10;
// decide_device_cross's trial of a group is a whole routed pass, about 2 µs
// per (entry, source region) of its cells (stats_visits, enumerated; the
// all-to-all cells' bookkeeping per entry and region): above this many it
// is tried only where the plan is estimated above kNearBound times its
// lower bound. The DeepSeek-V3-class MoE sync counts 2^20 at 4,096
// devices (2.3 s) and 2^24 at 16,384 (35 s of its global statistics' 40,
// for a trial the estimate rejected at every size: 1.04 to 1.07 times the
// single-hop plan, itself 1.045 times the bound).
constexpr int64_t kCrossTrialVisits = int64_t{1} << 20;
std::atomic<int64_t> cross_trial_visits{kCrossTrialVisits};
// Above this many groups of like tensors, one mode for all of them.
constexpr size_t kMaxReduceGroups = 16;

// Groups of tensor indices in the order of their first tensors (a map's
// order is that of pointers, which two processes need not share, and the
// greedy passes depend on the order); past kMaxReduceGroups, one group.
std::vector<std::vector<size_t>> in_order(std::vector<std::vector<size_t>> groups) {
  std::sort(groups.begin(), groups.end(),
            [](const std::vector<size_t>& a, const std::vector<size_t>& b) {
              return a.front() < b.front();
            });
  if (groups.size() > kMaxReduceGroups) {
    std::vector<size_t> all;
    for (const std::vector<size_t>& g : groups) all.insert(all.end(), g.begin(), g.end());
    std::sort(all.begin(), all.end());
    groups.assign(1, std::move(all));
  }
  return groups;
}
}  // namespace

namespace {
// Groups of like tensors among those `pick` accepts: same source and
// destination geometry (layouts: a geometry is shared by every shape on one
// mesh and spec), shape and element size. Their order follows pointers,
// which two processes need not share: callers order them (in_order, or by
// size).
template <class Pick>
std::vector<std::vector<size_t>> like_tensors(const std::vector<TensorCtx>& tensors, Pick&& pick) {
  using Key = std::tuple<const Geometry*, const Geometry*, std::vector<int64_t>, int64_t>;
  std::map<Key, std::vector<size_t>> by_key;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorCtx& t = tensors[i];
    if (pick(t)) by_key[Key(t.sg, t.dg, t.spec->shape, t.esize)].push_back(i);
  }
  std::vector<std::vector<size_t>> groups;
  for (auto& [k, g] : by_key) groups.push_back(std::move(g));
  return groups;
}
}  // namespace

std::vector<std::vector<size_t>> Context::reduce_groups() const {
  return in_order(like_tensors(tensors, [](const TensorCtx& t) { return t.S > 1 && t.T == 1; }));
}

void Context::set_reduce(const std::vector<size_t>& group, TensorCtx::Reduce mode) {
  for (size_t i : group) tensors[i].reduce = mode;
}

void Context::decide_pre_reduce(int64_t max_bytes) {
  const int64_t budget = input.options.staging_budget_bytes;
  if (!pre_reduce || budget == 0) return;
  auto most_scratch = [&] {
    PlanStats probe;
    compute_stats(*this, probe, input.options, false, nullptr, max_bytes);
    return probe.max_scratch_bytes;
  };
  const int64_t most = most_scratch();
  if (most <= budget / 2) {
    scratch_reserve = most;
    return;
  }
  // Bands (planner version 20): each part a holder host pre-reduces cut
  // into 2, 4, ... kMaxReduceBands bands, band k written into its scratch
  // in stage k and sent on in k + 1, so that the scratch of band k + 2
  // reuses band k's bytes (plan/scratch_layout.h): the fewest bands whose
  // most scratch on a device fits half the budget.
  std::vector<std::vector<size_t>> groups = reduce_groups();
  // (compute_stats may turn relay_split off for the streams the bands add:
  // restored when no band count is kept, or nothing pre-reduces in the
  // end, decide_reductions.)
  split_before_bands = relay_split;
  const auto set_bands = [&](uint32_t bands) {
    for (const std::vector<size_t>& g : groups)
      for (size_t i : g) tensors[i].reduce_bands = bands;
  };
  for (uint32_t bands = 2; bands <= kMaxReduceBands; bands *= 2) {
    set_bands(bands);
    int64_t s = 0;
    try {
      s = most_scratch();
    } catch (const Error& e) {
      // The budget cannot stage the streams the bands add on some device
      // (16 bytes per peer and stage, compute_stats): more bands add more.
      if (e.code() != ErrorCode::kInvalidArgument) throw;
      break;
    }
    if (s > budget / 2) continue;
    // Kept only if the plan at the budget less that scratch (what rounds
    // are cut at, staging_options) stages every device's streams and holds
    // the same scratch; else as without bands.
    scratch_reserve = s;
    try {
      PlanStats at;
      compute_stats(*this, at, staging_options(), false, nullptr, max_bytes);
      if (at.max_scratch_bytes == s) return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument) throw;
    }
    scratch_reserve = 0;
    break;
  }
  set_bands(1);
  relay_split = *split_before_bands;
  // Too much scratch even so for every tensor to pre-reduce: groups of like
  // tensors join one at a time, smallest first (by their bytes), while the
  // most scratch on a device stays within half the budget.
  if (groups.size() < 2) {
    pre_reduce = false;
    return;
  }
  auto bytes = [&](const std::vector<size_t>& g) {
    int64_t b = 0;
    for (size_t i : g) b += tensors[i].dst->num_elements() * tensors[i].esize;
    return b;
  };
  std::stable_sort(groups.begin(), groups.end(),
                   [&](const std::vector<size_t>& a, const std::vector<size_t>& b) {
                     return bytes(a) < bytes(b);
                   });
  for (const std::vector<size_t>& g : groups) set_reduce(g, TensorCtx::kReduceScatter);
  int64_t kept = 0;
  for (const std::vector<size_t>& g : groups) {
    set_reduce(g, TensorCtx::kPreReduce);
    const int64_t s = most_scratch();
    if (s <= budget / 2)
      kept = s;
    else
      set_reduce(g, TensorCtx::kReduceScatter);
  }
  if (kept == 0) {
    pre_reduce = false;
    for (const std::vector<size_t>& g : groups) set_reduce(g, TensorCtx::kPreReduce);
  }
  scratch_reserve = kept;
}

void Context::decide_reductions(int64_t max_bytes) {
  const PlanOptions& o = input.options;
  if (!o.reduce_scatter || o.alpha_seconds <= 0) return;
  const std::vector<std::vector<size_t>> groups = reduce_groups();
  if (groups.empty()) return;
  int64_t scratch = 0;
  auto estimate = [&] {
    PlanStats st;
    scheduled_stats(st, max_bytes);
    scratch = st.max_scratch_bytes;
    return st.cost_seconds;
  };
  // From the modes decide_pre_reduce left (kPreReduce, or kReduceScatter
  // for groups whose scratch the budget could not hold).
  double least = estimate();
  // No scratch anywhere: nothing pre-reduces, and kReduceScatter plans the same.
  const bool pre = pre_reduce && scratch > 0;
  for (const std::vector<size_t>& g : groups) {
    const TensorCtx::Reduce from = tensors[g.front()].reduce;
    TensorCtx::Reduce best = from;
    for (TensorCtx::Reduce m : {TensorCtx::kReduceScatter, TensorCtx::kSingleHop}) {
      if (m >= from || (m == TensorCtx::kReduceScatter && !pre)) continue;  // the same plan
      set_reduce(g, m);
      const double cost = estimate();
      if (cost * kReduceMargin < least) {
        best = m;
        least = cost;
      }
    }
    set_reduce(g, best);
  }
  settle_scratch(max_bytes);
}

void Context::settle_scratch(int64_t max_bytes) {
  // No tensor pre-reduces: no scratch to reserve under the budget.
  bool any = false;
  for (const TensorCtx& t : tensors)
    any |= (t.S > 1 && t.T == 1 && t.reduce == TensorCtx::kPreReduce) || t.transit != nullptr;
  // The scratch the chosen modes hold (routes may pre-reduce less than the
  // choice allows): what rounds are cut at the budget less.
  if (any && scratch_reserve > 0) {
    PlanStats held;
    compute_stats(*this, held, input.options, false, nullptr, max_bytes);
    any = held.max_scratch_bytes > 0;
    scratch_reserve = held.max_scratch_bytes;
  }
  if (!any) {
    pre_reduce = false;
    scratch_reserve = 0;
    for (TensorCtx& t : tensors) t.reduce_bands = 1;
    if (split_before_bands) relay_split = *split_before_bands;
  }
}

void Context::decide_lead_cut(int64_t max_bytes) {
  const PlanOptions& o = input.options;
  const int forced = choice_override().fine_lead;
  if (!o.relays || forced == 0 || (forced < 0 && o.alpha_seconds <= 0)) return;
  std::vector<std::vector<size_t>> like =
      like_tensors(tensors, [](const TensorCtx& t) { return t.S == 1 && t.T == 1; });
  if (like.empty()) return;
  double bound = 0;
  auto estimate = [&] {
    PlanStats st;
    scheduled_stats(st, max_bytes);
    bound = st.lower_bound_cost_seconds;
    return st.cost_seconds;
  };
  // Only groups whose parts the finer cut changes are tried: a plan with
  // none runs no pass here (and the routed statistics after it may stop
  // early, GuardStop).
  const PlanOptions staging = staging_options();  // the Enumerator keeps a reference
  Enumerator en(staging, pre_reduce, relay_split);
  std::vector<std::vector<size_t>> groups;
  // decide_device_cross's open decision, where it changes the groups.
  if (lead_reads_open_cross(en)) settle_device_cross(max_bytes, false);
  for (std::vector<size_t>& g : like)
    if (en.fine_lead_differs(tensors[g.front()])) groups.push_back(std::move(g));
  if (groups.empty()) return;
  // Near its bound a plan has little to gain, and each try is a whole pass
  // (the DeepSeek-V3-class MoE sync at 1,024 devices: seconds a pass); the
  // first pass is kept and handed on (scheduled_stats).
  double least = forced == 1 ? 0 : estimate();
  if (forced < 0 && least <= bound * kNearBound) return;
  groups = in_order(std::move(groups));
  auto set = [&](const std::vector<size_t>& g, bool on) {
    for (size_t i : g) tensors[i].fine_lead = on;
  };
  if (forced == 1) {
    for (const std::vector<size_t>& g : groups) set(g, true);
    return;
  }
  // Each group takes the finer parts only where the estimate drops: the
  // plan is never slower by it than with one leader per region.
  for (const std::vector<size_t>& g : groups) {
    set(g, true);
    const double cost = estimate();
    if (cost < least)
      least = cost;
    else
      set(g, false);
  }
}

void Context::decide_transit(int64_t max_bytes) {
  const PlanOptions& o = input.options;
  const int forced = choice_override().transit;
  if (!o.relays || forced == 0) return;
  // Groups of like tensors in the order of their first tensors, never
  // merged (a table is per layouts and shape); past kMaxReduceGroups groups
  // with tables, one trial for all of them.
  std::vector<std::vector<size_t>> like =
      like_tensors(tensors, [&](const TensorCtx& t) { return transit_may_apply(*this, t); });
  if (like.empty()) return;
  std::sort(like.begin(), like.end(),
            [](const std::vector<size_t>& a, const std::vector<size_t>& b) {
              return a.front() < b.front();
            });
  PlanStats st;
  auto estimate = [&] {
    st = PlanStats{};
    scheduled_stats(st, max_bytes);
    return st.cost_seconds;
  };
  // The tables first: a pure function of the layouts, the topology and the
  // context's pre-reduction and split runs (the Enumerator's), cheaper than
  // a pass; where no group has one, no pass is run. Per trial, the (group,
  // table) pairs it sets.
  std::vector<std::vector<std::pair<const std::vector<size_t>*, const TransitTable*>>> trials;
  const PlanOptions staging = staging_options();  // the Enumerator keeps a reference
  std::optional<Enumerator> en;
  std::pair<bool, bool> built;  // (pre_reduce, relay_split) the tables read
  const size_t kept_tables = transit_tables.size();
  auto build_tables = [&] {
    trials.clear();
    transit_tables.resize(kept_tables);
    en.emplace(staging, pre_reduce, relay_split);
    built = {pre_reduce, relay_split};
    for (const std::vector<size_t>& g : like) {
      std::unique_ptr<TransitTable> table = build_transit(*this, tensors[g.front()], *en);
      if (!table) continue;
      transit_tables.push_back(std::move(table));
      trials.push_back({{&g, transit_tables.back().get()}});
    }
  };
  build_tables();
  // Groups whose cells cross by cross_gate (the host or the device rule),
  // at most kMaxReduceGroups: each tries crossing off with a table of its
  // own (below). None while the device rule of a group is left open (the
  // plan is then above the single-hop plan's estimate either way).
  std::vector<const std::vector<size_t>*> crossing;
  if (!cross_open_ && choice_override().cross_off != 0)
    for (const std::vector<size_t>& g : like)
      if (crossing.size() < kMaxReduceGroups && en->crosses_few(tensors[g.front()]))
        crossing.push_back(&g);
  if (trials.empty() && crossing.empty() && guard_stop(max_bytes))
    return;  // no pass changes the context
  // Where the guard applies and the plan without transit relays is
  // provably above the single-hop plan's estimate (a pass stopped there,
  // GuardStop), the guard takes the single-hop plan whole unless a trial
  // brings the routed plan below it, where it tries no group alone (one
  // group of routes, or the single-hop plan within kNearBound of the
  // bound: decide_single_hop): the trial is priced first only as far as
  // that figure (below).
  std::optional<double> single;
  if (forced < 0 && guard_stop(max_bytes)) {
    const double s = single_hop_estimate(max_bytes);
    PlanStats stopped;
    if (!estimate_unless_above(s, max_bytes, &stopped) &&
        (single_hop_groups().size() == 1 || s <= stopped.lower_bound_cost_seconds * kNearBound))
      single = s;
  }
  // Near its bound a plan has little to gain; the pass is kept and handed
  // on (scheduled_stats).
  double least = 0;
  if (forced < 0 && !single) {
    least = estimate();
    if (least <= st.lower_bound_cost_seconds * kNearBound) return;
  }
  // A pass may have turned split runs off (compute_stats): the tables read them.
  if (built != std::pair<bool, bool>{pre_reduce, relay_split}) build_tables();
  if (trials.empty() && crossing.empty()) return;
  if (trials.size() > kMaxReduceGroups) {
    for (size_t k = 1; k < trials.size(); ++k) trials[0].push_back(trials[k].front());
    trials.resize(1);
  }
  auto set = [&](const auto& trial, bool on) {
    for (const auto& [g, table] : trial)
      for (size_t i : *g) tensors[i].transit = on ? table : nullptr;
  };
  const int64_t budget = o.staging_budget_bytes;
  if (forced == 1) {
    for (const auto& trial : trials) set(trial, true);
    if (budget > 0) {
      estimate();
      scratch_reserve = std::max(scratch_reserve, std::min(st.max_scratch_bytes, budget / 2));
    }
    return;
  }
  // One trial above the single-hop plan's estimate by either device rule
  // of a group left open (cross_one_group) leaves the plan single-hop,
  // whatever it decides: it is left off. Else it is decided on whole passes.
  if (single) {
    bool above = trials.size() == 1 && crossing.empty();
    if (above) {
      std::optional<CrossOpen> open = std::move(cross_open_);
      cross_open_.reset();
      set(trials.front(), true);
      for (const bool cross : {false, true}) {
        if (cross && !open) break;
        if (open)
          for (size_t i : open->group) tensors[i].device_cross = cross;
        if (estimate_unless_above(*single, max_bytes)) above = false;
      }
      set(trials.front(), false);
      if (open)
        for (size_t i : open->group) tensors[i].device_cross = false;
      cross_open_ = std::move(open);
    }
    if (above) return;
    least = estimate();
    if (least <= st.lower_bound_cost_seconds * kNearBound) return;
  }
  // Each group takes transit relays only where the estimate drops. Under a
  // staging budget the scratch is reserved as a pre-reduction's
  // (staging_options): rounds are cut at the budget less the most scratch
  // on a device, at most half the budget.
  // Whether the trial as set pays (least updated), its scratch reserved;
  // else the reserve is as it was.
  auto pays = [&] {
    const int64_t reserve = scratch_reserve;
    double cost = estimate();
    if (budget > 0 && st.max_scratch_bytes > scratch_reserve) {
      if (st.max_scratch_bytes > budget / 2) {
        cost = least;  // refused
      } else {
        scratch_reserve = st.max_scratch_bytes;
        cost = estimate();
      }
    }
    if (cost < least) {
      least = cost;
      return true;
    }
    scratch_reserve = reserve;
    return false;
  };
  for (const auto& trial : trials) {
    set(trial, true);
    if (!pays()) set(trial, false);
  }
  // The device rule was decided without transit relays
  // (decide_device_cross). A group into cells of several entries that
  // crosses by the rule tries it off with a table of its own (transit
  // changes what its crossing gains), kept only where the estimate drops.
  auto several = [&](const TensorCtx& t) {
    const Geometry& dg = *t.dg;
    for (int64_t c = 0; c < dg.num_cells(); ++c)
      if (dg.cell_offsets[static_cast<size_t>(c) + 1] - dg.cell_offsets[static_cast<size_t>(c)] > 1)
        return true;
    return false;
  };
  // Flips a group's decision (flip(true)) and gives it a transit table of
  // its own, both kept where kept() finds the estimate lower; else both
  // are restored.
  auto with_own_table = [&](const std::vector<size_t>& g, auto&& flip, auto&& kept) {
    const TransitTable* const was = tensors[g.front()].transit;
    flip(true);
    std::unique_ptr<TransitTable> own = build_transit(*this, tensors[g.front()], *en);
    if (own) {
      for (size_t i : g) tensors[i].transit = own.get();
      if (kept()) {
        transit_tables.push_back(std::move(own));
        return;
      }
    }
    flip(false);
    for (size_t i : g) tensors[i].transit = was;
  };
  for (const auto& trial : trials) {
    if (trial.size() != 1 || cross_open_) continue;
    const std::vector<size_t>& g = *trial.front().first;
    const TensorCtx& t = tensors[g.front()];
    if (!t.device_cross || !several(t)) continue;
    with_own_table(
        g,
        [&](bool off) {
          for (size_t i : g) tensors[i].device_cross = !off;
        },
        [&] {
          const double cost = estimate();
          if (cost >= least || (budget > 0 && st.max_scratch_bytes > scratch_reserve)) return false;
          least = cost;
          return true;
        });
  }
  // The host rule crosses a cell where single-hop would load a holder host
  // by bytes alone; a receiving device then takes its whole lead share
  // through its own NIC, which no transit can spread (it forwards what it
  // takes in). A group whose cells cross by cross_gate tries crossing off
  // (TensorCtx::cross_off) with a table of its own, kept only where the
  // estimate drops: replicas of tp6 on 4 GPUs of 3 hosts, fed by FSDP
  // over 4 hosts, each receiving host's source-only GPUs carry its
  // ingress.
  for (const std::vector<size_t>* g : crossing) {
    if (tensors[g->front()].single_hop) continue;
    with_own_table(
        *g,
        [&](bool off) {
          for (size_t i : *g) tensors[i].cross_off = off;
        },
        pays);
  }
}

namespace {
// Relay bands are tried larger (Context::decide_band_scale) on plans of at
// most this many pieces: each try is a whole pass.
constexpr int64_t kBandScalePieces = int64_t{1} << 20;
}  // namespace

bool Context::may_band(const PlanOptions& o) const {
  // A tensor below two bands of relay_chunk_bytes has no part a larger
  // scale could cut differently.
  const int64_t two = 2 * relay_chunk_bytes(o);
  for (const TensorCtx& t : tensors)
    if (t.dst->num_elements() * t.esize >= two) return true;
  return false;
}

int32_t Context::fewest_group_nics() const {
  const int32_t nics = input.options.nics_per_host;
  if (nics == 0 || devices.empty()) return 1;
  // The plan's devices per host (reshard::nic_group numbers them on it).
  std::map<int32_t, int64_t> on_host;
  for (int64_t d : devices) ++on_host[input.topology.info(d).host];
  int32_t least = nics;
  for (const auto& [host, m] : on_host) {
    // Groups differ by at most one NIC: the first device's or the last's
    // group is the smallest.
    least = std::min({least, nic_group(0, m, nics).second, nic_group(m - 1, m, nics).second});
  }
  return std::max(least, 1);
}

void Context::decide_band_scale(int64_t max_bytes) {
  const PlanOptions& o = input.options;
  const uint32_t forced = choice_override().band_scale;
  if (forced > 0) {
    for (TensorCtx& t : tensors) t.band_scale = forced;
    return;
  }
  // Bands of relay_chunk_bytes are 8 α of one NIC: on devices of one NIC
  // each they are the rule's size.
  const int32_t group = fewest_group_nics();
  if (!o.relays || o.alpha_seconds <= 0 || group < 2 || !may_band(o)) return;
  auto set = [&](uint32_t scale) {
    for (TensorCtx& t : tensors) t.band_scale = scale;
  };
  PlanStats st;
  scheduled_stats(st, max_bytes);
  // One stage: no relay, no band. Near its bound, or on a large plan, the
  // tries cost more than they can gain.
  if (st.stages < 2 || st.pieces > kBandScalePieces ||
      st.cost_seconds <= st.lower_bound_cost_seconds * kNearBound)
    return;
  // Bands of 8 α of the device's NIC group, then twice that, ... up to
  // kRelayBands times relay_chunk_bytes, while the whole plan's estimate
  // drops.
  double least = st.cost_seconds;
  uint32_t kept = 1;
  for (auto scale = static_cast<uint32_t>(group); scale <= kRelayBands; scale *= 2) {
    set(scale);
    PlanStats trial;
    scheduled_stats(trial, max_bytes);
    if (trial.cost_seconds >= least) break;
    least = trial.cost_seconds;
    kept = scale;
  }
  set(kept);
}

void Context::decide_joint_entry(int64_t max_bytes) {
  if (!input.options.relays) return;
  // The geometry pairs that count their bytes together, in the order of
  // their first tensors.
  std::vector<std::vector<size_t>> groups;
  std::map<std::pair<const Geometry*, const Geometry*>, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorCtx& t = tensors[i];
    if (!t.joint_entry) continue;
    const auto [it, fresh] = index.try_emplace({t.sg, t.dg}, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  // Each try is a whole pass: on small plans only, by every tensor's
  // single-hop pieces (stats_visits, enumerated; counted once per shape
  // and layouts), counted until above kJointTrialPieces.
  if (groups.empty()) return;
  SingleHopPieces visits(input.options.split_min_bytes);
  int64_t pieces = 0;
  for (const TensorCtx& t : tensors) {
    pieces += std::min(visits(t, kJointTrialPieces), kJointTrialPieces + 1);
    if (pieces > kJointTrialPieces) return;
  }
  auto set = [&](const std::vector<size_t>& g, bool on) {
    for (size_t i : g) tensors[i].joint_entry = on;
  };
  groups = in_order(std::move(groups));
  PlanStats st;
  scheduled_stats(st, max_bytes);
  // One stage: no cross layout read the flag.
  if (st.stages < 2) return;
  double least = st.cost_seconds;
  for (const std::vector<size_t>& g : groups) {
    set(g, false);
    PlanStats trial;
    scheduled_stats(trial, max_bytes);
    if (trial.cost_seconds < least)
      least = trial.cost_seconds;
    else
      set(g, true);
  }
}

bool Context::cross_trial_pays(const std::vector<size_t>& g, double least) {
  const TensorCtx& t = tensors[g.front()];
  if (stats_visits(t, true, true, input.options.split_min_bytes) <= cross_trial_visits.load())
    return true;
  if (!cross_bound_) {
    PlanStats st;
    apply_bounds(*this, compute_bounds(*this), staging_options(), st);
    cross_bound_ = st.lower_bound_cost_seconds;
  }
  return least > *cross_bound_ * kNearBound;
}

void Context::decide_device_cross(int64_t max_bytes) {
  const PlanOptions& o = input.options;
  const int forced = choice_override().device_cross;
  if (!o.relays || forced == 0) return;
  const PlanOptions staging = staging_options();
  // Like tensors: the cross gate's key (layouts, shape, element size);
  // sources on any number of hosts (from one host, cells replicated over
  // hosts cross anyway and the rule chooses their layout, §5.3).
  std::vector<std::vector<size_t>> like =
      like_tensors(tensors, [](const TensorCtx& t) { return t.S == 1 && t.T == 1; });
  if (like.empty()) return;
  Enumerator en(staging, pre_reduce, relay_split);
  std::vector<std::vector<size_t>> groups;
  for (std::vector<size_t>& g : like)
    if (en.device_crosses(tensors[g.front()])) groups.push_back(std::move(g));
  if (groups.empty()) return;
  groups = in_order(std::move(groups));
  auto set = [&](const std::vector<size_t>& g, bool on) {
    for (size_t i : g) tensors[i].device_cross = on;
  };
  // Each group crosses by the device rule only where the estimate drops:
  // a plan never comes out slower by it than without the rule.
  if (forced == 1) {
    for (const std::vector<size_t>& g : groups) set(g, true);
    return;
  }
  // Where the guard applies, no pass can change the context (guard_stop),
  // so a trial may stop once above the figure it is compared with
  // (cross_decision.cc); one group's decision may be left open.
  const bool stops = guard_stop(max_bytes).has_value();
  if (stops && groups.size() == 1) {
    const std::optional<bool> on = cross_one_group(groups.front(), max_bytes);
    set(groups.front(), on.value_or(false));
    return;
  }
  auto estimate = [&](double above) -> std::optional<double> {
    if (stops) return estimate_unless_above(above, max_bytes);
    PlanStats st;
    scheduled_stats(st, max_bytes);
    return st.cost_seconds;
  };
  double least = *estimate(std::numeric_limits<double>::infinity());
  for (const std::vector<size_t>& g : groups) {
    if (!cross_trial_pays(g, least)) continue;
    set(g, true);
    const std::optional<double> cost = estimate(least);
    if (cost && *cost < least)
      least = *cost;
    else
      set(g, false);
  }
}

std::vector<std::vector<size_t>> Context::single_hop_groups() const {
  const PlanOptions& o = input.options;
  // Like tensors with a route.
  std::vector<std::vector<size_t>> groups = like_tensors(tensors, [&](const TensorCtx& t) {
    return t.T == 1 &&
           (t.S == 1 ? o.relays : o.reduce_scatter && t.reduce != TensorCtx::kSingleHop);
  });
  auto bytes = [&](const std::vector<size_t>& g) {
    int64_t b = 0;
    for (size_t i : g) b += tensors[i].dst->num_elements() * tensors[i].esize;
    return b;
  };
  // Largest first, ties in the order of their first tensors (a map's order
  // is that of pointers, which two processes need not share).
  std::sort(groups.begin(), groups.end(),
            [&](const std::vector<size_t>& a, const std::vector<size_t>& b) {
              const int64_t x = bytes(a), y = bytes(b);
              return x != y ? x > y : a.front() < b.front();
            });
  if (groups.size() > kMaxReduceGroups) {
    std::vector<size_t> rest;
    for (size_t g = kMaxReduceGroups - 1; g < groups.size(); ++g)
      rest.insert(rest.end(), groups[g].begin(), groups[g].end());
    std::sort(rest.begin(), rest.end());
    groups.resize(kMaxReduceGroups - 1);
    groups.push_back(std::move(rest));
  }
  return groups;
}

namespace {
bool guard_stops_on = true;
int64_t guard_stops_count = 0;
}  // namespace

bool guard_stops() { return guard_stops_on; }
void set_guard_stops(bool on) { guard_stops_on = on; }
int64_t set_cross_trial_visits(int64_t visits) { return cross_trial_visits.exchange(visits); }
int64_t& guard_stops_taken() { return guard_stops_count; }
int64_t& stats_passes() {
  static int64_t passes = 0;
  return passes;
}
int64_t& relay_parts_visited() {
  static int64_t visited = 0;
  return visited;
}
int64_t& direct_sums_taken() {
  static int64_t taken = 0;
  return taken;
}
int64_t& entered_sums_taken() {
  static int64_t taken = 0;
  return taken;
}
int64_t& a2a_tables_shared() {
  static int64_t shared = 0;
  return shared;
}
int64_t& a2a_runs_taken() {
  static int64_t taken = 0;
  return taken;
}
namespace {
std::atomic<bool> a2a_runs_enabled{true};
}  // namespace
bool a2a_runs_on() { return a2a_runs_enabled.load(std::memory_order_relaxed); }
void set_a2a_runs(bool on) { a2a_runs_enabled.store(on, std::memory_order_relaxed); }

std::optional<GuardStop> Context::guard_stop(int64_t max_bytes) {
  const PlanOptions& o = input.options;
  if (!guard_stops_on || (!o.relays && !o.reduce_scatter) || !o.single_hop_guard ||
      choice_override().single_hop == 0)
    return std::nullopt;
  // compute_stats starts again without relay_split where a device has
  // budget <= 16 * peers in a stage; a device's peers in a stage are at
  // most its plain streams and its band streams' bands, each way.
  const int64_t most_peers = 2 * static_cast<int64_t>(devices.size()) * kRelayBands;
  if (staging_options().staging_budget_bytes <= 16 * most_peers) return std::nullopt;
  if (single_hop_groups().empty()) return std::nullopt;
  GuardStop g;
  g.single_cost = [this, max_bytes] { return single_hop_estimate(max_bytes); };
  return g;
}

namespace {

// The routed decisions the deciders left (per tensor its single-hop flag,
// reduce mode and bands; the context's pre-reduction, split runs and
// scratch reserve), kept to set groups single-hop and to go back.
class RoutedState {
 public:
  explicit RoutedState(Context& ctx)
      : ctx_(ctx), pre_(ctx.pre_reduce), split_(ctx.relay_split), reserve_(ctx.scratch_reserve) {
    for (const TensorCtx& t : ctx.tensors)
      tensors_.push_back({t.single_hop, t.reduce, t.reduce_bands, t.transit});
  }
  // The group single-hop (no transit relays either), or back to its routed
  // reduce mode, bands and transit relays (not single-hop).
  void set(const std::vector<size_t>& g, bool single) {
    for (size_t i : g) {
      TensorCtx& t = ctx_.tensors[i];
      t.single_hop = single;
      t.reduce = single && t.S > 1 ? TensorCtx::kSingleHop : tensors_[i].reduce;
      t.reduce_bands = single ? 1 : tensors_[i].bands;
      t.transit = single ? nullptr : tensors_[i].transit;
    }
  }
  // Scratch, bands and split runs as the routed plan had them, or as
  // without pre-reduction (settle_scratch).
  void context_routed(bool on) {
    if (on) {
      ctx_.pre_reduce = pre_;
      ctx_.relay_split = split_;
      ctx_.scratch_reserve = reserve_;
    } else {
      ctx_.pre_reduce = false;
      ctx_.scratch_reserve = 0;
      if (ctx_.split_before_bands) ctx_.relay_split = *ctx_.split_before_bands;
    }
  }
  // Everything as it was.
  void restore() {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      TensorCtx& t = ctx_.tensors[i];
      t.single_hop = tensors_[i].single;
      t.reduce = tensors_[i].reduce;
      t.reduce_bands = tensors_[i].bands;
      t.transit = tensors_[i].transit;
    }
    context_routed(true);
  }

 private:
  struct Tensor {
    bool single;
    TensorCtx::Reduce reduce;
    uint32_t bands;
    const TransitTable* transit;
  };
  Context& ctx_;
  std::vector<Tensor> tensors_;
  bool pre_, split_;
  int64_t reserve_;
};

}  // namespace

double Context::single_hop_estimate(int64_t max_bytes) {
  if (single_hop_cost_) return *single_hop_cost_;
  // decide_single_hop's estimate of the plan with every group single-hop,
  // from the routed state, which is put back.
  RoutedState routed(*this);
  for (const std::vector<size_t>& g : single_hop_groups()) routed.set(g, true);
  routed.context_routed(false);
  PlanStats st;
  compute_stats(*this, st, staging_options(), false, nullptr, max_bytes);
  routed.restore();
  single_hop_cost_ = st.cost_seconds;
  return st.cost_seconds;
}

bool Context::decide_single_hop(int64_t max_bytes, const PlanStats* routed_stats) {
  const PlanOptions& o = input.options;
  std::vector<std::vector<size_t>> groups;
  if ((o.relays || o.reduce_scatter) && o.single_hop_guard && choice_override().single_hop != 0)
    groups = single_hop_groups();
  PlanStats probe;
  if (!groups.empty() && !routed_stats) {
    std::optional<GuardStop> stop = guard_stop(max_bytes);
    compute_stats(*this, probe, staging_options(), false, nullptr, max_bytes, false, nullptr,
                  nullptr, stop ? &*stop : nullptr);
    routed_stats = &probe;
  }
  // single_hop_estimate's figure, where a routed pass asked for it: for
  // this decision alone.
  const std::optional<double> known_single = single_hop_cost_;
  single_hop_cost_.reset();
  if (groups.empty()) return false;
  // One stage: no route taken, the plan is single-hop already.
  if (routed_stats->stages <= 1) return false;
  // Each group's routed decisions (what the other deciders left) and the
  // context's, to go back to.
  RoutedState routed(*this);
  // Each try changes one group's routes: the others' contributions are
  // kept from the try before (group_memo.h).
  GroupMemo memo;
  auto estimate = [&] {
    PlanStats st;
    struct Memo {
      Context& c;
      ~Memo() { c.group_memo = nullptr; }
    } on{*this};
    if (group_memo_on()) group_memo = &memo;
    compute_stats(*this, st, staging_options(), false, nullptr, max_bytes);
    return st.cost_seconds;
  };
  // The two whole plans first: the single-hop one is cheap to estimate,
  // and where it wins (the routes' stages and relay duties cost more than
  // the bytes they save), the groups start from it and each tries its
  // routes alone, which keeps every estimate cheap; else each group tries
  // single-hop from the routed plan. (A routed pass that stopped early
  // computed the single-hop estimate already: single_hop_estimate.)
  const double routed_cost = routed_stats->cost_seconds;
  for (const std::vector<size_t>& g : groups) routed.set(g, true);
  routed.context_routed(false);
  const double single_cost = known_single ? *known_single : estimate();
  const bool from_single = single_cost < routed_cost;
  double least = from_single ? single_cost : routed_cost;
  if (!from_single) {
    for (const std::vector<size_t>& g : groups) routed.set(g, false);
    routed.context_routed(true);
  }
  bool changed = from_single;
  // Group by group only where that can gain more than kNearBound: each try
  // estimates the whole plan again.
  const double bound = routed_stats->lower_bound_cost_seconds;
  if (groups.size() >= 2 && least > bound * kNearBound) {
    if (from_single) routed.context_routed(true);
    for (const std::vector<size_t>& g : groups) {
      routed.set(g, !from_single);
      const double cost = estimate();
      if (cost < least) {
        least = cost;
        changed = true;
      } else {
        routed.set(g, from_single);
      }
    }
  }
  // Untouched, the plan is the routed one, byte for byte.
  if (changed) settle_scratch(max_bytes);
  return changed;
}

std::vector<int64_t> Context::pass_key(int64_t max_bytes) const {
  // Keyed and spread cuts on request (choice_override()) change the pass too.
  std::vector<int64_t> key{
      max_bytes,     pre_reduce,   scratch_reserve,         relay_split,
      track_streams, track_spread, choice_override().keyed, choice_override().spread};
  key.reserve(key.size() + 9 * tensors.size());
  for (const TensorCtx& t : tensors)
    key.insert(key.end(), {t.single_hop, t.reduce, t.reduce_bands, t.device_cross, t.fine_lead,
                           t.band_scale, t.transit != nullptr, t.joint_entry, t.cross_off});
  return key;
}

void Context::scheduled_stats(PlanStats& st, int64_t max_bytes, std::vector<DeviceCounts>* counts,
                              std::vector<DeviceLoad>* stage_loads, RoundRule* rule,
                              GuardStop* guard) {
  auto hand_out = [&](const KeptPass& k) {
    st = k.st;
    if (counts) *counts = k.counts;
    if (stage_loads) *stage_loads = k.stage_loads;
    if (rule) *rule = k.rule;
  };
  if (kept_ && kept_->key == pass_key(max_bytes)) return hand_out(*kept_);
  // A stopped pass leaves the last whole one kept.
  KeptPass k;
  compute_stats(*this, k.st, staging_options(), true, &k.counts, max_bytes, false, &k.stage_loads,
                &k.rule, guard);
  if (guard && guard->stopped) {
    hand_out(k);
    return;
  }
  // The key after the pass: it may turn relay_split off or track streams,
  // and starts again with them so.
  k.key = pass_key(max_bytes);
  kept_ = std::move(k);
  hand_out(*kept_);
}

PlanOptions Context::staging_options() const {
  PlanOptions o = input.options;
  if (o.staging_budget_bytes > 0) o.staging_budget_bytes -= scratch_reserve;
  return o;
}
}  // namespace reshard::planning
