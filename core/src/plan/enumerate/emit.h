// Emission (plan/enumerate.h): the pieces a destination entry receives
// (recv, routed_recv, recv_naive), forwards as a relay (forward) and a
// source entry sends (send), each along the routes of the other rooms.
#pragma once

#include "plan/enumerate/cells.h"

namespace reshard::planning {

template <class F>
void Enumerator::routed_recv(const TensorCtx& t, uint32_t e, const Route& r, const Box& region,
                             const uint32_t* holders, size_t n, bool own, uint32_t shift, F&& f) {
  if (r.reduce) {
    const size_t hi = options_.relays ? host_slot(t, e, r.cell) : 0;
    for (size_t j = 0; j < r.parts.size(); ++j) {
      const uint32_t red = reducer(t, r, j);
      const bool cut = own || r.parts.size() > 1;
      // Every summand of the part (stage 0), or its holder hosts' scratch
      // (stage 1): the gather runs a stage later after a pre-reduction.
      if (red == e) {
        reduce_part(t, r, j, holders, n, cut);
        for (const Emitted& x : pre_) f(x);
        continue;
      }
      Emitted x{red, e, r.parts[j], true, false, false};
      x.stage = 1 + shift;  // the reduced part, from its reducer
      // From another host: it enters e's host once, at the part's leader
      // there (from its parent in the gather tree: the reducer, or the
      // parent host's leader), which fans it out a stage later.
      if (options_.relays && t.dt->host[red] != t.dt->host[e]) {
        const uint32_t l = gather_leader(r, hi, j);
        const size_t pos = gather_pos(r, hi, j);
        const uint32_t depth = gather_depth(r, pos);
        if (l != e) {
          x.src_entry = l;
          x.stage = 1 + shift + depth;
        } else {
          const size_t up = gather_parent(r, pos);
          if (up > 0) x.src_entry = gather_leader(r, gather_host(r, up, j), j);
          x.stage = shift + depth;
        }
      }
      f(x);
    }
    return;
  }
  size_t idx = 0;
  if (!receiving_index(r, t.dt->host[e], &idx)) {  // a holder on e's host
    assign(t, e, region, holders, n, own, f);
    return;
  }
  const size_t hi = static_cast<size_t>(
      std::lower_bound(ch_->hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_begin),
                       ch_->hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_end),
                       t.dt->host[e]) -
      ch_->hosts.begin());
  const bool several = ch_->member_offsets[hi + 1] - ch_->member_offsets[hi] > 1;
  for (size_t j = 0; j < r.parts.size(); ++j) {
    const Box& part = r.parts[j];
    const bool entry = arrives_first(r, j, idx);
    const uint32_t l = leader(r, hi, j);
    const Bands bands = relay_bands(part, t, options_);
    Emitted x{0, e, part, true, false, false};
    if (l == e) {
      if (entry) {  // stage 0, from a holder (on the part's host, if it has one)
        const bool cut = own || r.parts.size() > 1;
        const std::pair<const uint32_t*, size_t> held = part_holders(t, r, j, holders, n);
        const uint32_t* hs = held.first;
        const size_t nh = held.second;
        // In bands when e forwards the part (inside its host or across).
        if (!several && !(r.cross && r.part_entry[j] >= 0)) {
          assign(t, e, part, hs, nh, cut, f);
          continue;
        }
        // e forwards what it takes in here: only transits that forward to
        // e's mates themselves (lead_shares) take part of it.
        if (const std::vector<TransitShare>* ts = lead_transit(t, e, r, j, entry)) {
          lead_in(t, e, part, hs, nh, cut, *ts, f);
          continue;
        }
        bands.each(part, [&](const Box& sub, uint32_t band) {
          assign_one(t, e, sub, hs, nh, cut || !(sub == part), [&](Emitted y) {
            y.band = band;
            f(y);
          });
        });
        continue;
      }
      x.src_entry = leader(r, receiving_host(r, static_cast<size_t>(r.part_entry[j])), j);
      x.stage = 1;  // across hosts, from the entry host's leader
    } else if (const std::vector<TransitShare>* ts = lead_transit(t, l, r, j, entry)) {
      // From the leader what it takes in itself, from its transits' scratch
      // the rest (stage 1): the leader's pieces, as it derives them.
      const bool cut = own || r.parts.size() > 1;
      const std::pair<const uint32_t*, size_t> held = part_holders(t, r, j, holders, n);
      const uint32_t* hs = held.first;
      const size_t nh = held.second;
      lead_in(t, l, part, hs, nh, cut, *ts, [&](const Emitted& y) {
        if (y.scratch == 4 || y.scratch == 6) return;  // into the transit's scratch
        Emitted z{l, e, y.region, true, false, false};
        z.stage = 1;
        z.band = y.band;
        if (y.scratch == 5 || y.scratch == 7) {
          z = y;
          z.dst_entry = e;
        }
        f(z);
      });
      continue;
    } else {
      x.src_entry = l;
      x.stage = entry ? 1 : 2;  // inside the host, from its leader
    }
    bands.each(part, [&](const Box& sub, uint32_t band) {
      x.region = sub;
      x.band = band;
      f(x);
    });
  }
}

template <class F>
void Enumerator::lead_in(const TensorCtx& t, uint32_t l, const Box& part, const uint32_t* hs,
                         size_t nh, bool cut, const std::vector<TransitShare>& shares, F&& f) {
  // What l itself takes in, in relay bands of each piece (l forwards band
  // k once it arrived); the transits' parts in their own (transit_cut).
  const auto banded = [&](const Emitted& y) {
    relay_bands(y.region, t, options_).each(y.region, [&](const Box& sub, uint32_t band) {
      Emitted z = y;
      z.own_region = y.own_region || !(sub == y.region);
      z.region = sub;
      z.band = band;
      f(z);
    });
  };
  assign_one(t, l, part, hs, nh, cut, [&](const Emitted& y) {
    if (y.local || t.st->host[y.src_entry] == t.dt->host[l]) {
      banded(y);
      return;
    }
    transit_cut(t, l, &shares, nullptr, y, [&](const Emitted& z) {
      if (z.scratch == 0)
        banded(z);
      else
        f(z);
    });
  });
}

template <class F>
void Enumerator::recv(const TensorCtx& t, uint32_t e, F&& f) {
  RelayMerger merger;
  auto out = [&](const Emitted& x) {
    if (x.relay() && x.scratch == 0)
      merger.add(x.src_entry, x, f);  // per relay
    else
      f(x);
  };
  each_cell(t, e, [&](size_t c, const Box& B, bool part) {
    const uint32_t shift = cell_shift(t, c, B);
    cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool own) {
      own |= part;
      if (!route(t, c, region, h, n, route_)) {
        assign(t, e, region, h, n, own, f);
        return;
      }
      routed_recv(t, e, route_, region, h, n, own, shift, out);
    });
  });
  merger.flush(f);
}

template <class F>
void Enumerator::forward(const TensorCtx& t, uint32_t l, F&& emit) {
  RelayMerger merger;  // per receiver, as recv merges per relay
  auto f = [&](const Emitted& x) { merger.add(x.dst_entry, x, emit); };
  forward_unmerged(t, l, f);
  merger.flush(emit);
}

template <class F>
void Enumerator::forward_unmerged(const TensorCtx& t, uint32_t l, F&& f) {
  if (t.S > 1) {
    if (!reduces(t) || t.T > 1) return;
    each_cell(t, l, [&](size_t c, const Box& B, bool) {
      if (t.dg->cell_offsets[c + 1] - t.dg->cell_offsets[c] < 2) return;
      const bool gather = options_.relays;
      const size_t own_hi = gather ? host_slot(t, l, c) : 0;
      const int32_t host = t.dt->host[l];
      const uint32_t shift = cell_shift(t, c, B);
      cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
        Route& r = route_;
        if (!route(t, c, region, h, n, r)) return;
        for (size_t j = 0; j < r.parts.size(); ++j) {
          const uint32_t red = reducer(t, r, j);
          const bool fans = gather && t.dt->host[red] != host && gather_leader(r, own_hi, j) == l;
          if (red != l && !fans) continue;
          if (red == l && (!gather || r.fanout == 0)) {
            // To the other entries of its host, and to the part's leader on
            // every other host (all of them without relays).
            for (uint32_t i = r.cell_first; i < r.cell_first + r.cell_count; ++i) {
              const uint32_t m = t.dg->cell_entries[i];
              if (m == l) continue;
              if (gather && t.dt->host[m] != host && gather_leader(r, host_slot(t, m, c), j) != m)
                continue;
              Emitted x{l, m, r.parts[j], true, false, false};
              x.stage = 1 + shift;
              f(x);
            }
            continue;
          }
          // The reducer, or the part's leader on this host: to the others
          // here, then to the leaders of its children in the gather tree.
          const size_t pos = red == l ? 0 : gather_pos(r, own_hi, j);
          const uint32_t stage = 1 + shift + gather_depth(r, pos);
          for (uint32_t k = ch_->member_offsets[own_hi]; k < ch_->member_offsets[own_hi + 1]; ++k) {
            if (ch_->members[k] == l) continue;
            Emitted x{l, ch_->members[k], r.parts[j], true, false, false};
            x.stage = stage;
            f(x);
          }
          const size_t nh = r.cell_end - r.cell_begin;
          if (r.fanout == 0) continue;  // a leader of the star: no children
          for (size_t q = pos * r.fanout + 1; q <= pos * r.fanout + r.fanout && q < nh; ++q) {
            Emitted x{l, gather_leader(r, gather_host(r, q, j), j), r.parts[j], true, false, false};
            x.stage = stage;
            f(x);
          }
        }
      });
    });
    return;
  }
  if (!relays(t) || t.T > 1) return;
  const CellHosts& ch = cell_hosts(t);
  const int32_t host = t.dt->host[l];
  each_cell(t, l, [&](size_t c, const Box& B, bool) {
    // A cell with one entry on one host never relays.
    if (ch.cell_offsets[c + 1] - ch.cell_offsets[c] == 1 &&
        ch.member_offsets[ch.cell_offsets[c] + 1] - ch.member_offsets[ch.cell_offsets[c]] == 1)
      return;
    cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
      Route& r = route_;
      if (!route(t, c, region, h, n, r)) return;
      size_t idx = 0;
      if (!receiving_index(r, host, &idx)) return;
      const size_t hi = static_cast<size_t>(
          std::lower_bound(ch.hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_begin),
                           ch.hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_end), host) -
          ch.hosts.begin());
      for (size_t j = 0; j < r.parts.size(); ++j) {
        if (leader(r, hi, j) != l) continue;
        const bool entry = arrives_first(r, j, idx);
        const Bands bands = relay_bands(r.parts[j], t, options_);
        if (const std::vector<TransitShare>* ts = lead_transit(t, l, r, j, entry)) {
          // What l takes in itself (routed_recv): its transits forward the
          // rest to the other entries.
          const std::pair<const uint32_t*, size_t> held = part_holders(t, r, j, h, n);
          const uint32_t* hs = held.first;
          const size_t nh = held.second;
          lead_in(t, l, r.parts[j], hs, nh, true, *ts, [&](const Emitted& y) {
            if (y.scratch != 0) return;
            for (uint32_t k = ch.member_offsets[hi]; k < ch.member_offsets[hi + 1]; ++k) {
              if (ch.members[k] == l) continue;
              Emitted x{l, ch.members[k], y.region, true, false, false};
              x.stage = 1;
              x.band = y.band;
              f(x);
            }
          });
          continue;
        }
        bands.each(r.parts[j], [&](const Box& sub, uint32_t band) {
          // The other entries of this host.
          for (uint32_t k = ch.member_offsets[hi]; k < ch.member_offsets[hi + 1]; ++k) {
            if (ch.members[k] == l) continue;
            Emitted x{l, ch.members[k], sub, true, false, false};
            x.stage = entry ? 1 : 2;
            x.band = band;
            f(x);
          }
          if (!r.cross || !entry || r.part_entry[j] < 0) return;
          // The leaders of part j on the other receiving hosts.
          for (size_t i = 0; i < r.receiving; ++i) {
            if (i == idx) continue;
            Emitted x{l, leader(r, receiving_host(r, i), j), sub, true, false, false};
            x.stage = 1;
            x.band = band;
            f(x);
          }
        });
      }
    });
  });
}

template <class F>
void Enumerator::recv_naive(const TensorCtx& t, uint32_t e, F&& f) {
  const Box B = t.dst->box(e);
  if (B.empty()) return;
  std::vector<uint32_t> cands;
  std::vector<Box> boxes;
  for (uint32_t c = 0; c < t.src->num_entries(); ++c) {
    Box sb = t.src->box(c);
    if (!intersect(sb, B).empty() || (sb.rank == 0)) cands.push_back(c);
  }
  if (t.sg->tiled) {
    // Group candidates with identical boxes (the cells), all pairs.
    std::vector<bool> done(cands.size(), false);
    for (size_t i = 0; i < cands.size(); ++i) {
      if (done[i]) continue;
      const Box bi = t.src->box(cands[i]);
      std::vector<uint32_t> holders;
      for (size_t j = i; j < cands.size(); ++j)
        if (!done[j] && t.src->box(cands[j]) == bi) {
          holders.push_back(cands[j]);
          done[j] = true;
        }
      assign(t, e, intersect(bi, B), holders.data(), holders.size(), false, f);
    }
    return;
  }
  refine(t, B, cands, [&](const Box& region, const uint32_t* h, size_t n, bool own) {
    assign(t, e, region, h, n, own, f);
  });
}

template <class F>
void Enumerator::send(const TensorCtx& t, uint32_t r, F&& f) {
  const Box C = t.src->box(r);
  if (C.empty()) return;
  const int64_t sdev = t.sg->devices[r];
  const int32_t ssum = t.sg->summands[r];
  // Network pieces r sends; for pre-reductions (Emitted::scratch) also the
  // scratch writes into r's scratch (from r itself: local, or a chain's
  // link from another host) and its scratch's sends.
  auto keep = [&](const Emitted& p) {
    if (p.scratch == 1 || p.scratch == 3) {
      if (p.src_entry == r || p.dst_entry == r) f(p);
      return;
    }
    if (p.src_entry == r && (p.scratch == 2 || (!p.local && !p.relay()))) f(p);
  };
  if (t.sg->tiled) {
    const Geometry& sg = *t.sg;
    const int64_t c = sg.cell_of_entry[r];
    const uint32_t* h = sg.cell_entries.data() + sg.cell_offsets[static_cast<size_t>(c)];
    const size_t n =
        sg.cell_offsets[static_cast<size_t>(c) + 1] - sg.cell_offsets[static_cast<size_t>(c)];
    if (t.dg->tiled) {
      // Destination cells overlapping C; every entry of a cell shares its box.
      const Geometry& dg = *t.dg;
      for_each_tile(t.dst->shape(), dg.counts, dg.rank, C, [&](int64_t cell, const Box& region) {
        const uint32_t b = dg.cell_offsets[static_cast<size_t>(cell)];
        const uint32_t end = dg.cell_offsets[static_cast<size_t>(cell) + 1];
        // The route depends on the cell and the region only: once per cell.
        const bool routed = b < end && route(t, static_cast<size_t>(cell), region, h, n, route_);
        for (uint32_t i = b; i < end; ++i) {
          const uint32_t e = dg.cell_entries[i];
          if (dg.devices[e] == sdev) continue;
          if (t.T > 1 && ssum % t.T != dg.summands[e]) continue;
          if (routed)
            routed_recv(t, e, route_, region, h, n, false, 0, keep);
          else
            assign(t, e, region, h, n, false, keep);
        }
      });
      return;
    }
    std::vector<uint32_t>& dsts = dsts_;
    dsts.clear();
    dst_overlapping(t, C, [&](uint32_t e) {
      if (t.dg->devices[e] == sdev) return;
      if (t.T > 1 && ssum % t.T != t.dg->summands[e]) return;
      dsts.push_back(e);
    });
    for (uint32_t e : dsts)
      each_cell(t, e, [&](size_t c, const Box& B, bool part) {
        const Box region = intersect(C, B);
        if (region.empty()) return;
        if (route(t, c, region, h, n, route_))
          routed_recv(t, e, route_, region, h, n, part, 0, keep);
        else
          assign(t, e, region, h, n, part, keep);
      });
    return;
  }
  std::vector<uint32_t>& dsts = dsts_;
  dsts.clear();
  dst_overlapping(t, C, [&](uint32_t e) {
    if (t.dg->devices[e] == sdev) return;
    if (t.T > 1 && ssum % t.T != t.dg->summands[e]) return;
    dsts.push_back(e);
  });
  // Which source entry sends what to e is decided over e's whole box, so
  // e's network pieces are enumerated once per tensor and kept by source
  // entry: asking recv(t, e) again for each of the many small source boxes
  // overlapping e was quadratic (100,000 one-element boxes: minutes).
  if (sent_tensor_ != &t) {
    sent_.clear();
    sent_tensor_ = &t;
  }
  // Kept by the source entry they concern: their sender, and for a scratch
  // write into another device also its owner (a mirror copy).
  const auto key = [](const Emitted& a) { return a.mirror ? a.dst_entry : a.src_entry; };
  const auto by_source = [&](const Emitted& a, const Emitted& b) { return key(a) < key(b); };
  for (uint32_t e : dsts) {
    auto [it, fresh] = sent_.try_emplace(e);
    std::vector<Emitted>& pieces = it->second;
    if (fresh) {
      recv(t, e, [&](const Emitted& p) {
        if ((p.scratch == 1 && !p.local) || p.scratch == 3) {
          pieces.push_back(p);
          pieces.back().mirror = true;
        }
        if (p.scratch == 5 || p.scratch == 7) return;  // a transit's: the transit entry's
        if (p.scratch != 0 || (!p.local && !p.relay())) pieces.push_back(p);
      });
      std::stable_sort(pieces.begin(), pieces.end(), by_source);  // keeps recv's order
    }
    Emitted probe{};
    probe.src_entry = r;
    const auto [b, end] = std::equal_range(pieces.begin(), pieces.end(), probe, by_source);
    for (auto p = b; p != end; ++p) {
      Emitted x = *p;
      x.mirror = false;
      f(x);
    }
  }
}

template <class F>
void Enumerator::through_transit(const TensorCtx& t,
                                 const std::unordered_map<uint32_t, std::vector<uint32_t>>& donors,
                                 uint32_t l, uint8_t into, F&& f) {
  const auto it = donors.find(l);
  if (it == donors.end()) return;
  for (const uint32_t e : it->second)
    recv(t, e, [&](const Emitted& x) {
      if ((x.scratch == into && x.dst_entry == l) || (x.scratch == into + 1 && x.src_entry == l))
        f(x);
    });
}

template <class F>
void Enumerator::transit_in(const TensorCtx& t, uint32_t l, F&& f) {
  if (t.transit != nullptr) through_transit(t, t.transit->donors, l, 4, f);
}

template <class F>
void Enumerator::send_transit_in(const TensorCtx& t, uint32_t u, F&& f) {
  if (t.transit == nullptr) return;
  const auto it = t.transit->send_donors.find(u);
  if (it == t.transit->send_donors.end()) return;
  for (const uint32_t r : it->second)
    send(t, r, [&](const Emitted& x) {
      if (x.scratch != 6 || x.dst_entry != u) return;
      f(x);
      Emitted leave{u, x.via, x.region, true, false, false};
      leave.stage = 1;
      leave.scratch = 7;
      leave.band = x.band;
      f(leave);
    });
}

template <class F>
void Enumerator::cross_transit_in(const TensorCtx& t, uint32_t u, F&& f) {
  if (t.transit != nullptr) through_transit(t, t.transit->cross_donors, u, 6, f);
}

inline void Enumerator::uncovered(const TensorCtx& t, uint32_t e, const Box& region, int32_t s) {
  fail(ErrorCode::kInvalidArgument, t.field + ".src: region " + to_string(region) +
                                        (t.S > 1 ? " of summand " + std::to_string(s) : "") +
                                        " is held by no source device (needed by device " +
                                        std::to_string(t.dg->devices[e]) + ")");
}

}  // namespace reshard::planning
