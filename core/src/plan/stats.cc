// Global statistics of a plan: what the plan moves (per-cell arithmetic or
// enumeration, never the parts themselves), its round schedule, and its
// lower bounds (core/src/plan/bounds.cc). compute_stats runs a pass
// (stats_pass.h) over groups of like tensors, each by one of three ways:
// per-cell arithmetic (tiled_cells.h), routed cells (routed_cells.h), or
// every piece enumerated; the pass's end (stats_finish.cc) reads the
// figures and may start the pass again.
#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <tuple>

#include "plan/group_memo.h"
#include "plan/routed_cells.h"
#include "plan/stats_pass.h"
#include "plan/stream_bound.h"
#include "plan/tiled_cells.h"
#include "reshard/error.h"

namespace reshard::planning {

void stat_overflow(const char* figure) {
  fail(ErrorCode::kOverflow, std::string("stats.") + figure,
       "exceeds 2^63 - 1: the plan moves more than 64-bit statistics can count (plan the "
       "tensors in several plans, or cut them smaller)");
}

namespace {

// 1234567 -> "1,234,567".
std::string commas(int64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0 && d[i - 1] != '-') out += ',';
    out += d[i];
  }
  return out;
}

// One pass: kDone, or how to start again (the pass's state is gone by then).
PassEnd stats_pass(Context& ctx, PlanStats& st, const PlanOptions& o, bool schedule,
                   std::vector<DeviceCounts>* counts, int64_t max_bytes, bool reference,
                   std::vector<DeviceLoad>* stage_loads, RoundRule* rounds_out, GuardStop* guard) {
  // Tensors with the same shape and layout geometries have proportional
  // statistics: enumerate one of them and scale by the group's bytes/element.
  // With relays, element sizes too: relay bands follow a cell's bytes; and
  // in a keyed pass (Context::keyed_keys), which enumerates every piece,
  // like tensors share their keys only with their element size (key_blocks).
  const bool keyed = ctx.keyed_keys > 0;
  std::map<std::tuple<std::vector<int64_t>, const Geometry*, const Geometry*, int64_t>,
           std::vector<size_t>>
      groups;
  for (size_t i = 0; i < ctx.tensors.size(); ++i) {
    const TensorCtx& t = ctx.tensors[i];
    // Transit relays (TensorCtx::transit) key apart, where taken.
    groups[{t.spec->shape, t.sg, t.dg,
            (o.relays || keyed ? t.esize * 2 + t.single_hop : 0) +
                (t.transit != nullptr ? int64_t{1} << 40 : 0)}]
        .push_back(i);
  }
  StatsPass p(ctx, st, o, schedule, counts, max_bytes, guard);
  // Destination geometries where relays across hosts may apply: a cell
  // spanning at least 2 hosts and more than the source spans (the per-cell
  // arithmetic below handles relays inside hosts, not across them).
  std::map<std::tuple<const Geometry*, const GeoTopo*, const GeoTopo*>, bool> relay_geo;
  auto may_relay = [&](const TensorCtx& t) {
    if (!o.relays || t.single_hop || t.S > 1 || t.T > 1 || !t.dg->tiled) return false;
    auto [it, fresh] = relay_geo.emplace(std::make_tuple(t.dg, t.dt, t.st), false);
    if (!fresh) return it->second;
    const Geometry& dg = *t.dg;
    std::vector<int32_t> hosts;
    for (int64_t c = 0; c < dg.num_cells() && !it->second; ++c) {
      hosts.clear();
      for (uint32_t i = dg.cell_offsets[static_cast<size_t>(c)];
           i < dg.cell_offsets[static_cast<size_t>(c) + 1]; ++i)
        hosts.push_back(t.dt->host[dg.cell_entries[i]]);
      std::sort(hosts.begin(), hosts.end());
      const auto distinct =
          static_cast<size_t>(std::unique(hosts.begin(), hosts.end()) - hosts.begin());
      if (distinct >= 2 && distinct > static_cast<size_t>(t.st->num_hosts)) it->second = true;
    }
    return it->second;
  };
  // ... or a cell on no more hosts than the source spans whose group
  // crosses anyway (Enumerator::cross_gate: single-hop would overload a
  // holder host); it depends on the shape too.
  auto may_cross = [&](const TensorCtx& t) {
    if (may_relay(t)) return true;
    return o.relays && !t.single_hop && t.S == 1 && t.T == 1 && t.dg->tiled && p.en.crosses_few(t);
  };
  // Whether the statistics account group representative t by per-cell
  // arithmetic (the loop over groups below), else by enumerating its pieces.
  auto per_cell = [&](const TensorCtx& t) {
    return !reference && !p.keyed && !p.spread_runs && p.dense_pairs && t.sg->unique_cells &&
           t.dg->tiled && t.S == 1 && t.T == 1 && t.transit == nullptr && !may_cross(t);
  };
  // The work of this pass counted up front (stats_visits, per dimension),
  // refused above Context::max_stats_pieces before any piece is visited.
  if (ctx.max_stats_pieces >= 0 && !ctx.stats_checked) {
    ctx.stats_checked = true;
    int64_t visits = 0;
    for (const auto& [key, members] : groups) {
      const TensorCtx& t = ctx.tensors[members.front()];
      // Per-cell arithmetic still visits every (region, entry) stream
      // where the round schedule needs its bytes (add_pair).
      const int64_t v = stats_visits(t, !per_cell(t) || p.track_pairs, o.relays && !t.single_hop,
                                     o.split_min_bytes);
      visits = visits > (int64_t{1} << 62) - v ? int64_t{1} << 62 : visits + v;
    }
    if (visits > ctx.max_stats_pieces)
      fail(ErrorCode::kResourceExhausted, "request.max_stats_pieces",
           "the global statistics would visit about " + commas(visits) +
               " pieces (counted from the layouts before planning: one tensor of each of " +
               std::to_string(groups.size()) + " groups of like tensors over " +
               std::to_string(p.ndev) + " devices), above the limit of " +
               commas(ctx.max_stats_pieces) +
               " (2^31 by default: minutes of one core); plan fewer devices per plan, "
               "or raise the limit (-1: no limit)");
  }
  RoutedCells routed(p);
  // Groups the single-hop guard's tries share (Context::group_memo).
  const bool memo = ctx.group_memo != nullptr && GroupMemo::fits(p, schedule, reference);
  for (auto& [key, members] : groups) {
    if (p.stopped) break;
    int64_t esum = 0;
    for (size_t i : members) esum += ctx.tensors[i].esize;
    p.group_index = p.groups_seen.size();
    if (keyed) {
      const TensorCtx& r = ctx.tensors[members.front()];
      // Each tensor's blocks and offset as every process numbers them
      // (tensor_key_blocks); the group is counted at offset 0 and rotated
      // by its members' offsets (count_keys).
      if (p.tensor_blocks.empty())
        p.tensor_blocks =
            tensor_key_blocks(ctx.input.tensors, ctx.keyed_granule, ctx.keyed_keys, ctx.keyed_fine);
      p.group_blocks = p.tensor_blocks[members.front()];
      p.group_blocks.offset = 0;
      p.group_key_esum.fill(0);
      for (size_t i : members)
        p.group_key_esum[static_cast<size_t>(p.tensor_blocks[i].offset % ctx.keyed_keys)] +=
            ctx.tensors[i].esize;
      for (size_t i = 0; i < StatsPass::kSubTrials; ++i)
        p.sub_trials[i].blocks = sub_blocks(r.spec->shape, StatsPass::sub_trial(i).second);
    }
    p.groups_seen.push_back(members);
    const TensorCtx& t = ctx.tensors[members.front()];
    // Every member has the representative's pieces.
    const int64_t copies = static_cast<int64_t>(members.size());
    int64_t group_pieces = 0;
    if (per_cell(t)) {
      if (!memo || !ctx.group_memo->add(p, t, members, esum, copies, group_pieces)) {
        TiledCells(p, routed).group(t, esum, copies, group_pieces);
        std::atomic_ref<int64_t>(tiled_groups_computed()).fetch_add(1);  // plans run side by side
      }
      p.pieces += group_pieces * static_cast<int64_t>(members.size());
      continue;
    }
    // Transit relays are enumerated (neither way above knows them).
    if (!reference && !keyed && !p.spread_runs && t.dg->tiled && t.S == 1 && t.T == 1 &&
        t.transit == nullptr) {
      routed.cells(t, esum, copies, group_pieces);
    } else {
      for (uint32_t e = 0; e < t.dst->num_entries(); ++e) {
        if (t.dst->box(e).empty()) continue;
        if (p.guard_stops_here(p.pieces + group_pieces)) break;
        p.enum_entry(t, e, esum, copies, group_pieces);
      }
    }
    p.pieces += group_pieces * static_cast<int64_t>(members.size());
    if (p.guard_stops_here(p.pieces)) break;
  }
  routed.drain();
  return p.finish(schedule, stage_loads, rounds_out);
}

}  // namespace

void compute_stats(Context& ctx, PlanStats& st, const PlanOptions& o, bool schedule,
                   std::vector<DeviceCounts>* counts, int64_t max_bytes, bool reference,
                   std::vector<DeviceLoad>* stage_loads, RoundRule* rounds_out, GuardStop* guard) {
  std::atomic_ref<int64_t>(stats_passes()).fetch_add(1);  // plans run side by side
  const PlanStats entry = st;                             // to start again from
  if (counts) counts->assign(ctx.devices.size(), DeviceCounts{});
  // A pass that reads decide_device_cross's open decision.
  if (ctx.device_cross_open() && ctx.pass_on_open_cross(st, guard, max_bytes)) return;
  switch (stats_pass(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads, rounds_out,
                     guard)) {
    case PassEnd::kDone:
      return;
    case PassEnd::kWithoutSplit:
      ctx.relay_split = false;
      st = entry;
      compute_stats(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads, rounds_out);
      return;
    case PassEnd::kKeyed: {
      // finish set the keys for this pass alone.
      struct Keyed {
        Context& c;
        ~Keyed() {
          c.keyed_keys = c.keyed_granule = 0;
          c.keyed_fine = c.keyed_taken = false;
        }
      } pass{ctx};
      // Fine blocks where they differ from the granule's (rounds.h,
      // kKeyBlocksPerShard), priced beside them. Where both take keyed
      // cuts, the granule's blocks only where more than kFineBlocksGain
      // cheaper by the estimate, which prices the rounds of unequal bytes
      // that granule blocks make as if they ran side by side (an MoE layer
      // EP8 → 3 × tp8 at [16, 512, 1024] bf16 × 3, H100: estimated 171.8 µs
      // with granule blocks, 171.9 fine; simulated 199.3 and 172.8); else
      // the cheaper, a tie to fine blocks.
      constexpr double kFineBlocksGain = 0.01;
      const std::vector<TensorSpec>& ts = ctx.input.tensors;
      const auto fine = tensor_key_blocks(ts, ctx.keyed_granule, ctx.keyed_keys, true);
      const auto coarse = tensor_key_blocks(ts, ctx.keyed_granule, ctx.keyed_keys, false);
      bool differ = false;
      for (size_t i = 0; i < fine.size(); ++i) differ = differ || fine[i].block != coarse[i].block;
      PlanStats fine_st = entry;
      std::vector<DeviceCounts> fine_counts;
      std::vector<DeviceLoad> fine_loads;
      RoundRule fine_rule;
      bool fine_taken = false;
      if (differ) {
        ctx.keyed_fine = true;
        ctx.keyed_taken = false;
        compute_stats(ctx, fine_st, o, schedule, counts ? &fine_counts : nullptr, max_bytes,
                      reference, stage_loads ? &fine_loads : nullptr,
                      rounds_out ? &fine_rule : nullptr);
        fine_taken = ctx.keyed_taken;
        ctx.keyed_fine = ctx.keyed_taken = false;
      }
      st = entry;
      compute_stats(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads, rounds_out);
      const double gain = fine_taken && ctx.keyed_taken ? kFineBlocksGain : 0.0;
      if (differ && st.cost_seconds >= fine_st.cost_seconds * (1 - gain)) {
        st = fine_st;
        if (counts) *counts = std::move(fine_counts);
        if (stage_loads) *stage_loads = std::move(fine_loads);
        if (rounds_out) *rounds_out = std::move(fine_rule);
      }
      return;
    }
    case PassEnd::kTracked:
      st = entry;
      compute_stats(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads, rounds_out);
      return;
  }
}

}  // namespace reshard::planning
