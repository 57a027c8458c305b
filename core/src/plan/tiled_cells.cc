// The per-cell arithmetic of the global statistics (tiled_cells.h).
#include "plan/tiled_cells.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "plan/stream_map.h"
#include "reshard/error.h"

namespace reshard::planning {

bool TiledCells::relay_cell(const TensorCtx& tc, uint32_t b0, uint32_t b1) {
  by_host_.clear();
  for (uint32_t i = b0; i < b1; ++i) {
    const uint32_t e = tc.dg->cell_entries[i];
    by_host_.emplace_back(tc.dt->host[e], e);
  }
  std::sort(by_host_.begin(), by_host_.end());
  for (size_t i = 1; i < by_host_.size(); ++i)
    if (by_host_[i].first == by_host_[i - 1].first) return true;
  return false;
}

int64_t TiledCells::relay_cell_stats(const TensorCtx& tc, size_t c, const Box& B, int64_t es,
                                     int64_t cp) {
  const std::vector<std::pair<int32_t, uint64_t>>* held = &p_.en.held_on_hosts(tc, c);
  int64_t cell_pieces = 0;
  leading_.clear();
  spans_.clear();
  for (size_t g = 0, g_end = 0; g < by_host_.size(); g = g_end) {
    for (g_end = g; g_end < by_host_.size() && by_host_[g_end].first == by_host_[g].first;) ++g_end;
    spans_.emplace_back(g, g_end);
  }
  // The pieces from holder h into entry e (stage 0).
  auto direct = [&](uint32_t h, uint32_t e, int64_t bytes, bool other_host) {
    const uint32_t sd = tc.st->dense[h];
    const uint32_t dd = tc.dt->dense[e];
    ++cell_pieces;
    if (tc.dg->devices[e] == tc.sg->devices[h]) {  // its own copy
      add_to(p_.acc[dd].local, bytes, "local_bytes");
      if (p_.counts) (*p_.counts)[dd].local_pieces += cp;
      return;
    }
    p_.charge(p_.acc, sd, dd, bytes, other_host);
    if (tc.st->process[h] != tc.dt->process[e])
      add_to(p_.st.cross_process_bytes, bytes, "cross_process_bytes");
    p_.bits[dd * p_.words + (sd >> 6)] |= uint64_t{1} << (sd & 63);
    if (p_.track_pairs) p_.add_pair(sd, dd, bytes);
    if (p_.counts) {
      (*p_.counts)[sd].send_pieces += cp;
      (*p_.counts)[dd].recv_pieces += cp;
    }
  };
  region_at_.resize(hv_.size());
  for (size_t k = 0; k < hv_.size(); ++k) {
    const uint32_t h = hv_[k].first;
    Route pos;
    cover_position(tc, B, regions_[k], pos);
    region_at_[k] = {h, mul_of(hv_[k].second, es, "network_bytes"), tc.st->host[h], pos.idx, pos.n};
  }
  size_t leader_of_m = 0;  // the m leader_of holds (0: none yet)
  // Every entry of a host with one entry of the cell, or of the
  // region's holder's host, takes the region directly.
  small_spans_.clear();
  for (const auto& sp : spans_)
    if (sp.second - sp.first < 2) small_spans_.push_back(sp);
  for (size_t k = 0; k < hv_.size(); ++k) {
    const RegionAt& r = region_at_[k];
    for (const auto& [g, g_end] : small_spans_)
      for (size_t i = g; i < g_end; ++i)
        direct(r.h, by_host_[i].second, r.bytes, r.host != by_host_[g].first);
    // Spans are sorted by host.
    auto own = std::lower_bound(spans_.begin(), spans_.end(), r.host,
                                [&](const std::pair<size_t, size_t>& sp, int32_t h) {
                                  return by_host_[sp.first].first < h;
                                });
    if (own == spans_.end() || by_host_[own->first].first != r.host || own->second - own->first < 2)
      continue;
    for (size_t i = own->first; i < own->second; ++i)
      direct(r.h, by_host_[i].second, r.bytes, false);
  }
  // On the other hosts the leader (by blocks of source cells) takes it
  // in and forwards it: a distinct stream per (region, host) there.
  if (p_.track_pairs) {
    on_host_.clear();
    for (const RegionAt& r : region_at_) ++on_host_[r.host];
    size_t streams = 0;
    for (const auto& [g, g_end] : spans_)
      if (g_end - g >= 2) {
        auto it = on_host_.find(by_host_[g].first);
        streams += hv_.size() - (it == on_host_.end() ? 0 : it->second);
      }
    p_.pair_bytes.expect(streams, p_.kPairBytes);
  }
  for (size_t si = 0; si < spans_.size(); ++si) {
    const auto [g, g_end] = spans_[si];
    const size_t m = g_end - g;
    const int32_t host = by_host_[g].first;
    if (m < 2) continue;
    runs_.assign(m, LeaderRun{});
    // Each region's leader among m entries (Enumerator::lead_block):
    // the same on every host that holds none of the cell's regions.
    // (held is sorted by host.)
    const auto on = std::lower_bound(held->begin(), held->end(), std::make_pair(host, uint64_t{0}));
    const bool holds = on != held->end() && on->first == host;
    if (holds || m != leader_of_m) {
      leader_of_.resize(hv_.size());
      // held_by once per cover size (the regions of a cell share it).
      uint64_t range_n = 0;
      Enumerator::HeldRange range{nullptr, nullptr};
      for (size_t k = 0; k < hv_.size(); ++k) {
        const uint64_t n = region_at_[k].n;
        if (holds && (k == 0 || n != range_n)) {
          range = Enumerator::held_by(held, host, n);
          range_n = n;
        }
        leader_of_[k] =
            static_cast<uint32_t>(Enumerator::lead_block_on(range, host, region_at_[k].idx, n, m));
      }
      leader_of_m = holds ? 0 : m;
    }
    for (size_t k = 0; k < hv_.size(); ++k) {
      const RegionAt& r = region_at_[k];
      if (r.host == host) continue;
      const size_t q = leader_of_[k];
      LeaderRun& run = runs_[q];
      if (run.count++ == 0) run.first = k;
      add_to(run.bytes, r.bytes, "forwarded_bytes");
      direct(r.h, by_host_[g + q].second, r.bytes, true);
      if (run.count > 1 && RelayMerger::extends(run.cur, regions_[k])) continue;
      run.cur = regions_[k];
      ++run.merged;
    }
    for (size_t q = 0; q < m; ++q)
      if (runs_[q].count > 0)
        leading_.push_back({runs_[q].first, si, g + q, runs_[q].bytes, runs_[q].merged});
  }
  std::sort(leading_.begin(), leading_.end(), [](const Leader& a, const Leader& b) {
    return std::tie(a.first, a.span) < std::tie(b.first, b.span);
  });
  // Relay pieces: each leader's regions merged in cover order, one
  // sequence per other entry of its host.
  for (const Leader& l : leading_) {
    const auto [g, g_end] = spans_[l.span];
    const uint32_t lead = by_host_[l.lp].second;
    const int64_t bytes = l.bytes;
    const int64_t merged = l.merged;
    const uint32_t ld = tc.dt->dense[lead];
    p_.stage_grow(1);
    p_.relayed = true;
    p_.last_stage = std::max(p_.last_stage, 1);
    for (size_t i = g; i < g_end; ++i) {
      const uint32_t e = by_host_[i].second;
      if (e == lead) continue;
      const uint32_t dd = tc.dt->dense[e];
      add_to(p_.stage_acc[1][ld].send, bytes, "max_send_bytes");
      add_to(p_.stage_acc[1][dd].recv, bytes, "max_recv_bytes");
      if (tc.dt->process[lead] != tc.dt->process[e])
        add_to(p_.st.cross_process_bytes, bytes, "cross_process_bytes");
      add_to(p_.st.forwarded_bytes, bytes, "forwarded_bytes");
      if (p_.relay_pairs[1].insert(ld, dd)) p_.keep_pair();
      if (p_.track_pairs)
        add_to(p_.relay_bytes[1][device_pair_key(ld, dd)], bytes, "network_bytes");
      cell_pieces += merged;
      if (p_.counts) {
        (*p_.counts)[ld].send_pieces += cp * merged;
        (*p_.counts)[dd].recv_pieces += cp * merged;
        (*p_.counts)[ld].regions += cp * merged;
        (*p_.counts)[dd].regions += cp * merged;
      }
    }
  }
  return cell_pieces;
}

void TiledCells::group(const TensorCtx& t, int64_t esum, int64_t copies, int64_t& group_pieces) {
  const Geometry& dg = *t.dg;
  for (int64_t c = 0; c < dg.num_cells(); ++c) {
    if (p_.guard_stops_here(p_.pieces + group_pieces)) break;
    const uint32_t b0 = dg.cell_offsets[static_cast<size_t>(c)],
                   b1 = dg.cell_offsets[static_cast<size_t>(c) + 1];
    if (b0 == b1) continue;
    const Box B = t.dst->box(dg.cell_entries[b0]);
    if (B.empty()) continue;
    hv_.clear();
    regions_.clear();
    // The cover alone (one holder per cell: no choice, no relay).
    p_.en.cover(t, B, [&](const Box& region, const uint32_t* h, size_t, bool) {
      hv_.emplace_back(h[0], region.volume());
      regions_.push_back(region);
    });
    const int64_t n = b1 - b0;
    if (p_.o.relays && !t.single_hop && relay_cell(t, b0, b1)) {
      // The most entries of the cell on one host (by_host: relay_cell's).
      int64_t members = 0;
      for (size_t i = 0, j = 0; i < by_host_.size(); i = j) {
        for (j = i; j < by_host_.size() && by_host_[j].first == by_host_[i].first;) ++j;
        members = std::max(members, static_cast<int64_t>(j - i));
      }
      bool split = false;
      for (const Box& region : regions_) {
        Route pos;
        cover_position(t, B, region, pos);
        split |= p_.en.relay_cut(t, members, region, pos.n);
      }
      // Relay bands, or regions cut into parts for more leaders: by enum_cell.
      if (split || relay_bands(B, t, p_.o).n > 1) {
        ++routed_cells_;
        if (!routed_.cell(t, static_cast<size_t>(c), esum, copies, group_pieces))
          fail(ErrorCode::kInternal, "statistics: a tiled source cell without holders");
        continue;
      }
      group_pieces += relay_cell_stats(t, static_cast<size_t>(c), B, esum, copies);
      continue;
    }
    dst_on_host_.clear();
    dst_on_proc_.clear();
    vol_on_host_.clear();
    for (uint32_t i = b0; i < b1; ++i) {
      ++dst_on_host_[t.dt->host[dg.cell_entries[i]]];
      ++dst_on_proc_[t.dt->process[dg.cell_entries[i]]];
    }
    cell_bits_.assign(p_.words, 0);
    size_t word_lo = p_.words, word_hi = 0;  // cell_bits_' words with bits: [lo, hi)
    int64_t total = 0;
    for (auto [h, vol] : hv_) {
      const uint32_t sd = t.st->dense[h];
      const int64_t bytes = mul_of(vol, esum, "network_bytes");
      const int64_t other_host =
          n - (dst_on_host_.count(t.st->host[h]) ? dst_on_host_[t.st->host[h]] : 0);
      const int64_t other_proc =
          n - (dst_on_proc_.count(t.st->process[h]) ? dst_on_proc_[t.st->process[h]] : 0);
      add_to(p_.acc[sd].send, mul_of(bytes, n, "max_send_bytes"), "max_send_bytes");
      const int64_t inter = mul_of(bytes, other_host, "cross_host_bytes");
      add_to(p_.acc[sd].send_inter, inter, "max_host_send_bytes");
      add_to(p_.st.cross_host_bytes, inter, "cross_host_bytes");
      add_to(p_.st.cross_process_bytes, mul_of(bytes, other_proc, "cross_process_bytes"),
             "cross_process_bytes");
      add_to(vol_on_host_[t.st->host[h]], bytes, "max_host_send_bytes");
      add_to(total, bytes, "max_recv_bytes");
      cell_bits_[sd >> 6] |= uint64_t{1} << (sd & 63);
      word_lo = std::min<size_t>(word_lo, sd >> 6);
      word_hi = std::max<size_t>(word_hi, (sd >> 6) + 1);
      if (p_.counts) (*p_.counts)[sd].send_pieces += n * copies;
    }
    group_pieces += static_cast<int64_t>(hv_.size()) * n;
    // Where every holder has a column of pair_bytes' table, each
    // entry's streams are added along its row (each entry takes a
    // distinct stream from every holder but its own device).
    hv_cols_.clear();
    if (p_.track_pairs && !hv_.empty())
      p_.pair_bytes.expect(static_cast<size_t>(n) * (hv_.size() - 1), p_.kPairBytes);
    if (p_.track_pairs && p_.pair_bytes.dense())
      for (auto [h, vol] : hv_) {
        const int32_t col = p_.pair_bytes.column(t.st->dense[h]);
        if (col < 0) {
          hv_cols_.clear();
          break;
        }
        hv_cols_.push_back(col);
      }
    // Where the holders' columns are consecutive (c0, c0 + 1, ...) and
    // every stream's bytes fit a cell, a row takes them as a run (add_run)
    // with the entry's own column left out: run_bytes_[k], hv_[k]'s bytes.
    bool run = !hv_cols_.empty();
    run_bytes_.clear();
    for (size_t k = 0; run && k < hv_.size(); ++k) {
      const int64_t b = hv_[k].second * esum;
      run = hv_cols_[k] == hv_cols_[0] + static_cast<int32_t>(k) && b >= 0 && b < PairBytes::kInMap;
      run_bytes_.push_back(static_cast<uint32_t>(b));
    }
    for (uint32_t i = b0; i < b1; ++i) {
      const uint32_t e = dg.cell_entries[i];
      const uint32_t dd = t.dt->dense[e];
      int64_t own = 0;
      if (auto r = t.src->entry_of(dg.devices[e])) {
        own = mul_of(intersect(t.src->box(*r), B).volume(), esum, "local_bytes");
        // The device keeps its own overlap: a local copy, not a send.
        p_.acc[t.st->dense[*r]].send -= own;
        // Its holder is then one of hv, counted above as a sender.
        if (p_.counts && own > 0) {
          (*p_.counts)[t.st->dense[*r]].send_pieces -= copies;
          (*p_.counts)[dd].local_pieces += copies;
          (*p_.counts)[dd].recv_pieces -= copies;
        }
      }
      if (p_.counts) (*p_.counts)[dd].recv_pieces += static_cast<int64_t>(hv_.size()) * copies;
      add_to(p_.acc[dd].local, own, "local_bytes");
      add_to(p_.acc[dd].recv, total - own, "max_recv_bytes");
      add_to(p_.acc[dd].recv_inter,
             total - (vol_on_host_.count(t.dt->host[e]) ? vol_on_host_[t.dt->host[e]] : 0),
             "max_host_recv_bytes");
      uint64_t* row = p_.bits.data() + dd * p_.words;
      for (size_t w = word_lo; w < word_hi; ++w) row[w] |= cell_bits_[w];
      if (!p_.track_pairs) continue;
      if (uint32_t* prow = run ? p_.pair_bytes.row(dd) : nullptr) {
        // The holder on dd itself (column(dd) among the run's) takes none.
        const int32_t c0 = hv_cols_[0], own_col = p_.pair_bytes.column(dd);
        const size_t skip = own_col >= c0 && static_cast<size_t>(own_col - c0) < hv_.size()
                                ? static_cast<size_t>(own_col - c0)
                                : hv_.size();
        (void)p_.pair_bytes.add_run(prow, dd, c0, run_bytes_.data(), skip);
        if (skip < hv_.size())
          (void)p_.pair_bytes.add_run(prow, dd, c0 + static_cast<int32_t>(skip) + 1,
                                      run_bytes_.data() + skip + 1, hv_.size() - skip - 1);
        continue;
      }
      if (uint32_t* prow = hv_cols_.empty() ? nullptr : p_.pair_bytes.row(dd)) {
        for (size_t k = 0; k < hv_.size(); ++k)
          if (t.st->dense[hv_[k].first] != dd)
            (void)p_.pair_bytes.add_cell(prow, dd, hv_cols_[k], hv_[k].second * esum);
        continue;
      }
      for (auto [h, vol] : hv_)
        if (t.st->dense[h] != dd) p_.add_pair(t.st->dense[h], dd, vol * esum);  // <= bytes above
    }
  }
}

}  // namespace reshard::planning
