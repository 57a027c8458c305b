// The statistics of routed cells (routed_cells.h): each cell's cover and
// routes once, each entry's pieces, a relay part's bands at once.
#include "plan/routed_cells.h"

#include <algorithm>
#include <atomic>

#include "reshard/error.h"

namespace reshard::planning {

namespace {
std::atomic<size_t> pair_index_max{size_t{1} << 23};
}  // namespace

size_t set_pair_index_max(size_t pairs) { return pair_index_max.exchange(pairs); }

int64_t& hashed_cells_kept() {
  static int64_t n = 0;
  return n;
}

void RoutedCells::part_bands_of(const Box& part, const TensorCtx& t, int64_t chunk,
                                PartBands& pb) const {
  pb.bands = relay_bands_of(part, t.esize, chunk);
  const Bands& b = pb.bands;
  pb.n = b.dim < 0 ? 1 : b.n;
  pb.mask = 0;
  pb.last_band = 0;
  if (b.dim < 0) {
    pb.plain = part.volume();
    return;
  }
  pb.plain = part.volume() / part.extent(b.dim) * (b.start(1) - b.start(0));
  for (int64_t k = 1; k < b.n; ++k) pb.mask |= 1u << (k * kRelayBands / b.n);
  pb.last_band = static_cast<uint32_t>((b.n - 1) * kRelayBands / b.n);
}

void RoutedCells::relay_part(const TensorCtx& t, StreamRef& ref, uint32_t e, const Box& part,
                             const PartBands& pb, int64_t added, int64_t esum, int64_t copies,
                             int64_t& group_pieces) {
  const uint32_t src = ref.src, stage = ref.stage;
  const uint32_t sd = t.dt->dense[src], dd = t.dt->dense[e];
  ++part_visits_;
  group_pieces += added;
  p_.count_pieces(sd, dd, copies * added);
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
    if (p_.track_pairs) ref.plain = p_.relay_bytes[stage].index(device_pair_key(sd, dd));
    ref.counted = true;
  }
  if (p_.track_pairs)
    add_to(p_.relay_bytes[stage].at(ref.plain), mul_of(pb.plain, esum, "network_bytes"),
           "network_bytes");
  if (pb.n == 1) return;
  const int64_t late = bytes - mul_of(pb.plain, esum, "network_bytes");  // bands above 0
  add_to(p_.stage_acc[stage][sd].send_late, late, "max_send_bytes");
  add_to(p_.stage_acc[stage][dd].recv_late, late, "max_recv_bytes");
  if (ref.banded == kUnset) ref.banded = p_.band_index(stage_stream_key(stage, sd, dd));
  BandStream& b = p_.band_streams.at(ref.banded);
  b.mask |= pb.mask;
  if (p_.track_pairs)
    band_volumes(part, pb, [&](size_t k, int64_t v) {
      add_to(b.bytes[k], mul_of(v, esum, "network_bytes"), "network_bytes");
    });
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
  a2a_cur_ = nullptr;
  if (++cell_tick_ == 0) {  // wrapped: every stamp is stale again
    std::fill(pair_at_.begin(), pair_at_.end(), StampedSlots{});
    pair_map_.clear();
    hashed_sig_.clear();
    cell_tick_ = 1;
  }
  // Indexed where the table stays small (8 Mi pairs, 128 MiB), else hashed; set
  // up at the first region that takes a route (a single-hop pass needs
  // none; zeroing them was 8% of `reshard plan` on the 4,096-device MoE
  // sync of bench/plan_scale.py).
  const bool indexed = m * m <= pair_index_max.load(std::memory_order_relaxed);
  if (!indexed) hashed_cell(t, b0, m);
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
    // An all-to-all region is taken from its runs where a2a_runs can
    // (Route::want_runs), else routed again into parts.
    route_.want_runs = a2a_ok && !p_.keyed && a2a_runs_on();
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
      if (indexed && pair_at_.size() < m * m) pair_at_.assign(m * m, StampedSlots{});
    }
    if (route_.as_runs) {
      p_.en.receiving_table(route_, recv_index_, recv_host_);
      sort_holders(t, h, n);
      if (a2a_runs(t, b0, m, region, own, esum, copies, group_pieces)) return;
      route_.want_runs = false;
      p_.en.route(t, c, region, h, n, route_);
    }
    p_.assigned.region_holders().set(t, h, n);
    const size_t np = route_.parts.size();
    part_bands_.resize(np);
    // The holders by host, in their order within a host: a part's holders
    // on its host are a range of them (a scan of every holder per part was
    // a tenth of the statistics of a 4,096-device MoE sync).
    part_holders_.clear();
    holder_range_.assign(np, {0, 0});
    bool any_host = false;
    const int64_t chunk = band_bytes(p_.o, t.band_scale);
    for (size_t j = 0; j < np; ++j) {
      part_bands_of(route_.parts[j], t, chunk, part_bands_[j]);
      any_host |= route_.cross && route_.part_host[j] >= 0;
    }
    if (any_host) {
      sort_holders(t, h, n);
      // Consecutive parts mostly share a host (a share's runs, §5.2): its
      // range is searched for once per run of them.
      int32_t last_host = -1;
      std::pair<size_t, size_t> last_range{0, 0};
      for (size_t j = 0; j < np; ++j) {
        const int32_t host = route_.part_host[j];
        if (host < 0) continue;
        if (host != last_host) {
          last_host = host;
          last_range = holders_on(host);
        }
        holder_range_[j] = last_range;
      }
    }
    p_.en.receiving_table(route_, recv_index_, recv_host_);
    // Part j of entry e (at i) in stage 0, from a holder (on the part's
    // host, if it has one).
    auto stage0 = [&](uint32_t i, uint32_t e, size_t j) {
      const Box& part = route_.parts[j];
      const bool cut = own || np > 1;
      const bool shared = route_.cross && route_.part_host[j] >= 0;
      const uint32_t* hs = shared ? part_holders_.data() + holder_range_[j].first : h;
      const size_t nh = shared ? holder_range_[j].second - holder_range_[j].first : n;
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
    if (a2a_ok &&
        a2a_region(t, b0, m, np, own || np > 1, esum, copies, group_pieces, Stage0(stage0)))
      return;
    if (a2a_.on) {  // taken one by one from here: each pair's pending piece and stream
      a2a_flush(t, b0, m, copies, group_pieces);
      a2a_leave(t, b0, m, indexed);
    }
    a2a_ok = false;
    // Host by host (by_host_cell_: the cell's entries by host): a host of
    // several entries takes its forwards inside the host at once
    // (host_forwards), the others go entry by entry.
    for (size_t g = 0, g_end = 0; g < m; g = g_end) {
      for (g_end = g; g_end < m && by_host_cell_[g_end].first == by_host_cell_[g].first;) ++g_end;
      const size_t hi = slot_[by_host_cell_[g].second - b0];
      const int64_t ri = recv_index_[hi - route_.cell_begin];
      if (ri < 0) {  // a holder on the host
        for (size_t x = g; x < g_end; ++x)
          p_.assigned.assign(t, dg.cell_entries[by_host_cell_[x].second], region, h, n, own, 0,
                             esum, copies, group_pieces, &p_.assigned.region_holders());
        continue;
      }
      const auto idx = static_cast<size_t>(ri);
      if (g_end - g >= 2) {
        host_forwards(t, b0, m, g, g_end, hi, idx, indexed, esum, copies, group_pieces,
                      Stage0(stage0));
        continue;
      }
      for (size_t x = g; x < g_end; ++x) {
        const uint32_t i = by_host_cell_[x].second;
        const uint32_t e = dg.cell_entries[i];
        for (size_t j = 0; j < np; ++j) {
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
          take_part(t, i - b0, e, src, stage, j, m, indexed, esum, copies, group_pieces);
        }
      }
    }
  });
  if (a2a_.on) a2a_flush(t, b0, m, copies, group_pieces);
  if (!indexed) keep_pass_slots(m);
  std::atomic_ref<int64_t>(relay_parts_visited()).fetch_add(part_visits_);
  part_visits_ = 0;
  std::atomic_ref<int64_t>(direct_sums_taken()).fetch_add(direct_sums_);
  direct_sums_ = 0;
  std::atomic_ref<int64_t>(entered_sums_taken()).fetch_add(entered_sums_);
  entered_sums_ = 0;
  std::atomic_ref<int64_t>(a2a_runs_taken()).fetch_add(a2a_runs_);
  a2a_runs_ = 0;
  return true;
}

void RoutedCells::sort_holders(const TensorCtx& t, const uint32_t* h, size_t n) {
  holder_hosts_.clear();
  for (size_t k = 0; k < n; ++k)
    holder_hosts_.emplace_back(t.st->host[h[k]], static_cast<uint32_t>(k));
  std::sort(holder_hosts_.begin(), holder_hosts_.end());
  part_holders_.clear();
  for (const auto& hk : holder_hosts_) part_holders_.push_back(h[hk.second]);
}

void RoutedCells::hashed_cell(const TensorCtx& t, uint32_t b0, size_t m) {
  const Geometry& dg = *t.dg;
  sig_.resize(m);
  for (size_t i = 0; i < m; ++i) {
    const uint32_t e = dg.cell_entries[b0 + i];
    sig_[i] = {e, t.dt->dense[e]};
  }
  if (sig_ == hashed_sig_) {
    std::atomic_ref<int64_t>(hashed_cells_kept()).fetch_add(1);  // plans run side by side
    return;
  }
  pair_map_.clear();
  hashed_sig_.swap(sig_);
}

void RoutedCells::keep_pass_slots(size_t m) {
  for (size_t i = 0; i < m; ++i)
    for (const StreamRef& ref : streams_[i]) {
      if (!ref.counted || ref.known || (ref.plain == kUnset && p_.track_pairs)) continue;
      HashedSlots* x = pair_map_.find(pair_key(i, ref.src));
      if (!x) fail(ErrorCode::kInternal, "statistics: a stream without its pair");
      x->pass[ref.stage == 1 ? 0 : 1] = p_.track_pairs ? ref.plain : 0;
    }
}

RoutedCells::PairSlots* RoutedCells::find_pair(size_t i, uint32_t src, size_t m, bool indexed) {
  if (indexed) {
    StampedSlots& at = pair_at_[i * m + pos_in_cell_[src]];
    return at.tick == cell_tick_ ? &at.slots : nullptr;
  }
  HashedSlots* x = pair_map_.find(pair_key(i, src));
  return x && x->tick == cell_tick_ ? &x->slots : nullptr;
}

RoutedCells::PairSlots& RoutedCells::pair(size_t i, uint32_t src, size_t m, bool indexed) {
  if (!indexed) {
    HashedSlots& x = pair_map_.emplace(pair_key(i, src));
    if (x.tick != cell_tick_) {
      x.tick = cell_tick_;
      x.slots = PairSlots{};
    }
    return x.slots;
  }
  StampedSlots& at = pair_at_[i * m + pos_in_cell_[src]];
  if (at.tick != cell_tick_) at = StampedSlots{cell_tick_, PairSlots{}};
  return at.slots;
}

void RoutedCells::take_part(const TensorCtx& t, size_t i, uint32_t e, uint32_t src, uint32_t stage,
                            size_t j, size_t m, bool indexed, int64_t esum, int64_t copies,
                            int64_t& group_pieces) {
  // RelayMerger on the entry's pending piece from `src` (`added`: the
  // pieces the part adds after merging), and the entry's stream from src:
  // found by index (src, a leader, is an entry of the cell, at
  // pos_in_cell[src]), or hashed where the cell is too large for the
  // tables (a scan per part was most of the statistics' time on a
  // 4,096-device MoE sync, and quadratic in the leaders of a replicated
  // cell's 8,192 entries at 16,384 devices).
  const PartBands& pb = part_bands_[j];
  const Box& part = route_.parts[j];
  int64_t added = pb.n;
  PairSlots& ps = pair(i, src, m, indexed);
  with_edges(part, pb, [&](const Box& first, const Box& last) {
    if (Pending* q = pending_of(i, ps)) {
      bool grew = false;
      if (q->stage == stage && q->band == 0 && RelayMerger::extends(q->box, first)) {
        --added;
        grew = pb.n == 1;  // the pending piece grew (kept as it was)
      }
      if (!grew) *q = Pending{src, stage, pb.last_band, last};
    } else {
      set_pending(i, ps, Pending{src, stage, pb.last_band, last});
    }
  });
  StreamRef& ref = stream_of(i, ps, src, stage, pass_of(ps, indexed));
  relay_part(t, ref, e, route_.parts[j], pb, added, esum, copies, group_pieces);
}

void RoutedCells::host_forwards(const TensorCtx& t, uint32_t b0, size_t m, size_t g, size_t g_end,
                                size_t hi, size_t idx, bool indexed, int64_t esum, int64_t copies,
                                int64_t& group_pieces, Stage0 stage0) {
  const Geometry& dg = *t.dg;
  const size_t k = g_end - g, np = route_.parts.size();
  auto at = [&](size_t q) { return by_host_cell_[g + q].second; };  // cell_entries index
  // Each leader's pending piece at the other entries of the host (the
  // same at every one of them), from the first of them.
  forwards_.assign(k, HostForward{});
  for (size_t q = 0; q < k; ++q) {
    const uint32_t l = dg.cell_entries[at(q)];
    const size_t i = at(q == 0 ? 1 : 0) - b0;
    const PairSlots* ps = find_pair(i, l, m, indexed);
    if (ps && ps->pending != kUnset) {
      forwards_[q].has_pending = true;
      forwards_[q].pending = pending_[i][ps->pending];
    }
  }
  // Each part's leader (at q on the host) and, where it entered on another
  // host, the leader there it takes the part from (kUnset: none): the
  // pair's slots asked for kPrefetchAhead parts on (each lookup missed the
  // cache: a tenth of `reshard plan` on the 8,192-device MoE sync).
  fwd_parts_.resize(np);
  for (size_t j = 0; j < np; ++j) {
    const uint32_t l = p_.en.leader(route_, hi, j);
    size_t q = 0;
    while (q < k && dg.cell_entries[at(q)] != l) ++q;
    if (q == k) fail(ErrorCode::kInternal, "statistics: a part's leader off its host");
    fwd_parts_[j] = {static_cast<uint32_t>(q), kUnset};
    if (!Enumerator::arrives_first(route_, j, idx))
      fwd_parts_[j].second =
          p_.en.leader(route_, recv_host_[static_cast<size_t>(route_.part_entry[j])], j);
  }
  const auto ask = [&](size_t j) {
    const auto [q, src] = fwd_parts_[j];
    if (src != kUnset) prefetch_pair(at(q) - b0, src, m, indexed);
  };
  for (size_t j = 0; j < np && j < kPrefetchAhead; ++j) ask(j);
  for (size_t j = 0; j < np; ++j) {
    if (j + kPrefetchAhead < np) ask(j + kPrefetchAhead);
    const auto [q, src] = fwd_parts_[j];
    const bool entry = src == kUnset;
    const uint32_t l = dg.cell_entries[at(q)];
    // The leader takes the part in.
    if (entry)
      stage0(at(q), l, j);
    else
      take_part(t, at(q) - b0, l, src, 1, j, m, indexed, esum, copies, group_pieces);
    // ... and forwards it to the host's other entries, summed once.
    const uint32_t stage = entry ? 1 : 2;
    const PartBands& pb = part_bands_[j];
    const Box& part = route_.parts[j];
    HostForward& f = forwards_[q];
    ++part_visits_;
    int64_t added = pb.n;
    with_edges(part, pb, [&](const Box& first, const Box& last) {
      bool grew = false;
      if (f.has_pending && f.pending.stage == stage && f.pending.band == 0 &&
          RelayMerger::extends(f.pending.box, first)) {
        --added;
        grew = pb.n == 1;  // the pending piece grew (kept as it was)
      }
      if (!grew) f.pending = Pending{l, stage, pb.last_band, last};
    });
    f.has_pending = f.touched = true;
    ForwardSums& s = f.sums[stage - 1];
    s.touched = true;
    s.added += added;
    const int64_t bytes = mul_of(part.volume(), esum, "network_bytes");
    const int64_t plain = mul_of(pb.plain, esum, "network_bytes");
    add_to(s.bytes, bytes, "forwarded_bytes");
    add_to(s.plain, plain, "network_bytes");
    if (pb.n == 1) continue;
    s.banded = true;
    add_to(s.late, bytes - plain, "max_send_bytes");
    s.mask |= pb.mask;
    band_volumes(part, pb, [&](size_t b, int64_t v) {
      add_to(s.band[b], mul_of(v, esum, "network_bytes"), "network_bytes");
    });
  }
  // fn(f, i, l, e, sd, dd) for each touched leader's forward f (entry l,
  // dense sd) and every other entry e of the host (position i in the cell,
  // dense dd), in the same order on both passes below.
  const auto each_forward = [&](auto&& fn) {
    for (size_t q = 0; q < k; ++q) {
      const HostForward& f = forwards_[q];
      if (!f.touched) continue;
      const uint32_t l = dg.cell_entries[at(q)], sd = t.dt->dense[l];
      for (size_t r = 0; r < k; ++r) {
        if (r == q) continue;
        const uint32_t e = dg.cell_entries[at(r)];
        fn(f, at(r) - b0, l, e, sd, t.dt->dense[e]);
      }
    }
  };
  // Every (entry, leader) pair's streams, first found (in the order below)
  // with the relay_bytes slot of each not yet counted asked for: each
  // lookup in a table of millions of streams missed the cache. The
  // leader's pending piece is the pair's from here (nothing below reads
  // it).
  fwd_refs_.clear();
  each_forward([&](const HostForward&, size_t i, uint32_t l, uint32_t, uint32_t, uint32_t) {
    prefetch_pair(i, l, m, indexed);
  });
  each_forward([&](const HostForward& f, size_t i, uint32_t l, uint32_t, uint32_t sd, uint32_t dd) {
    PairSlots& ps = pair(i, l, m, indexed);
    set_pending(i, ps, f.pending);
    for (uint32_t stage = 1; stage <= 2; ++stage) {
      if (!f.sums[stage - 1].touched) continue;
      const StreamRef& ref = stream_of(i, ps, l, stage, pass_of(ps, indexed));
      fwd_refs_.push_back(static_cast<uint32_t>(&ref - streams_[i].data()));
      if (ref.counted || !p_.track_pairs) continue;
      p_.stage_grow(stage);
      p_.relay_bytes[stage].prefetch(device_pair_key(sd, dd));
    }
  });
  // ... and the sums as relay_part adds them part by part, and the
  // leader's pending piece.
  size_t next_ref = 0;
  each_forward(
      [&](const HostForward& f, size_t i, uint32_t l, uint32_t e, uint32_t sd, uint32_t dd) {
        for (uint32_t stage = 1; stage <= 2; ++stage) {
          const ForwardSums& s = f.sums[stage - 1];
          if (!s.touched) continue;
          StreamRef& ref = streams_[i][fwd_refs_[next_ref++]];
          group_pieces += s.added;
          p_.count_pieces(sd, dd, copies * s.added);
          p_.stage_grow(stage);
          p_.charge(p_.stage_acc[stage], sd, dd, s.bytes, t.dt->host[l] != t.dt->host[e]);
          if (t.dt->process[l] != t.dt->process[e])
            add_to(p_.st.cross_process_bytes, s.bytes, "cross_process_bytes");
          p_.relayed = true;
          p_.last_stage = std::max(p_.last_stage, static_cast<int32_t>(stage));
          add_to(p_.st.forwarded_bytes, s.bytes, "forwarded_bytes");
          if (!ref.counted) {
            if (p_.relay_pairs[stage].insert(sd, dd)) p_.keep_pair();
            if (p_.track_pairs) ref.plain = p_.relay_bytes[stage].index(device_pair_key(sd, dd));
            ref.counted = true;
          }
          if (p_.track_pairs) add_to(p_.relay_bytes[stage].at(ref.plain), s.plain, "network_bytes");
          if (!s.banded) continue;
          add_to(p_.stage_acc[stage][sd].send_late, s.late, "max_send_bytes");
          add_to(p_.stage_acc[stage][dd].recv_late, s.late, "max_recv_bytes");
          if (ref.banded == kUnset) ref.banded = p_.band_index(stage_stream_key(stage, sd, dd));
          BandStream& b = p_.band_streams.at(ref.banded);
          b.mask |= s.mask;
          if (p_.track_pairs)
            for (size_t x = 1; x < kRelayBands; ++x) add_to(b.bytes[x], s.band[x], "network_bytes");
        }
      });
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
