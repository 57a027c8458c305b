// Routes (plan/enumerate.h; docs/planner.md §4, §5.1): which route a
// region takes to its cell's entries (route), the cover figures it needs
// (cover_dims), leaders inside a host (lead_parts, leader) and the
// receiving hosts of a route.
#pragma once

#include "plan/enumerate/cells.h"

namespace reshard::planning {

inline bool Enumerator::route(const TensorCtx& t, size_t c, const Box& region,
                              const uint32_t* holders, size_t n, Route& r) {
  r.reduce = false;
  r.as_runs = false;
  r.runs.clear();
  r.cell = c;
  r.shift.clear();
  r.chain = -1;
  if (t.S > 1) {
    if (!reduces(t) || t.T > 1 || n == 0) return false;
    const CellHosts& ch = cell_hosts(t);  // reducer() and the gather read ch_
    r.cell_begin = ch.cell_offsets[c];
    r.cell_end = ch.cell_offsets[c + 1];
    return reduce_route(t, c, region, holders, n, r);
  }
  if (!relays(t) || t.S > 1 || t.T > 1 || n == 0) return false;
  const CellHosts& ch = cell_hosts(t);
  r.cell_begin = ch.cell_offsets[c];
  r.cell_end = ch.cell_offsets[c + 1];
  // One entry per host and too few hosts to cross: single-hop, cheaply.
  const size_t cell_hosts_n = r.cell_end - r.cell_begin;
  if (ch.max_members[c] < 2 &&
      !(cell_hosts_n >= 2 && (cell_hosts_n > static_cast<size_t>(t.st->num_hosts) ||
                              cross_gate(t, c, r.cell_begin, r.cell_end))))
    return false;
  r.holder_hosts.clear();
  for (size_t i = 0; i < n; ++i) r.holder_hosts.push_back(t.st->host[holders[i]]);
  std::sort(r.holder_hosts.begin(), r.holder_hosts.end());
  r.holder_hosts.erase(std::unique(r.holder_hosts.begin(), r.holder_hosts.end()),
                       r.holder_hosts.end());
  const auto hb = ch.hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_begin);
  const auto he = ch.hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_end);
  size_t held = 0;
  for (int32_t h : r.holder_hosts) held += std::binary_search(hb, he, h);
  r.receiving = (r.cell_end - r.cell_begin) - held;
  // Rotation: by the source cell's coordinates (neighbouring cells
  // alternate) plus the destination cell, or, for an explicit source, a
  // hash of the region's corner. A tiled source also places the region in
  // the cover of the cell's box (r.idx of r.n, for relay_cut below).
  uint64_t k = c;
  r.held = nullptr;
  if (t.sg->tiled) {
    r.held = &held_on_hosts(t, c);
    const CoverDims& cd = cover_dims(t, c);
    uint64_t idx = 0, nb = 1;
    for (int d = 0; d < region.rank; ++d) {
      const int64_t s = cd.chunk[d] > 0 ? region.lo[d] / cd.chunk[d] : 0;
      k += static_cast<uint64_t>(s);
      idx = idx * static_cast<uint64_t>(cd.span[d]) + static_cast<uint64_t>(s - cd.a[d]);
      nb *= static_cast<uint64_t>(cd.span[d]);
    }
    r.idx = idx;
    r.n = nb;
  } else {
    for (int d = 0; d < region.rank; ++d) k = k * 1000003u + static_cast<uint64_t>(region.lo[d]);
    k = ((k ^ (k >> 29)) * 0xbf58476d1ce4e5b9ull) >> 32;
  }
  r.rot = k;
  // Few holders' hosts feeding more hosts, or (no more receiving hosts than
  // the source spans) a group whose single-hop plan overloads a holder host
  // (cross_gate).
  const bool few = r.receiving > static_cast<size_t>(t.st->num_hosts);
  r.cross = r.receiving >= 2 && (few || cross_gate(t, c, r.cell_begin, r.cell_end));
  r.parts.clear();
  r.part_host.clear();
  r.part_entry.clear();
  r.part_lead.clear();
  const uint64_t cover_idx = r.idx, cover_n = t.sg->tiled ? r.n : 0;
  r.n = 0;
  if (r.cross) {
    const int laid = layout_parts(t, c, region, r);
    if (laid > 0) return true;
    // Cells a host of theirs holds part of: on more receiving hosts than
    // the source spans, or under the device rule (cross_gate).
    if (laid < 0 && (few || t.device_cross)) {
      cross_parts(t, c, region, holders, n, r);
      if (!cross_slower(t, c, region, n, r)) return true;
    }
    r.cross = false;
    r.parts.clear();
    r.part_host.clear();
    r.part_entry.clear();
    r.part_lead.clear();
  }
  r.idx = cover_idx;
  r.n = cover_n;
  if (relay_cut(t, ch.max_members[c], region, r.n))
    lead_parts(region, r.idx, r.n, ch.max_members[c], r);
  else
    r.parts.push_back(region);
  return true;
}

inline const Enumerator::CoverDims& Enumerator::cover_dims(const TensorCtx& t, size_t c) {
  CoverDims& cd = cover_dims_;
  if (cd.t == &t && cd.c == c) return cd;
  cd.t = &t;
  cd.c = c;
  const Box B = cell_box(t, c);
  const std::vector<int64_t>& shape = t.src->shape();
  for (int d = 0; d < B.rank; ++d) {
    const int64_t count = t.sg->counts[d];
    cd.chunk[d] = ceil_div(shape[static_cast<size_t>(d)], count);
    int64_t a = 0, b = 0;
    shard_range(shape[static_cast<size_t>(d)], count, B.lo[d], B.hi[d], a, b);
    cd.a[d] = a;
    cd.span[d] = b - a;
  }
  return cd;
}

inline const std::vector<std::pair<int32_t, uint64_t>>& Enumerator::held_on_hosts(
    const TensorCtx& t, size_t c) {
  HeldLast& last = held_last_;
  if (last.held != nullptr && last.sg == t.sg && last.dg == t.dg && last.st == t.st &&
      last.c == c && last.shape == t.src->shape())
    return *last.held;
  auto [it, fresh] = held_.try_emplace(std::make_tuple(geo_key(t), t.st, c));
  std::vector<std::pair<int32_t, uint64_t>>& held = it->second;
  if (fresh) {
    const CellHosts& ch = cell_hosts(t);
    const auto hb = ch.hosts.begin() + static_cast<std::ptrdiff_t>(ch.cell_offsets[c]);
    const auto he = ch.hosts.begin() + static_cast<std::ptrdiff_t>(ch.cell_offsets[c + 1]);
    const Box B = cell_box(t, c);
    if (!share_en_) share_en_ = std::make_unique<Enumerator>(options_);
    Route pos;
    if (!B.empty()) {
      share_en_->cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
        cover_position(t, B, region, pos);
        for (size_t i = 0; i < n; ++i) {
          const int32_t host = t.st->host[h[i]];
          if (std::binary_search(hb, he, host)) held.emplace_back(host, pos.idx);
        }
      });
    }
    std::sort(held.begin(), held.end());
    held.erase(std::unique(held.begin(), held.end()), held.end());
  }
  last = {t.sg, t.dg, t.st, c, t.src->shape(), &held};
  return held;
}

inline void Enumerator::lead_parts(const Box& region, uint64_t k, uint64_t n, int64_t slots,
                                   Route& r) {
  // Along the longest dimension; slot m begins at m / slots of the unit
  // interval, region k spans [k / n, (k + 1) / n): its cuts fall at
  // (m n - k slots) / slots of its extent for the slots m beginning inside.
  int dim = 0;
  for (int d = 1; d < region.rank; ++d)
    if (region.extent(d) > region.extent(dim)) dim = d;
  const int64_t ext = region.extent(dim);
  const auto S = static_cast<uint64_t>(slots);
  uint64_t m = k * S / n;  // the slot holding the region's start
  int64_t lo = region.lo[dim];
  while (true) {
    // The end of slot m within the region (or the region's end).
    const uint64_t num = (m + 1) * n;  // slot end at num / S, the region at [k, k + 1) x 1/n
    int64_t hi = region.hi[dim];
    if (num < (k + 1) * S)  // (num - k S) < S: the product fits 128 bits
      hi = region.lo[dim] + static_cast<int64_t>(static_cast<unsigned __int128>(num - k * S) *
                                                 static_cast<uint64_t>(ext) / S);
    if (hi > lo) {
      Box part = region;
      part.lo[dim] = lo;
      part.hi[dim] = hi;
      r.parts.push_back(part);
      r.part_lead.push_back(static_cast<uint32_t>(m));
      lo = hi;
    }
    if (hi >= region.hi[dim]) break;
    ++m;
  }
  r.lead_slots = static_cast<uint32_t>(slots);
}

inline bool Enumerator::fine_lead_differs(const TensorCtx& t) {
  if (!relays(t) || t.S > 1 || t.T > 1 || !t.sg->tiled) return false;
  const CellHosts& ch = cell_hosts(t);
  TensorCtx coarse = t;
  coarse.fine_lead = false;
  if (!share_en_) share_en_ = std::make_unique<Enumerator>(options_);
  Route pos;
  // A region fine_lead would cut, with its holders: routed after the cover
  // (route may cover inside share_en_ itself, cross_parts).
  std::vector<Box> cut;
  std::vector<size_t> cut_at;  // each one's holders in `held`
  std::vector<uint32_t> held;
  for (size_t c = 0; c + 1 < ch.cell_offsets.size(); ++c) {
    const int64_t members = ch.max_members[c];
    if (members < 2 || t.dg->cell_offsets[c] == t.dg->cell_offsets[c + 1]) continue;
    const Box B = cell_box(t, c);
    if (B.empty()) continue;
    cut.clear();
    cut_at.clear();
    held.clear();
    share_en_->cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
      cover_position(t, B, region, pos);
      if (!fine_lead_cut(t, members, region, pos.n) || relay_cut(coarse, members, region, pos.n))
        return;
      cut.push_back(region);
      cut_at.push_back(held.size());
      held.insert(held.end(), h, h + n);
    });
    cut_at.push_back(held.size());
    // relay_cut is read only by a route that does not cross hosts (route):
    // a region routed across hosts, or not routed, is the same either way.
    for (size_t i = 0; i < cut.size(); ++i) {
      Route r;
      if (route(coarse, c, cut[i], held.data() + cut_at[i], cut_at[i + 1] - cut_at[i], r) &&
          !r.cross)
        return true;
    }
  }
  return false;
}

inline void Enumerator::holders_on(const TensorCtx& t, const uint32_t* holders, size_t n,
                                   int32_t host) {
  hsel_.clear();
  for (size_t i = 0; i < n; ++i)
    if (host < 0 || t.st->host[holders[i]] == host) hsel_.push_back(holders[i]);
}

inline bool Enumerator::receiving_index(const Route& r, int32_t host, size_t* index) const {
  if (std::binary_search(r.holder_hosts.begin(), r.holder_hosts.end(), host)) return false;
  const auto hb = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_begin);
  const auto he = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_end);
  const auto it = std::lower_bound(hb, he, host);
  if (it == he || *it != host) return false;
  size_t i = static_cast<size_t>(it - hb);
  for (int32_t h : r.holder_hosts)
    if (h < host && std::binary_search(hb, he, h)) --i;
  *index = i;
  return true;
}

inline size_t Enumerator::receiving_host(const Route& r, size_t index) const {
  // The index-th host of the cell that holds nothing.
  size_t seen = 0;
  for (size_t hi = r.cell_begin; hi < r.cell_end; ++hi) {
    if (std::binary_search(r.holder_hosts.begin(), r.holder_hosts.end(), ch_->hosts[hi])) continue;
    if (seen++ == index) return hi;
  }
  return r.cell_end;
}

inline void Enumerator::receiving_table(const Route& r, std::vector<int64_t>& index_of,
                                        std::vector<size_t>& host_of) const {
  index_of.assign(r.cell_end - r.cell_begin, -1);
  host_of.clear();
  auto held = r.holder_hosts.begin();
  for (size_t hi = r.cell_begin; hi < r.cell_end; ++hi) {
    const int32_t host = ch_->hosts[hi];
    held = std::lower_bound(held, r.holder_hosts.end(), host);
    if (held != r.holder_hosts.end() && *held == host) continue;
    index_of[hi - r.cell_begin] = static_cast<int64_t>(host_of.size());
    host_of.push_back(hi);
  }
}

inline uint32_t Enumerator::leader(const Route& r, size_t hi, size_t j) const {
  const uint32_t b = ch_->member_offsets[hi], end = ch_->member_offsets[hi + 1];
  if (r.n > 0) {
    if (!r.part_lead.empty())  // lead_parts: part j's slot of lead_slots
      return ch_
          ->members[b + static_cast<uint32_t>(uint64_t{r.part_lead[j]} * (end - b) / r.lead_slots)];
    return ch_->members[b + static_cast<uint32_t>(
                                lead_block(r.held, ch_->hosts[hi], r.idx, r.n, end - b))];
  }
  const size_t k = r.part_lead.empty() ? j : r.part_lead[j];
  return ch_->members[b + (k + r.rot) % (end - b)];
}

inline uint32_t Enumerator::run_leader(const Route& r, size_t hi, uint32_t lead) const {
  const uint32_t b = ch_->member_offsets[hi], end = ch_->member_offsets[hi + 1];
  if (end - b == 1) return ch_->members[b];  // one entry on the host (no division)
  return ch_->members[b + (size_t{lead} + r.rot) % (end - b)];
}

}  // namespace reshard::planning
