#include "plan/transit.h"

#include <algorithm>
#include <map>
#include <vector>

#include "util/nic_groups.h"

namespace reshard::planning {

bool transit_may_apply(const Context& ctx, const TensorCtx& t) {
  if (!ctx.input.options.relays || t.S != 1 || t.T != 1) return false;
  const Geometry& dg = *t.dg;
  if (!dg.tiled && dg.fragmented) return false;
  for (int64_t c = 0; c < dg.num_cells(); ++c)
    if (dg.cell_offsets[static_cast<size_t>(c) + 1] - dg.cell_offsets[static_cast<size_t>(c)] > 1)
      return false;
  return true;
}

std::unique_ptr<TransitTable> build_transit(const Context& ctx, const TensorCtx& t,
                                            Enumerator& en) {
  const PlanOptions& o = ctx.input.options;
  if (!transit_may_apply(ctx, t)) return nullptr;
  const size_t ndev = ctx.devices.size();
  // Crossing bytes per dense device, and each device's lowest entry.
  std::vector<double> in(ndev, 0.0);
  std::vector<int64_t> entry(ndev, -1);
  std::vector<std::vector<uint32_t>> entries(ndev);
  bool any = false;
  for (uint32_t e = 0; e < t.dst->num_entries(); ++e) {
    const Box B = t.dst->box(e);
    if (B.empty()) continue;
    const uint32_t d = t.dt->dense[e];
    if (entry[d] < 0) entry[d] = e;
    entries[d].push_back(e);
    const int32_t host = t.dt->host[e];
    en.cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
      for (size_t i = 0; i < n; ++i)
        if (t.st->host[h[i]] == host) return;
      in[d] += static_cast<double>(region.volume() * t.esize);
      any = true;
    });
  }
  if (!any) return nullptr;
  // The plan's devices per host, in id order (reshard::nic_group's).
  std::map<int32_t, std::vector<uint32_t>> on_host;
  for (size_t d = 0; d < ndev; ++d)
    on_host[ctx.input.topology.info(ctx.devices[d]).host].push_back(static_cast<uint32_t>(d));
  auto table = std::make_unique<TransitTable>();
  const int32_t nics = o.nics_per_host;
  for (const auto& [host, devs] : on_host) {
    const auto m = static_cast<int64_t>(devs.size());
    const int64_t groups = std::min<int64_t>(nics == 0 ? m : nics, m);
    std::vector<double> load(static_cast<size_t>(groups), 0.0);
    std::vector<int32_t> gnics(static_cast<size_t>(groups), 0);
    std::vector<int32_t> takers(static_cast<size_t>(groups), 0);
    std::vector<size_t> group_of(devs.size());
    for (size_t i = 0; i < devs.size(); ++i) {
      const auto [g, n] = nic_group(static_cast<int64_t>(i), m, nics);
      group_of[i] = static_cast<size_t>(g);
      gnics[static_cast<size_t>(g)] = n;
      load[static_cast<size_t>(g)] += in[devs[i]];
      if (entry[devs[i]] >= 0) ++takers[static_cast<size_t>(g)];
    }
    double total = 0, usable = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const auto gi = static_cast<size_t>(g);
      if (load[gi] > 0 || takers[gi] > 0) {
        total += load[gi];
        usable += gnics[gi];
      }
    }
    if (total <= 0 || usable <= 0) continue;
    double worst = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const auto gi = static_cast<size_t>(g);
      if (load[gi] > 0) worst = std::max(worst, load[gi] / (total * gnics[gi] / usable));
    }
    if (worst <= kTransitGain) continue;
    // Each device's excess (donors) and room (takers), in device order.
    std::vector<std::pair<uint32_t, double>> give, take;
    for (size_t i = 0; i < devs.size(); ++i) {
      const size_t g = group_of[i];
      const double share = total * gnics[g] / usable;
      const uint32_t d = devs[i];
      if (load[g] > share && in[d] > 0)
        give.emplace_back(d, (load[g] - share) * in[d] / load[g]);
      else if (load[g] < share && entry[d] >= 0)
        take.emplace_back(d, (share - load[g]) / takers[g]);
    }
    size_t k = 0;
    for (auto& [d, excess] : give) {
      std::vector<TransitShare> shares;
      double at = 1.0 - excess / in[d];
      while (excess > 0 && k < take.size()) {
        const double a = std::min(excess, take[k].second);
        TransitShare s{static_cast<uint32_t>(entry[take[k].first]), at, at + a / in[d]};
        at = s.hi;
        shares.push_back(s);
        excess -= a;
        take[k].second -= a;
        if (take[k].second <= total * 1e-12) ++k;
        if (excess <= total * 1e-12) break;
      }
      if (shares.empty()) continue;
      shares.back().hi = 1.0;
      // Every entry of the donor device (one, in the usual layouts).
      for (const uint32_t e : entries[d]) {
        table->shares[e] = shares;
        for (const TransitShare& s : shares) table->donors[s.via].push_back(e);
      }
    }
  }
  if (table->shares.empty()) return nullptr;
  for (auto& [l, v] : table->donors) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  return table;
}

}  // namespace reshard::planning
