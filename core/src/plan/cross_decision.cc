// Context::decide_device_cross's trials, priced only as far as the
// decision needs: a trial pass stops once its estimate is provably above
// the figure it is compared with (a GuardStop at that figure), and where
// the guard applies and one group is tried, the decision is left open
// while the plan by either rule is provably above the single-hop plan's
// estimate (the single-hop guard then takes that plan, which does not read
// the rule); a pass or decider that would read it makes it first, in the
// state it was left open in.
#include <algorithm>
#include <atomic>

#include "plan/context.h"

namespace reshard::planning {

Context::Decisions::Decisions(const Context& c)
    : pre_reduce(c.pre_reduce),
      relay_split(c.relay_split),
      track_streams(c.track_streams),
      track_spread(c.track_spread),
      scratch_reserve(c.scratch_reserve) {
  tensors.reserve(c.tensors.size());
  for (const TensorCtx& t : c.tensors)
    tensors.push_back({t.single_hop, t.reduce, t.reduce_bands, t.device_cross, t.fine_lead,
                       t.band_scale, t.cross_off});
}

void Context::Decisions::restore(Context& c) const {
  c.pre_reduce = pre_reduce;
  c.relay_split = relay_split;
  c.track_streams = track_streams;
  c.track_spread = track_spread;
  c.scratch_reserve = scratch_reserve;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorCtx& t = c.tensors[i];
    const std::array<int64_t, 7>& d = tensors[i];
    t.single_hop = d[0] != 0;
    t.reduce = static_cast<TensorCtx::Reduce>(d[1]);
    t.reduce_bands = static_cast<uint32_t>(d[2]);
    t.device_cross = d[3] != 0;
    t.fine_lead = d[4] != 0;
    t.band_scale = static_cast<uint32_t>(d[5]);
    t.cross_off = d[6] != 0;
  }
}

std::optional<double> Context::estimate_unless_above(double above, int64_t max_bytes,
                                                     PlanStats* stopped) {
  GuardStop g;
  g.single_cost = [above] { return above; };
  PlanStats st;
  scheduled_stats(st, max_bytes, nullptr, nullptr, nullptr, &g);
  if (!g.stopped) return st.cost_seconds;
  if (stopped) *stopped = st;
  return std::nullopt;
}

std::optional<bool> Context::cross_one_group(const std::vector<size_t>& g, int64_t max_bytes) {
  auto set = [&](bool on) {
    for (size_t i : g) tensors[i].device_cross = on;
  };
  // The trial is taken where its estimate is below the plan's without it
  // (decide_device_cross). A pass stopped at a figure is above it.
  const double single = single_hop_estimate(max_bytes);
  PlanStats stopped;
  const std::optional<double> base = estimate_unless_above(single, max_bytes, &stopped);
  // The plan is at most the single-hop plan (the guard).
  if (!cross_trial_pays(g, base ? std::min(*base, single) : single)) return false;
  set(true);
  if (base) {
    const std::optional<double> cost = estimate_unless_above(*base, max_bytes);
    return cost && *cost < *base;
  }
  // The plan without the rule is above the single-hop plan.
  PlanStats trial_stopped;
  const std::optional<double> cost = estimate_unless_above(single, max_bytes, &trial_stopped);
  if (cost && *cost < single) return true;
  set(false);
  if (cost) {
    const std::optional<double> again = estimate_unless_above(*cost, max_bytes);
    return !again || *cost < *again;
  }
  // Both above: left open (what decide_single_hop reads of a stopped pass
  // is kept: its cost above `single`, its stages and bounds).
  cross_open_ =
      CrossOpen{g, trial_stopped.cost_seconds < stopped.cost_seconds ? trial_stopped : stopped,
                single, Decisions(*this)};
  return std::nullopt;
}

void Context::settle_device_cross(int64_t max_bytes, bool only_routed) {
  if (!cross_open_) return;
  if (only_routed && std::none_of(cross_open_->group.begin(), cross_open_->group.end(),
                                  [&](size_t i) { return !tensors[i].single_hop; }))
    return;
  const CrossOpen c = std::move(*cross_open_);
  cross_open_.reset();
  const Decisions now(*this);
  c.then.restore(*this);
  auto set = [&](bool on) {
    for (size_t i : c.group) tensors[i].device_cross = on;
  };
  PlanStats st;
  scheduled_stats(st, max_bytes);
  const double least = st.cost_seconds;
  set(true);
  const std::optional<double> cost = estimate_unless_above(least, max_bytes);
  const bool on = cost && *cost < least;
  now.restore(*this);
  set(on);
}

bool Context::lead_reads_open_cross(Enumerator& en) {
  if (!cross_open_) return false;
  TensorCtx& t = tensors[cross_open_->group.front()];
  bool differs = false;
  for (bool on : {false, true}) {
    t.device_cross = on;
    differs = differs || en.fine_lead_differs(t);
  }
  t.device_cross = false;
  return differs;
}

bool Context::pass_on_open_cross(PlanStats& st, GuardStop* guard, int64_t max_bytes) {
  if (!cross_open_ || std::none_of(cross_open_->group.begin(), cross_open_->group.end(),
                                   [&](size_t i) { return !tensors[i].single_hop; }))
    return false;
  // The routed plan as it was left open, above the guard's single-hop
  // estimate whichever rule the group takes: the guard stops it.
  const CrossOpen& c = *cross_open_;
  const Decisions now(*this);
  const Decisions& then = c.then;
  if (guard && now.tensors == then.tensors && now.pre_reduce == then.pre_reduce &&
      now.relay_split == then.relay_split && now.scratch_reserve == then.scratch_reserve &&
      c.stopped.cost_seconds > guard->single_cost()) {
    st = c.stopped;
    guard->stopped = true;
    std::atomic_ref<int64_t>(guard_stops_taken()).fetch_add(1);  // plans run side by side
    return true;
  }
  settle_device_cross(max_bytes);
  return false;
}

}  // namespace reshard::planning
