// The all-to-all cell of the routed statistics (all_to_all_cell.h): its
// relay parts taken once for every entry, the sums flushed to every
// (entry, source) pair, the state handed back to the pairs.
#include <algorithm>
#include <atomic>

#include "plan/routed_cells.h"
#include "reshard/error.h"

namespace reshard::planning {

void RoutedCells::a2a_flush(const TensorCtx& t, uint32_t b0, size_t m, int64_t copies,
                            int64_t& group_pieces) {
  const Geometry& dg = *t.dg;
  for (size_t p = 0; p < m; ++p) {
    AllToAllSource& s = a2a_.src[p];
    if (!s.touched) continue;
    const uint32_t src = dg.cell_entries[b0 + p], sd = t.dt->dense[src];
    for (size_t i = 0; i < m; ++i) {
      if (i == p) continue;
      const uint32_t e = dg.cell_entries[b0 + i], dd = t.dt->dense[e];
      const AllToAllCell::Ref& r = a2a_.ref[i * m + p];
      group_pieces += s.added;
      p_.count_pieces(sd, dd, copies * s.added);
      p_.charge(p_.stage_acc[1], sd, dd, s.bytes, t.dt->host[src] != t.dt->host[e]);
      if (t.dt->process[src] != t.dt->process[e])
        add_to(p_.st.cross_process_bytes, s.bytes, "cross_process_bytes");
      add_to(p_.st.forwarded_bytes, s.bytes, "forwarded_bytes");
      if (p_.track_pairs) {
        if (a2a_cur_)
          add_to(a2a_cur_->plain[p * m + i], s.plain, "network_bytes");
        else
          add_to(p_.relay_bytes[1].at(r.plain), s.plain, "network_bytes");
      }
      if (!s.banded) continue;
      add_to(p_.stage_acc[1][sd].send_late, s.late, "max_send_bytes");
      add_to(p_.stage_acc[1][dd].recv_late, s.late, "max_recv_bytes");
      BandStream& b = p_.band_streams.at(r.banded);
      b.mask |= s.mask;
      if (p_.track_pairs)
        for (size_t k = 1; k < kRelayBands; ++k) add_to(b.bytes[k], s.band[k], "network_bytes");
    }
    p_.relayed = true;
    p_.last_stage = std::max(p_.last_stage, 1);
    s.clear_sums();
  }
}

bool RoutedCells::a2a_direct(size_t np, int64_t esum) {
  direct_used_ = 0;
  if (p_.keyed) return false;
  for (size_t j = 0; j < np; ++j) {
    if (route_.part_entry[j] >= 0) continue;
    if (route_.part_host[j] < 0 || holder_range_[j].second - holder_range_[j].first != 1)
      return false;
    const uint32_t src = part_holders_[holder_range_[j].first];
    size_t k = 0;
    while (k < direct_used_ && direct_[k].src != src) ++k;
    if (k == direct_used_) {
      if (direct_.size() == k) direct_.emplace_back();
      DirectHolder& d = direct_[direct_used_++];
      d.src = src;
      d.bytes = d.pieces = 0;
      d.parts.clear();
    }
    DirectHolder& d = direct_[k];
    add_to(d.bytes, mul_of(route_.parts[j].volume(), esum, "network_bytes"), "network_bytes");
    ++d.pieces;
    d.parts.push_back(static_cast<uint32_t>(j));
  }
  return true;
}

void RoutedCells::a2a_direct_entry(const TensorCtx& t, uint32_t i, uint32_t e, bool cut,
                                   int64_t copies, int64_t& group_pieces, Stage0 stage0) {
  const uint32_t dd = t.dt->dense[e];
  const int64_t dev = t.dg->devices[e];
  const int32_t host = t.dt->host[e], proc = t.dt->process[e];
  std::vector<Acc>& acc = p_.stage_acc[0];
  for (size_t k = 0; k < direct_used_; ++k) {
    const DirectHolder& d = direct_[k];
    if (t.sg->devices[d.src] == dev) {  // local: as assign takes it
      for (const uint32_t j : d.parts) stage0(i, e, j);
      continue;
    }
    const uint32_t sd = t.st->dense[d.src];
    ++direct_sums_;
    group_pieces += d.pieces;
    if (p_.counts) {
      const int64_t n = copies * d.pieces;
      DeviceCounts& c = (*p_.counts)[dd];
      DeviceCounts& s = (*p_.counts)[sd];
      c.recv_pieces += n;
      s.send_pieces += n;
      if (cut) {
        c.regions += n;
        s.regions += n;
      }
    }
    p_.charge(acc, sd, dd, d.bytes, t.st->host[d.src] != host);
    if (t.st->process[d.src] != proc)
      add_to(p_.st.cross_process_bytes, d.bytes, "cross_process_bytes");
    p_.direct_pair(sd, dd, d.bytes);
  }
}

bool RoutedCells::a2a_entered_ok(const TensorCtx& t, uint32_t b0, size_t np, bool direct) const {
  if (p_.keyed || (!direct && a2a_.any_direct())) return false;
  const Geometry& dg = *t.dg;
  // A run's parts share their holders and entry: checked once a run.
  std::pair<size_t, size_t> last_range{1, 0};
  uint32_t last_p = AllToAllCell::kNone;
  for (size_t j = 0; j < np; ++j) {
    const uint32_t p = a2a_.part[j];
    if (p == AllToAllCell::kNone) continue;
    const auto [lo, hi] = holder_range_[j];
    if (route_.part_host[j] < 0 || lo == hi) return false;
    if (p == last_p && holder_range_[j] == last_range) continue;
    last_p = p;
    last_range = holder_range_[j];
    const uint32_t e = dg.cell_entries[b0 + p];
    const int64_t dev = dg.devices[e];
    const int32_t host = t.dt->host[e], proc = t.dt->process[e];
    for (size_t k = lo; k < hi; ++k) {
      const uint32_t s = part_holders_[k];
      if (t.st->host[s] == host || t.st->process[s] == proc || t.sg->devices[s] == dev)
        return false;
    }
  }
  return true;
}

void RoutedCells::a2a_entered_part(const TensorCtx& t, uint32_t e, size_t j, bool cut) {
  const size_t h0 = holder_range_[j].first, nn = holder_range_[j].second - h0;
  entered_pieces(t, e, route_.parts[j], part_bands_[j].bands, nn, cut,
                 [&](size_t k, int64_t volume, uint32_t band, bool own) {
                   const auto pos = static_cast<uint32_t>(h0 + k);
                   const unsigned first = enter(entered_[pos], volume, band, own);
                   if (first & 1) entered_touched_.push_back(pos);
                   if (first & 2) entered_plain_.push_back(pos);
                   if (first & 4) entered_late_.push_back(pos);
                 });
}

template <class At, class Holder, class Bands>
void RoutedCells::entered_account(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                                  int64_t& group_pieces, const std::vector<uint32_t>& touched,
                                  const std::vector<uint32_t>& plain,
                                  const std::vector<uint32_t>& late, At&& at, Holder&& holder,
                                  Bands&& bands) {
  const uint32_t dd = t.dt->dense[e];
  std::vector<Acc>& acc = p_.stage_acc[0];
  int64_t pieces = 0, regions = 0;
  for (const uint32_t x : touched) {
    const auto& h = at(x);
    const uint32_t sd = t.st->dense[part_holders_[holder(x)]];
    int64_t volume = h.plain;
    if (const BandSums* hb = bands(x))
      for (size_t k = 1; k < kRelayBands; ++k) volume += (*hb)[k];
    const int64_t bytes = mul_of(volume, esum, "network_bytes");
    p_.charge(acc, sd, dd, bytes, true);
    add_to(p_.st.cross_process_bytes, bytes, "cross_process_bytes");
    if (p_.counts) {
      DeviceCounts& s = (*p_.counts)[sd];
      s.send_pieces += copies * h.pieces;
      s.regions += copies * h.regions;
    }
    pieces += h.pieces;
    regions += h.regions;
    ++entered_sums_;
  }
  if (p_.counts) {
    DeviceCounts& c = (*p_.counts)[dd];
    c.recv_pieces += copies * pieces;
    c.regions += copies * regions;
  }
  group_pieces += pieces;
  // The streams in the order their first pieces named them.
  for (const uint32_t x : plain)
    p_.direct_pair(t.st->dense[part_holders_[holder(x)]], dd,
                   mul_of(at(x).plain, esum, "network_bytes"));
  for (const uint32_t x : late) {
    const auto& h = at(x);
    const BandSums& hb = *bands(x);
    const uint32_t sd = t.st->dense[part_holders_[holder(x)]];
    int64_t late_bytes = 0;
    for (size_t k = 1; k < kRelayBands; ++k) late_bytes += hb[k];
    late_bytes = mul_of(late_bytes, esum, "network_bytes");
    add_to(acc[sd].send_late, late_bytes, "max_send_bytes");
    add_to(acc[dd].recv_late, late_bytes, "max_recv_bytes");
    BandStream& b = p_.band_streams.at(p_.band_index(uint64_t{sd} << 20 | dd));
    b.mask |= h.mask;
    if (p_.track_pairs)
      for (size_t k = 1; k < kRelayBands; ++k)
        if (hb[k] != 0) add_to(b.bytes[k], mul_of(hb[k], esum, "network_bytes"), "network_bytes");
  }
}

void RoutedCells::a2a_entered_flush(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                                    int64_t& group_pieces) {
  entered_account(
      t, e, esum, copies, group_pieces, entered_touched_, entered_plain_, entered_late_,
      [&](uint32_t pos) -> const EnteredHolder& { return entered_[pos]; },
      [](uint32_t pos) { return pos; },
      [&](uint32_t pos) -> const BandSums* { return &entered_[pos].band; });
  for (const uint32_t pos : entered_touched_) entered_[pos] = EnteredHolder{};
  entered_touched_.clear();
  entered_plain_.clear();
  entered_late_.clear();
}

bool RoutedCells::a2a_region(const TensorCtx& t, uint32_t b0, size_t m, size_t np, bool cut,
                             int64_t esum, int64_t copies, int64_t& group_pieces, Stage0 stage0) {
  if (!route_.cross || recv_host_.size() != m || route_.cell_end - route_.cell_begin != m)
    return false;
  const Geometry& dg = *t.dg;
  a2a_.pos.resize(m);
  for (size_t i = 0; i < m; ++i) a2a_.pos[slot_[i] - route_.cell_begin] = static_cast<uint32_t>(i);
  a2a_.part.assign(np, AllToAllCell::kNone);
  for (size_t j = 0; j < np; ++j) {
    if (route_.part_entry[j] < 0) continue;
    const size_t hi = recv_host_[static_cast<size_t>(route_.part_entry[j])];
    const uint32_t p = a2a_.pos[hi - route_.cell_begin];
    if (p_.en.leader(route_, hi, j) != dg.cell_entries[b0 + p]) return false;
    a2a_.part[j] = p;
  }
  a2a_.sort_parts(route_.part_entry, m);
  // Stage 0 holds no pending piece: an entry's pieces add the same in any
  // order, so its direct parts may go apart from the entered ones.
  const bool direct = a2a_direct(np, esum);
  if (direct) p_.stage_grow(0);
  const bool entered = a2a_entered_ok(t, b0, np, direct);
  if (entered && entered_.size() < part_holders_.size()) entered_.resize(part_holders_.size());
  for (size_t i = 0; i < m; ++i) {
    const uint32_t e = dg.cell_entries[b0 + i];
    stage0_parts_.clear();
    const auto idx = static_cast<size_t>(recv_index_[slot_[i] - route_.cell_begin]);
    const auto push = [&](size_t j) { stage0_parts_.push_back(static_cast<uint32_t>(j)); };
    if (direct) {
      a2a_direct_entry(t, b0 + static_cast<uint32_t>(i), e, cut, copies, group_pieces, stage0);
      a2a_.each_entered(idx, push);
    } else {
      a2a_.each_stage0(idx, push);
    }
    const size_t n = stage0_parts_.size();
    for (size_t k = 0; k < n && k < kPrefetchAhead; ++k) prefetch_part(stage0_parts_[k]);
    for (size_t k = 0; k < n; ++k) {
      if (k + kPrefetchAhead < n) prefetch_part(stage0_parts_[k + kPrefetchAhead]);
      if (entered)
        a2a_entered_part(t, e, stage0_parts_[k], cut);
      else
        stage0(b0 + static_cast<uint32_t>(i), e, stage0_parts_[k]);
    }
    if (entered) a2a_entered_flush(t, e, esum, copies, group_pieces);
  }
  if (!a2a_.any_entered()) return true;
  // The relay parts, once per source.
  p_.stage_grow(1);
  if (!a2a_.on) {
    a2a_.start(m);
    a2a_cur_ = a2a_streams(t, b0, m);
  }
  a2a_.events.clear();
  for (size_t j = 0; j < np; ++j) {
    const uint32_t p = a2a_.part[j];
    if (j + kPrefetchAhead < np) prefetch_relay_part(j + kPrefetchAhead);
    if (p != AllToAllCell::kNone) a2a_relay_part(p, route_.parts[j], part_bands_[j], esum);
  }
  a2a_count_events(t, b0, m);
  return true;
}

void RoutedCells::a2a_relay_part(uint32_t p, const Box& part, const PartBands& pb, int64_t esum) {
  ++part_visits_;
  AllToAllSource& s = a2a_.src[p];
  if (!s.seen) a2a_.events.push_back({p, false});
  s.seen = s.touched = true;
  s.added += with_edges(part, pb, [&](const Box& first, const Box& last) {
    return s.merge(first, last, pb.n, pb.last_band);
  });
  const int64_t bytes = mul_of(part.volume(), esum, "network_bytes");
  const int64_t plain = mul_of(pb.plain, esum, "network_bytes");
  add_to(s.bytes, bytes, "forwarded_bytes");
  add_to(s.plain, plain, "network_bytes");
  if (pb.n == 1) return;
  add_to(s.late, bytes - plain, "max_send_bytes");
  s.mask |= pb.mask;
  band_volumes(part, pb, [&](size_t k, int64_t v) {
    add_to(s.band[k], mul_of(v, esum, "network_bytes"), "network_bytes");
  });
  if (!s.banded) a2a_.events.push_back({p, true});
  s.banded = true;
}

void RoutedCells::a2a_count_events(const TensorCtx& t, uint32_t b0, size_t m) {
  const Geometry& dg = *t.dg;
  // Each pair's streams counted at its first part (and its first banded
  // one), entry by entry, as relay_part counts them.
  const std::vector<AllToAllCell::Event>& events = a2a_.events;
  const size_t ne = events.size();
  StreamMap<int64_t>& relay_bytes = p_.relay_bytes[1];
  if (a2a_cur_) {  // the pairs in the cell's table (A2aStreams)
    for (const AllToAllCell::Event& ev : events) {
      if (ev.band || a2a_cur_->counted[ev.p]) continue;
      a2a_cur_->counted[ev.p] = 1;
      const uint32_t sd = a2a_cur_->dense[ev.p];
      for (size_t i = 0; i < m; ++i)
        if (i != ev.p && p_.relay_pairs[1].insert(sd, a2a_cur_->dense[i])) p_.keep_pair();
    }
    for (size_t i = 0; i < m; ++i) {
      const uint32_t dd = a2a_cur_->dense[i];
      for (const AllToAllCell::Event& ev : events)
        if (ev.band && ev.p != i)
          a2a_.ref[i * m + ev.p].banded =
              p_.band_index(stage_stream_key(1, a2a_cur_->dense[ev.p], dd));
    }
    return;
  }
  for (size_t i = 0; i < m; ++i) {
    const uint32_t dd = t.dt->dense[dg.cell_entries[b0 + i]];
    // The streams' slots asked for kPrefetchAhead events on (each lookup
    // in a table of millions of streams missed the cache).
    auto ask = [&](size_t x) {
      const AllToAllCell::Event& ev = events[x];
      if (ev.band || ev.p == i) return;
      relay_bytes.prefetch(device_pair_key(t.dt->dense[dg.cell_entries[b0 + ev.p]], dd));
    };
    if (p_.track_pairs)
      for (size_t x = 0; x < ne && x < kPrefetchAhead; ++x) ask(x);
    for (size_t x = 0; x < ne; ++x) {
      const AllToAllCell::Event& ev = events[x];
      if (p_.track_pairs && x + kPrefetchAhead < ne) ask(x + kPrefetchAhead);
      if (ev.p == i) continue;
      const uint32_t sd = t.dt->dense[dg.cell_entries[b0 + ev.p]];
      AllToAllCell::Ref& r = a2a_.ref[i * m + ev.p];
      if (ev.band) {
        r.banded = p_.band_index(stage_stream_key(1, sd, dd));
        continue;
      }
      if (p_.relay_pairs[1].insert(sd, dd)) p_.keep_pair();
      if (p_.track_pairs) r.plain = relay_bytes.index(device_pair_key(sd, dd));
    }
  }
}

bool RoutedCells::a2a_runs(const TensorCtx& t, uint32_t b0, size_t m, const Box& region, bool own,
                           int64_t esum, int64_t copies, int64_t& group_pieces) {
  if (!a2a_runs_on() || p_.keyed || !route_.cross || recv_host_.size() != m ||
      route_.cell_end - route_.cell_begin != m)
    return false;
  const Geometry& dg = *t.dg;
  const std::vector<Route::Run>& runs = route_.runs;
  const size_t nr = runs.size(), npos = part_holders_.size();
  if (nr == 0 || m * npos > kEnteredAtMax) return false;
  a2a_.pos.resize(m);
  for (size_t i = 0; i < m; ++i) a2a_.pos[slot_[i] - route_.cell_begin] = static_cast<uint32_t>(i);
  // What a2a_region, a2a_direct and a2a_entered_ok check part by part,
  // once a run (its parts share host, entry and leader): each entered
  // run led by its host's entry, from holders none of which is near it;
  // each direct run from one holder on its host.
  run_at_.resize(nr);
  int32_t last_host = -1;
  std::pair<size_t, size_t> range{0, 0}, last_range{1, 0};
  uint32_t last_p = AllToAllCell::kNone;
  bool any_entered = false;
  for (size_t k = 0; k < nr; ++k) {
    const Route::Run& r = runs[k];
    if (r.host < 0) return false;
    if (k == 0 || r.host != last_host) {
      range = holders_on(r.host);
      last_host = r.host;
    }
    uint32_t p = AllToAllCell::kNone;
    if (r.entry < 0) {
      if (range.second - range.first != 1) return false;
    } else {
      if (range.first == range.second) return false;
      const size_t hi = recv_host_[static_cast<size_t>(r.entry)];
      p = a2a_.pos[hi - route_.cell_begin];
      const uint32_t e = dg.cell_entries[b0 + p];
      if (p_.en.run_leader(route_, hi, r.lead) != e) return false;
      any_entered = true;
      if (p != last_p || range != last_range) {
        last_p = p;
        last_range = range;
        const int64_t dev = dg.devices[e];
        const int32_t host = t.dt->host[e], proc = t.dt->process[e];
        for (size_t x = range.first; x < range.second; ++x) {
          const uint32_t s = part_holders_[x];
          if (t.st->host[s] == host || t.st->process[s] == proc || t.sg->devices[s] == dev)
            return false;
        }
      }
    }
    run_at_[k] = {static_cast<uint32_t>(range.first), static_cast<uint32_t>(range.second), p};
  }
  run_boxes_.clear();
  if (nr == 1) linear_boxes(region, runs[0].from, runs[0].from + runs[0].count, run_boxes_);
  const bool cut = own || nr > 1 || run_boxes_.size() > 1;
  // Taken: no holder of a direct run is on an entry's device (every host
  // of the cell receives, so none holds), so a2a_direct_entry needs no
  // direct part's box.
  p_.stage_grow(0);
  direct_used_ = 0;
  if (any_entered) {
    p_.stage_grow(1);
    if (!a2a_.on) {
      a2a_.start(m);
      a2a_cur_ = a2a_streams(t, b0, m);
    }
    a2a_.events.clear();
  }
  if (++ent_tick_ == 0) {
    std::fill(ent_at_.begin(), ent_at_.end(), EnteredAt{});
    ent_tick_ = 1;
  }
  if (ent_at_.size() < m * npos) ent_at_.resize(m * npos);
  ent_recs_.clear();
  ent_bands_.clear();
  uint64_t seq = 0;
  const int64_t chunk = band_bytes(p_.o, t.band_scale);
  PartBands pb;
  LinearCover cover(region);
  Box first_box, last_box;
  // The sums of entry position p from holder position pos, made where new.
  const auto record = [&](uint32_t p, size_t pos) -> EnteredRec& {
    EnteredAt& at = ent_at_[size_t{p} * npos + pos];
    if (at.tick != ent_tick_) {
      at = {ent_tick_, static_cast<uint32_t>(ent_recs_.size())};
      EnteredRec& fresh = ent_recs_.emplace_back();
      fresh.i = p;
      fresh.pos = static_cast<uint32_t>(pos);
    }
    return ent_recs_[at.rec];
  };
  for (size_t k = 0; k < nr; ++k) {
    const Route::Run& r = runs[k];
    const RunAt& ra = run_at_[k];
    // The run's parts partition its elements, so their volumes sum to
    // r.count, and their bytes, pieces and sums follow from it where they
    // all take the same path.
    const int64_t bytes = mul_of(r.count, esum, "network_bytes");
    if (r.entry < 0) {  // a2a_direct: by holder, in the order they first send
      const uint32_t src = part_holders_[ra.lo];
      size_t x = 0;
      while (x < direct_used_ && direct_[x].src != src) ++x;
      if (x == direct_used_) {
        if (direct_.size() == x) direct_.emplace_back();
        DirectHolder& d = direct_[direct_used_++];
        d.src = src;
        d.bytes = d.pieces = 0;
        d.parts.clear();
      }
      DirectHolder& d = direct_[x];
      add_to(d.bytes, bytes, "network_bytes");
      d.pieces += cover.run(r.from, r.from + r.count, nullptr, nullptr);
      continue;
    }
    const uint32_t e = dg.cell_entries[b0 + ra.p];
    const size_t nn = ra.hi - ra.lo;
    const auto run_bytes = static_cast<__int128>(r.count) * t.esize;
    if (run_bytes < 2 * static_cast<__int128>(chunk) &&
        (nn == 1 || run_bytes < p_.o.split_min_bytes)) {
      // Every part of one band (below 2 chunks, relay_bands_of) and sent
      // whole by holder e mod nn (one holder, or below split_min_bytes):
      // one stage-0 piece a part, its own region where `cut`, and one
      // relay piece a part, merged with the source's pending piece.
      AllToAllSource& src = a2a_.src[ra.p];
      if (!src.seen) a2a_.events.push_back({ra.p, false});
      src.seen = src.touched = true;
      // Its boxes' merges from the first and the last alone: none extends
      // the box before it, so only the first may extend the pending piece,
      // and where it does and more follow, they go one by one.
      const int64_t nb = cover.run(r.from, r.from + r.count, &first_box, &last_box);
      const int64_t merged = src.merge(first_box, first_box, 1, 0) == 0;
      if (nb > 1 && merged) {
        int64_t x = 0;
        each_linear_box(region, r.from, r.from + r.count, [&](const Box& part) {
          if (x++ > 0) src.added += src.merge(part, part, 1, 0);
        });
      } else {
        if (nb > 1) src.pending = last_box;
        src.added += nb - merged;
      }
      EnteredRec& rec = record(ra.p, ra.lo + e % nn);
      rec.pieces += nb;
      rec.regions += cut ? nb : 0;
      rec.plain += r.count;
      if (rec.plain_seq == kNoSeq) rec.plain_seq = seq++;
      part_visits_ += nb;
      add_to(src.bytes, bytes, "forwarded_bytes");
      add_to(src.plain, bytes, "network_bytes");
      continue;
    }
    run_boxes_.clear();
    linear_boxes(region, r.from, r.from + r.count, run_boxes_);
    for (const Box& part : run_boxes_) {
      part_bands_of(part, t, chunk, pb);
      entered_pieces(t, e, part, pb.bands, nn, cut,
                     [&](size_t x, int64_t volume, uint32_t band, bool own_region) {
                       enter_rec(record(ra.p, ra.lo + x), volume, band, own_region, seq);
                     });
      a2a_relay_part(ra.p, part, pb, esum);
    }
  }
  // Each entry's sums, entry by entry: its direct parts', then its entered
  // parts' (the records by entry, in the order they were made).
  ent_begin_.assign(m + 1, 0);
  for (const EnteredRec& rec : ent_recs_) ++ent_begin_[rec.i + 1];
  for (size_t i = 0; i < m; ++i) ent_begin_[i + 1] += ent_begin_[i];
  ent_order_.resize(ent_recs_.size());
  ent_touched_.assign(ent_begin_.begin(), ent_begin_.end() - 1);  // cursors
  for (size_t x = 0; x < ent_recs_.size(); ++x)
    ent_order_[ent_touched_[ent_recs_[x].i]++] = static_cast<uint32_t>(x);
  auto no_stage0 = [](uint32_t, uint32_t, size_t) {
    fail(ErrorCode::kInternal, "statistics: a direct holder on an entry's device");
  };
  for (size_t i = 0; i < m; ++i) {
    const uint32_t e = dg.cell_entries[b0 + i];
    a2a_direct_entry(t, b0 + static_cast<uint32_t>(i), e, cut, copies, group_pieces,
                     Stage0(no_stage0));
    ent_touched_.assign(ent_order_.begin() + static_cast<std::ptrdiff_t>(ent_begin_[i]),
                        ent_order_.begin() + static_cast<std::ptrdiff_t>(ent_begin_[i + 1]));
    ent_plain_.clear();
    ent_late_.clear();
    // The next entries' records asked for ahead (each is read first here,
    // out of the order they were made in).
    for (size_t y = ent_begin_[i + 1]; y < ent_begin_[std::min(i + 2, m)]; ++y) {
      const char* q = reinterpret_cast<const char*>(&ent_recs_[ent_order_[y]]);
      __builtin_prefetch(q);
      __builtin_prefetch(q + sizeof(EnteredRec) - 1);
    }
    for (const uint32_t x : ent_touched_) {
      if (ent_recs_[x].plain_seq != kNoSeq) ent_plain_.push_back(x);
      if (ent_recs_[x].mask != 0) ent_late_.push_back(x);
    }
    const auto by_plain = [&](uint32_t a, uint32_t b) {
      return ent_recs_[a].plain_seq < ent_recs_[b].plain_seq;
    };
    const auto by_late = [&](uint32_t a, uint32_t b) {
      return ent_bands_[ent_recs_[a].bands].late_seq < ent_bands_[ent_recs_[b].bands].late_seq;
    };
    if (!std::is_sorted(ent_plain_.begin(), ent_plain_.end(), by_plain))
      std::sort(ent_plain_.begin(), ent_plain_.end(), by_plain);
    if (!std::is_sorted(ent_late_.begin(), ent_late_.end(), by_late))
      std::sort(ent_late_.begin(), ent_late_.end(), by_late);
    ent_account(t, e, esum, copies, group_pieces);
  }
  if (any_entered) a2a_count_events(t, b0, m);
  ++a2a_runs_;
  return true;
}

void RoutedCells::ent_account(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                              int64_t& group_pieces) {
  entered_account(
      t, e, esum, copies, group_pieces, ent_touched_, ent_plain_, ent_late_,
      [&](uint32_t x) -> const EnteredRec& { return ent_recs_[x]; },
      [&](uint32_t x) { return ent_recs_[x].pos; },
      [&](uint32_t x) -> const BandSums* {
        const EnteredRec& r = ent_recs_[x];
        return r.mask != 0 ? &ent_bands_[r.bands].band : nullptr;
      });
}

void RoutedCells::prefetch_part(size_t j) const {
  const char* b = reinterpret_cast<const char*>(&part_bands_[j]);
  const char* q = reinterpret_cast<const char*>(&route_.parts[j]);
  __builtin_prefetch(b);
  for (size_t k = 0; k < sizeof(Box); k += 64) __builtin_prefetch(q + k);
  if (!holder_range_.empty()) __builtin_prefetch(&holder_range_[j]);
}

void RoutedCells::prefetch_relay_part(size_t j) const {
  const uint32_t p = a2a_.part[j];
  if (p == AllToAllCell::kNone) return;
  const char* b = reinterpret_cast<const char*>(&part_bands_[j]);
  const char* s = reinterpret_cast<const char*>(&a2a_.src[p]);
  __builtin_prefetch(b);
  __builtin_prefetch(b + sizeof(PartBands) - 1);
  for (size_t k = 0; k < sizeof(AllToAllSource); k += 64) __builtin_prefetch(s + k, 1);
  const char* q = reinterpret_cast<const char*>(&route_.parts[j]);
  for (size_t k = 0; k < sizeof(Box); k += 64) __builtin_prefetch(q + k);
}

void RoutedCells::a2a_leave(const TensorCtx& t, uint32_t b0, size_t m, bool indexed) {
  const Geometry& dg = *t.dg;
  for (size_t i = 0; i < m; ++i)
    for (size_t p = 0; p < m; ++p) {
      const AllToAllSource& s = a2a_.src[p];
      if (p == i || !s.seen) continue;
      const uint32_t src = dg.cell_entries[b0 + p];
      AllToAllCell::Ref& r = a2a_.ref[i * m + p];
      if (a2a_cur_ && p_.track_pairs)  // its bytes so far stay in the table (drain)
        r.plain = p_.relay_bytes[1].index(device_pair_key(a2a_cur_->dense[p], a2a_cur_->dense[i]));
      PairSlots& ps = pair(i, src, m, indexed);
      StreamRef& ref = stream_of(i, ps, src, 1, pass_of(ps, indexed));
      ref.counted = true;
      ref.plain = r.plain;
      ref.banded = r.banded;
      set_pending(i, ps, Pending{src, 1, s.pending_band, s.pending});
    }
  a2a_.on = false;
  a2a_cur_ = nullptr;
}

RoutedCells::A2aStreams* RoutedCells::a2a_streams(const TensorCtx& t, uint32_t b0, size_t m) {
  const Geometry& dg = *t.dg;
  uint64_t h = m;
  for (size_t i = 0; i < m; ++i) h = (h ^ t.dt->dense[dg.cell_entries[b0 + i]]) * 0x100000001b3ull;
  for (auto [it, end] = a2a_table_at_.equal_range(h); it != end; ++it) {
    A2aStreams& x = a2a_tables_[it->second];
    if (x.dense.size() != m) continue;
    size_t i = 0;
    while (i < m && x.dense[i] == t.dt->dense[dg.cell_entries[b0 + i]]) ++i;
    if (i == m) {
      std::atomic_ref<int64_t>(a2a_tables_shared()).fetch_add(1);  // plans run side by side
      return &x;
    }
  }
  const size_t bytes = m * (sizeof(uint32_t) + 1) + (p_.track_pairs ? m * m * sizeof(int64_t) : 0);
  if (a2a_table_bytes_ + bytes > kA2aStreamBytes) return nullptr;
  a2a_table_bytes_ += bytes;
  A2aStreams& x = a2a_tables_.emplace_back();
  x.dense.resize(m);
  for (size_t i = 0; i < m; ++i) x.dense[i] = t.dt->dense[dg.cell_entries[b0 + i]];
  x.counted.assign(m, 0);
  if (p_.track_pairs) x.plain.assign(m * m, 0);
  a2a_table_at_.emplace(h, a2a_tables_.size() - 1);
  return &x;
}

void RoutedCells::drain() {
  if (p_.track_pairs && !a2a_tables_.empty()) {  // a table: stage 1 grown (a2a_region)
    StreamMap<int64_t>& relay_bytes = p_.relay_bytes[1];
    size_t pairs = relay_bytes.size();
    for (const A2aStreams& x : a2a_tables_)
      pairs += static_cast<size_t>(std::count(x.counted.begin(), x.counted.end(), 1)) *
               (x.dense.size() - 1);
    relay_bytes.reserve(pairs);
    for (const A2aStreams& x : a2a_tables_) {
      const size_t m = x.dense.size();
      for (size_t p = 0; p < m; ++p) {
        if (!x.counted[p]) continue;
        for (size_t i = 0; i < m; ++i)
          if (i != p)
            add_to(relay_bytes[device_pair_key(x.dense[p], x.dense[i])], x.plain[p * m + i],
                   "network_bytes");
      }
    }
  }
  a2a_tables_.clear();
  a2a_table_at_.clear();
  a2a_table_bytes_ = 0;
  a2a_cur_ = nullptr;
}

}  // namespace reshard::planning
