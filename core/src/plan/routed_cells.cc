// The statistics of routed cells (routed_cells.h): each cell's cover and
// routes once, each entry's pieces, a relay part's bands at once.
#include "plan/routed_cells.h"

#include <algorithm>
#include <atomic>

#include "reshard/error.h"

namespace reshard::planning {

void RoutedCells::part_bands_of(const Box& part, int64_t esize, PartBands& pb) const {
  pb.bands = relay_bands(part, esize, p_.o);
  const Bands& b = pb.bands;
  pb.n = b.dim < 0 ? 1 : b.n;
  pb.mask = 0;
  pb.volume.fill(0);
  pb.first = pb.last = part;
  pb.last_band = 0;
  if (b.dim < 0) {
    pb.volume[0] = part.volume();
    return;
  }
  const int64_t slab = part.volume() / part.extent(b.dim);
  for (int64_t k = 0; k < b.n; ++k) {
    const auto band = static_cast<uint32_t>(k * kRelayBands / b.n);
    pb.volume[band] = slab * (b.start(k + 1) - b.start(k));
    if (band > 0) pb.mask |= 1u << band;
  }
  pb.first.hi[b.dim] = b.start(1);
  pb.last.lo[b.dim] = b.start(b.n - 1);
  pb.last_band = static_cast<uint32_t>((b.n - 1) * kRelayBands / b.n);
}

void RoutedCells::relay_part(const TensorCtx& t, StreamRef& ref, uint32_t e, const Box& part,
                             const PartBands& pb, int64_t added, int64_t esum, int64_t copies,
                             int64_t& group_pieces) {
  const uint32_t src = ref.src, stage = ref.stage;
  const uint32_t sd = t.dt->dense[src], dd = t.dt->dense[e];
  ++part_visits_;
  group_pieces += added;
  if (p_.counts) {
    (*p_.counts)[dd].recv_pieces += copies * added;
    (*p_.counts)[dd].regions += copies * added;
    (*p_.counts)[sd].send_pieces += copies * added;
    (*p_.counts)[sd].regions += copies * added;
  }
  const int64_t bytes = mul_of(part.volume(), esum, "network_bytes");
  p_.stage_grow(stage);
  p_.charge(p_.stage_acc[stage], sd, dd, bytes, t.dt->host[src] != t.dt->host[e]);
  if (t.dt->process[src] != t.dt->process[e])
    add_to(p_.st.cross_process_bytes, bytes, "cross_process_bytes");
  p_.relayed = true;
  p_.last_stage = std::max(p_.last_stage, static_cast<int32_t>(stage));
  add_to(p_.st.forwarded_bytes, bytes, "forwarded_bytes");
  // Band 0 travels with the stream's pieces of no band, the others in
  // their own messages.
  if (!ref.counted) {
    if (p_.relay_pairs[stage].insert(sd, dd)) p_.keep_pair();
    if (p_.track_pairs) ref.plain = p_.relay_bytes[stage].index((uint64_t{sd} << 32) | dd);
    ref.counted = true;
  }
  if (p_.track_pairs)
    add_to(p_.relay_bytes[stage].at(ref.plain), mul_of(pb.volume[0], esum, "network_bytes"),
           "network_bytes");
  if (pb.n == 1) return;
  const int64_t late = bytes - mul_of(pb.volume[0], esum, "network_bytes");  // bands above 0
  add_to(p_.stage_acc[stage][sd].send_late, late, "max_send_bytes");
  add_to(p_.stage_acc[stage][dd].recv_late, late, "max_recv_bytes");
  if (ref.banded == kUnset)
    ref.banded = p_.band_index(uint64_t{stage} << 40 | uint64_t{sd} << 20 | dd);
  BandStream& b = p_.band_streams.at(ref.banded);
  b.mask |= pb.mask;
  if (p_.track_pairs)
    for (size_t k = 1; k < kRelayBands; ++k)
      add_to(b.bytes[k], mul_of(pb.volume[k], esum, "network_bytes"), "network_bytes");
}

bool RoutedCells::cell(const TensorCtx& t, size_t c, int64_t esum, int64_t copies,
                       int64_t& group_pieces) {
  const Geometry& dg = *t.dg;
  const uint32_t b0 = dg.cell_offsets[c], b1 = dg.cell_offsets[c + 1];
  const Box B = t.dst->box(dg.cell_entries[b0]);
  bool held = true;
  p_.en.cover(t, B, [&](const Box&, const uint32_t*, size_t n, bool) { held &= n > 0; });
  if (!held) return false;
  const size_t m = b1 - b0;
  pending_.resize(std::max(pending_.size(), m));
  streams_.resize(std::max(streams_.size(), m));
  for (size_t i = 0; i < m; ++i) {
    pending_[i].clear();
    streams_[i].clear();
  }
  several_.assign(m, 0);
  slot_.assign(m, 0);
  a2a_.on = false;
  if (++cell_tick_ == 0) {  // wrapped: every stamp is stale again
    std::fill(pending_at_.begin(), pending_at_.end(), Stamped{});
    std::fill(stream_at_.begin(), stream_at_.end(), Stamped{});
    cell_tick_ = 1;
  }
  // Indexed where the tables stay small (16 Mi slots), else scanned; set
  // up at the first region that takes a route (a single-hop pass needs
  // none; zeroing them was 8% of `reshard plan` on the 4,096-device MoE
  // sync of bench/plan_scale.py).
  const bool indexed = m * m * 2 <= (size_t{1} << 24);
  by_host_cell_.clear();
  for (uint32_t i = b0; i < b1; ++i) by_host_cell_.emplace_back(t.dt->host[dg.cell_entries[i]], i);
  std::sort(by_host_cell_.begin(), by_host_cell_.end());
  for (size_t i = 1; i < m; ++i)
    if (by_host_cell_[i].first == by_host_cell_[i - 1].first)
      several_[by_host_cell_[i].second - b0] = several_[by_host_cell_[i - 1].second - b0] = 1;
  bool slots = false;
  // Whether the cell's relay parts may still be taken alike (see
  // A2aSource): one entry a host, no relay piece taken one by one yet.
  bool a2a_ok = m >= 2 && m * m <= (size_t{1} << 24) &&
                std::find(several_.begin(), several_.end(), 1) == several_.end();
  p_.en.cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool own) {
    if (!p_.en.route(t, c, region, h, n, route_))
      return p_.assigned.assign_cell(t, b0, b1, region, h, n, own, esum, copies, group_pieces);
    if (route_.reduce) fail(ErrorCode::kInternal, "statistics: a reduce route in one summand");
    if (!slots) {
      for (uint32_t i = b0; i < b1; ++i) slot_[i - b0] = p_.en.host_slot(t, dg.cell_entries[i], c);
      slots = true;
      if (indexed && pos_in_cell_.size() < t.dst->num_entries())
        pos_in_cell_.resize(t.dst->num_entries());
      if (indexed)
        for (uint32_t i = b0; i < b1; ++i) pos_in_cell_[dg.cell_entries[i]] = i - b0;
      if (indexed && stream_at_.size() < m * m * 2) {
        pending_at_.assign(m * m, Stamped{});
        stream_at_.assign(m * m * 2, Stamped{});
      }
    }
    p_.assigned.region_holders().set(t, h, n);
    const size_t np = route_.parts.size();
    part_bands_.resize(np);
    part_holders_.clear();
    holder_begin_.assign(np + 1, 0);
    for (size_t j = 0; j < np; ++j) {
      part_bands_of(route_.parts[j], t.esize, part_bands_[j]);
      holder_begin_[j] = part_holders_.size();
      if (route_.cross && route_.part_host[j] >= 0)
        for (size_t k = 0; k < n; ++k)
          if (t.st->host[h[k]] == route_.part_host[j]) part_holders_.push_back(h[k]);
    }
    holder_begin_[np] = part_holders_.size();
    p_.en.receiving_table(route_, recv_index_, recv_host_);
    // Part j of entry e (at i) in stage 0, from a holder (on the part's
    // host, if it has one).
    auto stage0 = [&](uint32_t i, uint32_t e, size_t j) {
      const Box& part = route_.parts[j];
      const bool cut = own || np > 1;
      const bool shared = route_.cross && route_.part_host[j] >= 0;
      const uint32_t* hs = shared ? part_holders_.data() + holder_begin_[j] : h;
      const size_t nh = shared ? holder_begin_[j + 1] - holder_begin_[j] : n;
      const HolderSets* sets = shared ? nullptr : &p_.assigned.region_holders();
      bool ok = true;
      if (!several_[i - b0] && !(route_.cross && route_.part_entry[j] >= 0))
        ok = p_.assigned.assign(t, e, part, hs, nh, cut, 0, esum, copies, group_pieces, sets);
      else
        part_bands_[j].bands.each(part, [&](const Box& sub, uint32_t band) {
          ok &= p_.assigned.assign(t, e, sub, hs, nh, cut || !(sub == part), band, esum, copies,
                                   group_pieces, sets);
        });
      if (!ok) fail(ErrorCode::kInternal, "statistics: a route part without holders");
    };
    if (a2a_ok && a2a_region(t, b0, m, np, esum, Stage0(stage0))) return;
    if (a2a_.on) {  // taken one by one from here: each pair's pending piece and stream
      a2a_flush(t, b0, m, copies, group_pieces);
      a2a_leave(t, b0, m, indexed);
    }
    a2a_ok = false;
    for (uint32_t i = b0; i < b1; ++i) {
      const uint32_t e = dg.cell_entries[i];
      const size_t hi = slot_[i - b0];
      const int64_t ri = recv_index_[hi - route_.cell_begin];
      if (ri < 0) {  // a holder on e's host
        p_.assigned.assign(t, e, region, h, n, own, 0, esum, copies, group_pieces,
                           &p_.assigned.region_holders());
        continue;
      }
      const auto idx = static_cast<size_t>(ri);
      for (size_t j = 0; j < np; ++j) {
        const Box& part = route_.parts[j];
        const PartBands& pb = part_bands_[j];
        const bool entry = Enumerator::arrives_first(route_, j, idx);
        const uint32_t l = p_.en.leader(route_, hi, j);
        uint32_t src = l, stage = entry ? 1 : 2;
        if (l == e) {
          if (entry) {
            stage0(i, e, j);
            continue;
          }
          src = p_.en.leader(route_, recv_host_[static_cast<size_t>(route_.part_entry[j])], j);
          stage = 1;  // across hosts, from the entry host's leader
        }
        // RelayMerger on the entry's pending piece from `src` (`added`:
        // the pieces the part adds after merging), and the entry's
        // stream from src: found by index (src, a leader, is an entry of
        // the cell, at pos_in_cell[src]), or by a scan where the cell is
        // too large for the tables (a scan per part was most of the
        // statistics' time on a 4,096-device MoE sync).
        std::vector<Pending>& pe = pending_[i - b0];
        std::vector<StreamRef>& se = streams_[i - b0];
        int64_t added = pb.n;
        size_t pk = 0, key = 0;
        Pending* q = nullptr;
        StreamRef* ref = nullptr;
        if (indexed) {
          pk = (i - b0) * m + pos_in_cell_[src];  // pending: by source alone
          key = pk * 2 + (stage == 1 ? 0 : 1);
          if (pending_at_[pk].tick == cell_tick_) q = &pe[pending_at_[pk].index];
          if (stream_at_[key].tick == cell_tick_) ref = &se[stream_at_[key].index];
        } else {
          for (Pending& x : pe)
            if (x.src == src) q = &x;
          for (StreamRef& r : se)
            if (r.src == src && r.stage == stage) ref = &r;
        }
        if (!q) {
          if (indexed) pending_at_[pk] = Stamped{cell_tick_, static_cast<uint32_t>(pe.size())};
          pe.push_back(Pending{src, stage, pb.last_band, pb.last});
        } else {
          bool grew = false;
          if (q->stage == stage && q->band == 0 && RelayMerger::extends(q->box, pb.first)) {
            --added;
            grew = pb.n == 1;  // the pending piece grew (kept as it was)
          }
          if (!grew) *q = Pending{src, stage, pb.last_band, pb.last};
        }
        if (!ref) {
          if (indexed) stream_at_[key] = Stamped{cell_tick_, static_cast<uint32_t>(se.size())};
          ref = &se.emplace_back(StreamRef{src, stage});
        }
        relay_part(t, *ref, e, part, pb, added, esum, copies, group_pieces);
      }
    }
  });
  if (a2a_.on) a2a_flush(t, b0, m, copies, group_pieces);
  std::atomic_ref<int64_t>(relay_parts_visited()).fetch_add(part_visits_);
  part_visits_ = 0;
  return true;
}

void RoutedCells::cells(const TensorCtx& t, int64_t esum, int64_t copies, int64_t& group_pieces) {
  const Geometry& dg = *t.dg;
  for (int64_t c = 0; c < dg.num_cells(); ++c) {
    const auto cs = static_cast<size_t>(c);
    if (dg.cell_offsets[cs] == dg.cell_offsets[cs + 1]) continue;
    if (t.dst->box(dg.cell_entries[dg.cell_offsets[cs]]).empty()) continue;
    if (p_.guard_stops_here(p_.pieces + group_pieces)) return;
    if (cell(t, cs, esum, copies, group_pieces)) continue;
    // A region held by no source device: the enumeration reports the first
    // such piece, in entry order, as a plan would.
    for (uint32_t e = 0; e < t.dst->num_entries(); ++e) p_.en.recv(t, e, [](const Emitted&) {});
    fail(ErrorCode::kInternal, "statistics: a region without holders was not reported");
  }
}

}  // namespace reshard::planning
