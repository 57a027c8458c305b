#include "plan/transit.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <vector>

#include "plan/enumerate/cells.h"
#include "util/nic_groups.h"

namespace reshard::planning {

bool transit_may_apply(const Context& ctx, const TensorCtx& t) {
  if (!ctx.input.options.relays || t.S != 1 || t.T != 1) return false;
  // A transit's copy-staging scratch holds the source's dtype, bit for bit:
  // no cast, no block scales, not a block scale tensor (wire.md, Staging).
  if (has_cast(*t.spec) || has_block_scales(*t.spec)) return false;
  for (const TensorSpec& u : ctx.input.tensors)
    if (u.scale_tensor == static_cast<int64_t>(t.index)) return false;
  const Geometry& dg = *t.dg;
  if (!dg.tiled && dg.fragmented) return false;
  // A tiled cell's entries may be several: an entry that forwards what it
  // takes in (routed_recv) takes it whole, the others through transits.
  if (dg.tiled) return true;
  for (int64_t c = 0; c < dg.num_cells(); ++c)
    if (dg.cell_offsets[static_cast<size_t>(c) + 1] - dg.cell_offsets[static_cast<size_t>(c)] > 1)
      return false;
  return true;
}

namespace {
std::atomic<bool> host_tiles_on{true};
}  // namespace
bool transit_host_tiles_on() { return host_tiles_on.load(std::memory_order_relaxed); }
void set_transit_host_tiles(bool on) { host_tiles_on.store(on, std::memory_order_relaxed); }

namespace {

// A tiled source's cells per host (those with an entry there): the
// elements of a box no device of a host holds are the box less its
// overlaps with the host's cells, which for a host of few cells is cheaper
// than the cover of the box (FSDP over 16,384 devices: 16,384 cells, 8 a
// host), and the same integer.
class HostTiles {
 public:
  explicit HostTiles(const TensorCtx& t) : t_(t) {
    const Geometry& sg = *t.sg;
    if (!sg.tiled || !transit_host_tiles_on()) return;
    on_ = true;
    std::map<int32_t, std::vector<std::pair<int64_t, uint32_t>>> cells;  // (cell, an entry)
    for (uint32_t r = 0; r < t.src->num_entries(); ++r)
      if (sg.cell_of_entry[r] >= 0) cells[t.st->host[r]].emplace_back(sg.cell_of_entry[r], r);
    for (auto& [h, v] : cells) {
      std::sort(v.begin(), v.end());
      std::vector<Box>& boxes = boxes_[h];
      for (size_t i = 0; i < v.size(); ++i)
        if (i == 0 || v[i].first != v[i - 1].first) boxes.push_back(t.src->box(v[i].second));
    }
  }
  // The elements of B that no source entry on `host` holds, or none where
  // the cover is the cheaper walk (or the source is not tiled).
  std::optional<int64_t> crossing(const Box& B, int32_t host) const {
    const Geometry& sg = *t_.sg;
    if (!on_) return std::nullopt;
    const std::vector<int64_t>& shape = t_.src->shape();
    int64_t tiles = 1;
    for (int d = 0; d < sg.rank; ++d) {
      int64_t a = 0, b = 0;
      shard_range(shape[static_cast<size_t>(d)], sg.counts[d], B.lo[d], B.hi[d], a, b);
      tiles *= std::max<int64_t>(b - a, 0);
    }
    const auto it = boxes_.find(host);
    const size_t mine = it == boxes_.end() ? 0 : it->second.size();
    if (static_cast<int64_t>(mine) >= tiles) return std::nullopt;
    int64_t v = B.volume();
    for (size_t i = 0; i < mine; ++i) v -= intersect(B, it->second[i]).volume();
    return v;
  }

 private:
  const TensorCtx& t_;
  bool on_ = false;
  std::map<int32_t, std::vector<Box>> boxes_;  // per host, a box of each cell with an entry there
};

// One side's water-fill (receiving: `in` the bytes each dense device takes
// in across hosts; sending: sends out), per host over its NIC groups; each
// donor device's shares of its pieces, from the top of a piece (receiving)
// or its bottom (sending), paired with `entry` of the taker devices, or
// where a device has none, with its entry of the other layout (`other`,
// TransitShare::cross: a device of the host that neither takes in nor
// sends out on this side, whose NICs idle). Calls give(device, shares)
// per donor device.
template <class Give>
void fill(const Context& ctx, const std::vector<double>& in, const std::vector<int64_t>& entry,
          const std::vector<int64_t>& other, bool top, Give&& give) {
  const size_t ndev = ctx.devices.size();
  // The plan's devices per host, in id order (reshard::nic_group's).
  std::map<int32_t, std::vector<uint32_t>> on_host;
  for (size_t d = 0; d < ndev; ++d)
    on_host[ctx.input.topology.info(ctx.devices[d]).host].push_back(static_cast<uint32_t>(d));
  const int32_t nics = ctx.input.options.nics_per_host;
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
      if (entry[devs[i]] >= 0 || other[devs[i]] >= 0) ++takers[static_cast<size_t>(g)];
    }
    double total = 0, usable = 0;
    for (size_t g = 0; g < load.size(); ++g) {
      if (load[g] > 0 || takers[g] > 0) {
        total += load[g];
        usable += gnics[g];
      }
    }
    if (total <= 0 || usable <= 0) continue;
    double worst = 0;
    for (size_t g = 0; g < load.size(); ++g)
      if (load[g] > 0) worst = std::max(worst, load[g] / (total * gnics[g] / usable));
    if (worst <= kTransitGain) continue;
    // Each device's excess (donors) and room (takers), in device order.
    std::vector<std::pair<uint32_t, double>> give_list, take;
    std::vector<std::pair<int64_t, bool>> via;  // per taker: its entry, of the other layout
    for (size_t i = 0; i < devs.size(); ++i) {
      const size_t g = group_of[i];
      const double share = total * gnics[g] / usable;
      const uint32_t d = devs[i];
      if (load[g] > share && in[d] > 0)
        give_list.emplace_back(d, (load[g] - share) * in[d] / load[g]);
      else if (load[g] < share && (entry[d] >= 0 || other[d] >= 0)) {
        take.emplace_back(d, (share - load[g]) / takers[g]);
        via.emplace_back(entry[d] >= 0 ? entry[d] : other[d], entry[d] < 0);
      }
    }
    // Each donor's excess goes to every taker in proportion to its room:
    // a transit then carries a like share of every donor's pieces, so the
    // links' messages are alike in size and end together under max-min
    // sharing (pairing donors and takers in turn left a transit a few
    // large shares and the links it shares ending apart).
    // Donors give at most the takers' room (a group below its share with
    // no destination entry takes nothing).
    double room = 0, excess_sum = 0;
    for (const auto& tk : take) room += tk.second;
    for (const auto& gl : give_list) excess_sum += gl.second;
    if (room <= 0) continue;
    const double scale = std::min(1.0, room / excess_sum);
    for (auto& [d, excess] : give_list) {
      std::vector<TransitShare> shares;
      const double given = excess * scale;
      double at = top ? 1.0 - given / in[d] : 0.0;
      for (size_t i = 0; i < take.size(); ++i) {
        const double r = take[i].second;
        TransitShare s{static_cast<uint32_t>(via[i].first), at, at + given * r / room / in[d],
                       via[i].second};
        at = s.hi;
        shares.push_back(s);
      }
      if (shares.empty()) continue;
      if (top) shares.back().hi = 1.0;
      give(d, shares);
    }
  }
}

}  // namespace

std::unique_ptr<TransitTable> build_transit(const Context& ctx, const TensorCtx& t,
                                            Enumerator& en) {
  if (!transit_may_apply(ctx, t)) return nullptr;
  const size_t ndev = ctx.devices.size();
  auto table = std::make_unique<TransitTable>();
  // The receiving side: crossing bytes per dense device (its cover's
  // regions no device of its host holds), and each device's lowest entry.
  std::vector<double> in(ndev, 0.0), out(ndev, 0.0);
  std::vector<int64_t> entry(ndev, -1), source(ndev, -1);
  std::vector<std::vector<uint32_t>> entries(ndev), sources(ndev);
  // Entries of one tiled cell on one host take in the same elements: each
  // (cell, host) is counted once (an all-gather over 65,536 devices of one
  // host: one cover, not 65,536).
  const HostTiles held(t);
  std::map<std::pair<int64_t, int32_t>, int64_t> counted;
  // Entries of each tiled (cell, host): relays inside the host (§5.1) have
  // each lead about an equal share of what the host takes in.
  const Geometry& dg = *t.dg;
  std::map<std::pair<int64_t, int32_t>, std::vector<uint32_t>> mates;
  if (dg.tiled)
    for (uint32_t e = 0; e < t.dst->num_entries(); ++e)
      if (dg.cell_of_entry[e] >= 0) mates[{dg.cell_of_entry[e], t.dt->host[e]}].push_back(e);
  for (uint32_t e = 0; e < t.dst->num_entries(); ++e) {
    const Box B = t.dst->box(e);
    if (B.empty()) continue;
    const uint32_t d = t.dt->dense[e];
    if (entry[d] < 0) entry[d] = e;
    entries[d].push_back(e);
    const int32_t host = t.dt->host[e];
    const int64_t cell = t.dg->tiled ? t.dg->cell_of_entry[e] : -1;
    const auto memo = cell >= 0 ? counted.find({cell, host}) : counted.end();
    int64_t v = 0;
    if (memo != counted.end()) {
      v = memo->second;
    } else if (const std::optional<int64_t> h = held.crossing(B, host)) {
      v = *h;
    } else {
      en.cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
        for (size_t i = 0; i < n; ++i)
          if (t.st->host[h[i]] == host) return;
        v += region.volume();
      });
    }
    if (cell >= 0) counted.emplace(std::pair{cell, host}, v);
    const size_t leads = cell >= 0 ? mates.at({cell, host}).size() : 1;
    in[d] += static_cast<double>(v * t.esize) / static_cast<double>(leads);
  }
  // Cells of several entries: an entry with another of its cell on its host
  // takes no share of `shares` (the two would write one scratch region
  // twice) but leads through them (`lead_shares`: each takes in its own
  // lead parts, §5.1, and the transit forwards to every mate); the sending
  // side is off (a holder's piece for each entry of a cell would enter its
  // transit's scratch once per entry).
  bool several = false;
  std::vector<char> alone(t.dst->num_entries(), 1);
  std::vector<std::pair<int32_t, uint32_t>> on;  // a cell's (host, entry)
  for (int64_t c = 0; c < dg.num_cells(); ++c) {
    const uint32_t b = dg.cell_offsets[static_cast<size_t>(c)];
    const uint32_t end = dg.cell_offsets[static_cast<size_t>(c) + 1];
    several |= end - b > 1;
    if (end - b < 2) continue;
    on.clear();
    for (uint32_t i = b; i < end; ++i)
      on.emplace_back(t.dt->host[dg.cell_entries[i]], dg.cell_entries[i]);
    std::sort(on.begin(), on.end());
    for (size_t i = 0; i + 1 < on.size(); ++i)
      if (on[i].first == on[i + 1].first) alone[on[i].second] = alone[on[i + 1].second] = 0;
  }
  // Each device's lowest source entry: a transit of the receiving side
  // where its device has no destination entry (TransitShare::cross).
  for (uint32_t r = 0; r < t.src->num_entries(); ++r) {
    if (t.src->box(r).empty()) continue;
    const uint32_t d = t.st->dense[r];
    if (source[d] < 0) source[d] = r;
    sources[d].push_back(r);
  }
  fill(ctx, in, entry, source, true, [&](uint32_t d, const std::vector<TransitShare>& shares) {
    for (const uint32_t e : entries[d]) {
      if (alone[e]) {
        table->shares[e] = shares;
        for (const TransitShare& s : shares)
          (s.cross ? table->cross_donors : table->donors)[s.via].push_back(e);
        continue;
      }
      // A leader: its transits forward to it and to its mates on the host;
      // none where a transit's device holds a mate (it takes the cell in
      // anyway: the host's NIC groups are uneven, not idle).
      const std::vector<uint32_t>& mine = mates.at({dg.cell_of_entry[e], t.dt->host[e]});
      const bool on_mate = std::any_of(shares.begin(), shares.end(), [&](const TransitShare& s) {
        const int64_t via = s.cross ? t.sg->devices[s.via] : dg.devices[s.via];
        return std::any_of(mine.begin(), mine.end(),
                           [&](uint32_t m) { return dg.devices[m] == via; });
      });
      if (on_mate) continue;
      table->lead_shares[e] = shares;
      for (const TransitShare& s : shares)
        for (const uint32_t m : mine)
          (s.cross ? table->cross_donors : table->donors)[s.via].push_back(m);
    }
  });
  // The sending side: crossing bytes per dense device as single-hop sends
  // them (each entry's pieces, the table not yet set), and the destination
  // entries each device sends them to (whose pieces a transit of a
  // destination device carries, TransitShare::cross).
  bool crossing = false;
  std::vector<std::vector<uint32_t>> dests(ndev);
  for (uint32_t e = 0; e < t.dst->num_entries() && !several; ++e) {
    if (t.dst->box(e).empty()) continue;
    en.recv(t, e, [&](const Emitted& x) {
      if (x.local || x.relay() || t.st->host[x.src_entry] == t.dt->host[e]) return;
      const uint32_t d = t.st->dense[x.src_entry];
      out[d] += static_cast<double>(x.region.volume() * t.esize);
      if (dests[d].empty() || dests[d].back() != e) dests[d].push_back(e);
      crossing = true;
    });
  }
  if (crossing && !several)
    fill(ctx, out, source, entry, false, [&](uint32_t d, const std::vector<TransitShare>& shares) {
      for (const uint32_t r : sources[d]) table->send_shares[r] = shares;
      for (const TransitShare& s : shares) {
        if (s.cross)
          for (const uint32_t e : dests[d]) table->donors[s.via].push_back(e);
        else
          for (const uint32_t r : sources[d]) table->send_donors[s.via].push_back(r);
      }
    });
  if (table->shares.empty() && table->send_shares.empty() && table->lead_shares.empty())
    return nullptr;
  for (auto* m : {&table->donors, &table->send_donors, &table->cross_donors})
    for (auto& [l, v] : *m) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
  return table;
}

}  // namespace reshard::planning
