// The Enumerator (plan/enumerate.h): the declaration of the class that
// enumerates the pieces of one tensor, its memo tables and small inline
// rules (reducers, gather order). Its members are defined by concept in
// the other rooms of plan/enumerate/.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "plan/enumerate/cross_layout.h"
#include "plan/enumerate/types.h"

namespace reshard::planning {

class Enumerator {
 public:
  // `pre_reduce`: holder hosts may pre-reduce partial sources;
  // `relay_split`: runs across hosts may be cut into sub-runs (Context).
  explicit Enumerator(const PlanOptions& options, bool pre_reduce = false, bool relay_split = true)
      : options_(options), pre_reduce_(pre_reduce), relay_split_(relay_split) {}
  // Runs layout_parts has cut into sub-runs so far.
  int64_t split_runs() const { return split_runs_; }

  // Pieces received by destination entry `e` (including local copies), in
  // canonical order: source cells row-major, summands ascending, split parts
  // ascending. Throws kInvalidArgument if a needed element has no holder.
  template <class F>
  void recv(const TensorCtx& t, uint32_t e, F&& f);

  // Network pieces sent by source entry `r` (no local copies), grouped per
  // destination entry, each group in canonical order.
  template <class F>
  void send(const TensorCtx& t, uint32_t r, F&& f);

  // Cuts `B` into disjoint regions, each held whole by the same source
  // entries, and calls f(region, holders, n, own_region) for each in
  // canonical order (source cells row-major); `holders` lists every source
  // entry (any summand) whose box contains the region, ascending for
  // explicit layouts, in cell order for tiled ones; own_region is false when
  // the region is exactly a source cell clipped to B. This is the
  // intersection step alone: no sender is chosen.
  template <class F>
  void cover(const TensorCtx& t, const Box& B, F&& f);

  // Destination entries whose box overlaps `q` (non-empty), any order.
  template <class F>
  void dst_overlapping(const TensorCtx& t, const Box& q, F&& f);

  // Relay pieces (stages > 0) that destination entry `l` forwards, grouped
  // per region of its box in canonical order.
  template <class F>
  void forward(const TensorCtx& t, uint32_t l, F&& f);
  template <class F>
  void forward_unmerged(const TensorCtx& t, uint32_t l, F&& f);

  // The route of a region of destination cell c (see Route); false when the cell's entries fetch it
  // single-hop (relays off, a partial layout, no holder listed). A cell is a tiled cell or, in an
  // explicit destination, the entries with equal boxes, or a fragment of
  // overlapping boxes with every entry containing it (Geometry).
  bool route(const TensorCtx& t, size_t c, const Box& region, const uint32_t* holders, size_t n,
             Route& r);
  // The box of destination cell c (non-empty cells of a tiled layout: the
  // box of its entries).
  static Box cell_box(const TensorCtx& t, size_t c) {
    const Geometry& dg = *t.dg;
    if (!dg.tiled) return dg.cell_boxes[c];
    return t.dst->box(dg.cell_entries[dg.cell_offsets[c]]);
  }
  // Reduce routes' rotation within a cell: 0 for a region at the cell's
  // corner, else a hash of its offset in the cell.
  static uint64_t offset_hash(const TensorCtx& t, size_t c, const Box& region) {
    const Box B = cell_box(t, c);
    uint64_t k = 0;
    for (int d = 0; d < region.rank; ++d)
      k = k * 1000003u + static_cast<uint64_t>(region.lo[d] - B.lo[d]);
    return k == 0 ? 0 : ((k ^ (k >> 29)) * 0xbf58476d1ce4e5b9ull) >> 32;
  }
  // Calls f(cell, box, part) for every cell of destination entry e, cells
  // ascending; `part` is true when the cell's box is only part of e's box
  // (a fragment of overlapping explicit boxes). Fragments matter only to
  // routes (relays, reduce-scatter): where no route can apply, the entry's
  // box is enumerated whole, as its first cell (single-hop pieces).
  template <class F>
  void each_cell(const TensorCtx& t, uint32_t e, F&& f) const {
    const Geometry& dg = *t.dg;
    const bool routes = t.T == 1 && (t.S == 1 ? relays(t) : reduces(t));
    if (dg.tiled || !dg.fragmented || !routes ||
        dg.entry_cell_offsets[e + 1] - dg.entry_cell_offsets[e] == 1) {
      f(static_cast<size_t>(dg.cell_of_entry[e]), t.dst->box(e), false);
      return;
    }
    for (uint32_t i = dg.entry_cell_offsets[e]; i < dg.entry_cell_offsets[e + 1]; ++i)
      f(static_cast<size_t>(dg.entry_cells[i]), dg.cell_boxes[dg.entry_cells[i]], true);
  }
  // Among the receiving hosts of `r`: whether `host` is one, its index.
  bool receiving_index(const Route& r, int32_t host, size_t* index) const;
  // Relays inside hosts, tiled source (planner version 16): whether region
  // `idx` of the n covering the destination box is cut into parts that
  // different entries of a host lead (take in and forward), because the n
  // regions do not fall evenly on the most entries the cell has on one host
  // (`members`: CellHosts::max_members; n not a multiple of it) and the
  // region holds at least split_min_bytes per part. The regions then share
  // the host's entries as a broadcast's scatter does: the unit interval cut
  // into `members` equal slots, region k covering [k/n, (k+1)/n), each
  // region cut where a slot begins and each part led by its slot's entry
  // (lead_parts). One leader forwarding a whole region to the M - 1 others
  // sent (M - 1) x its bytes. With TensorCtx::fine_lead the parts need only
  // cross_min_bytes each (fine_lead_cut). The statistics' per-cell
  // arithmetic (core/src/plan/stats.cc) leaves such cells to the
  // enumeration.
  bool relay_cut(const TensorCtx& t, int64_t members, const Box& region, uint64_t n) const {
    if (members < 2 || n == 0 || n % static_cast<uint64_t>(members) == 0 ||
        options_.split_min_bytes <= 0)
      return false;
    const int64_t per = (members + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
    // By division: split_min_bytes may be anything up to INT64_MAX.
    if (region.volume() * t.esize / 2 / per >= options_.split_min_bytes) return true;
    return t.fine_lead && fine_lead_cut(t, members, region, n);
  }
  // Whether relay_cut cuts the region with TensorCtx::fine_lead on: each
  // part at least cross_min_bytes.
  bool fine_lead_cut(const TensorCtx& t, int64_t members, const Box& region, uint64_t n) const {
    if (members < 2 || n == 0 || n % static_cast<uint64_t>(members) == 0 ||
        options_.split_min_bytes <= 0)
      return false;
    const int64_t per = (members + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
    return region.volume() * t.esize / per >= cross_min_bytes(options_);
  }
  // Whether TensorCtx::fine_lead would cut some region of the tensor that
  // relay_cut leaves whole (Context::decide_lead_cut tries those groups):
  // its cells' covers walked until one is found.
  bool fine_lead_differs(const TensorCtx& t);
  // Cross routes: whether part j arrives at the receiving host of index
  // `idx` in stage 0 (a direct part, or its entry host).
  static bool arrives_first(const Route& r, size_t j, size_t idx) {
    return !r.cross || r.part_entry[j] < 0 || static_cast<size_t>(r.part_entry[j]) == idx;
  }
  // The reducer of part j (reduce routes): parts go round-robin over the
  // cell's hosts (CellHosts order), then over the entries within a host, from
  // the route's rotation, so no host reduces more than ceil(parts / hosts).
  uint32_t reducer(const TensorCtx&, const Route& r, size_t j) const {
    const uint64_t q = j + r.rot, nh = r.cell_end - r.cell_begin;
    const size_t hi = r.cell_begin + static_cast<size_t>(q % nh);
    const uint32_t b = ch_->member_offsets[hi], end = ch_->member_offsets[hi + 1];
    return ch_->members[b + static_cast<uint32_t>((q / nh) % (end - b))];
  }
  // The CellHosts index of destination entry e's host in cell c (one of e's).
  size_t host_slot(const TensorCtx& t, uint32_t e, size_t c) {
    const CellHosts& ch = cell_hosts(t);
    const auto b = ch.hosts.begin() + static_cast<std::ptrdiff_t>(ch.cell_offsets[c]);
    const auto end = ch.hosts.begin() + static_cast<std::ptrdiff_t>(ch.cell_offsets[c + 1]);
    return static_cast<size_t>(std::lower_bound(b, end, t.dt->host[e]) - ch.hosts.begin());
  }
  // Reduce routes with relays: the entry on the host at CellHosts index
  // `hi` that takes part j in from its reducer on another host and fans it
  // out inside the host (the gather enters each host once).
  uint32_t gather_leader(const Route& r, size_t hi, size_t j) const {
    const uint32_t b = ch_->member_offsets[hi], end = ch_->member_offsets[hi + 1];
    return ch_->members[b + away_rank(r, hi, j) % (end - b)];
  }
  // Reduce routes: the rank of part j among the parts whose reducer is not
  // on the cell's host at CellHosts index `hi` (j + rot where hi is not one
  // of the cell's hosts, or the cell has one). A host's gather leaders and
  // pre-reduction owners rotate over its devices by this rank: the reducer's
  // host is (j + rot) mod nh, so rotating by j + rot itself aliases with it
  // (with 2 hosts, the parts a host takes from the other all have one
  // parity, and half its devices led and owned two parts each, the others
  // none: planner version 15, a psum in place over 2 hosts of 8 at 1.23x
  // the busiest device's 2 (n - 1) / n all-reduce volume).
  uint64_t away_rank(const Route& r, size_t hi, size_t j) const {
    const uint64_t q = j + r.rot, nh = r.cell_end - r.cell_begin;
    if (nh < 2 || hi < r.cell_begin || hi >= r.cell_end) return q;
    const uint64_t i = hi - r.cell_begin, m = q % nh;
    return q / nh * (nh - 1) + m - (m > i ? 1 : 0);
  }
  // The reduce-scatter rule for a region of a partial source (see Route).
  bool reduce_route(const TensorCtx& t, size_t c, const Box& region, const uint32_t* holders,
                    size_t n, Route& r);
  // Cells below two parts of the reduce-scatter's floor (planner version
  // 14): whether the whole region as one part, reduced by one entry and
  // gathered along a chain or tree of the cell's hosts, beats single-hop —
  // with α = 0 on the busiest NIC's bytes, else by the α–β model (stages
  // add up; each stage takes its busiest device's time). Sets r.fanout.
  bool one_part(const TensorCtx& t, size_t c, const Box& region, const uint32_t* holders, size_t n,
                uint64_t rot, Route& r);
  // Destination entries whose box overlaps source entry `src`'s (what its
  // holder device sends single-hop), memoised per tensor.
  int64_t reach(const TensorCtx& t, uint32_t src);
  // The gather's fan-out for `parts` parts of `part_bytes` over cell c's
  // hosts (Route::fanout): 0 (the star) where the parts are at least the
  // hosts; else with α = 0 a chain (1), otherwise the tree whose levels
  // take least time by the α–β model.
  uint32_t gather_fanout(size_t c, double part_bytes, size_t parts) const;
  // The most levels a gather tree has (a chain longer than that becomes the
  // tree of least fan-out within it): 32 hops.
  static constexpr uint32_t kMaxGatherLevels = 32;
  // Levels of a tree of fan-out k over nh hosts (its root the reducer's).
  static uint32_t gather_levels(size_t nh, size_t k) {
    if (k <= 1) return nh > 0 ? static_cast<uint32_t>(std::min<size_t>(nh - 1, UINT32_MAX)) : 0;
    uint32_t d = 0;
    for (size_t reach = 1, level = 1; reach < nh; ++d) {
      level *= k;
      reach += level;
    }
    return d;
  }
  // Reduce routes with relays: part j's gather order over the cell's hosts
  // (the reducer's first, then cyclically in CellHosts order) — the position
  // of CellHosts index hi, and the index at a position.
  size_t gather_pos(const Route& r, size_t hi, size_t j) const {
    const size_t nh = r.cell_end - r.cell_begin;
    return (hi - r.cell_begin + nh - (j + r.rot) % nh) % nh;
  }
  size_t gather_host(const Route& r, size_t pos, size_t j) const {
    const size_t nh = r.cell_end - r.cell_begin;
    return r.cell_begin + (pos + (j + r.rot) % nh) % nh;
  }
  // The level of position p in the gather tree (0: the reducer's host; the
  // star: 1 for every other host), and the position it receives from.
  static uint32_t gather_depth(const Route& r, size_t p) {
    if (p == 0) return 0;
    if (r.fanout == 0) return 1;
    uint32_t d = 0;
    for (; p > 0; ++d) p = (p - 1) / r.fanout;
    return d;
  }
  static size_t gather_parent(const Route& r, size_t p) {
    return r.fanout == 0 ? 0 : (p - 1) / r.fanout;
  }
  // Pre-reduction on the holders' hosts (with relays and reduce-scatter):
  // the pieces of part j of reduce route `r` that bring its summands to its
  // reducer, into pre_. Starts from what the reducer would fetch single-hop
  // (assign); the whole summands sent from holder hosts other than the
  // reducer's (H of them, each sending k_h) are then reduced on the way:
  //  - star (planner version 11): every host with k_h >= 2 reduces its
  //    summands into the Scratch of one of its holders, the part's *owner*
  //    there (the i-th of the k_h in summand order, i = away_rank mod k_h:
  //    rotating over the parts the host sends away), its own summand by a
  //    local piece
  //    (Emitted::scratch 1, stage 0), and the owner sends the scratch to
  //    the reducer once (Emitted::scratch 2, stage 1); a host with one
  //    summand sends it in stage 0. The reducer's host takes in H copies.
  //  - chain (planner version 13): the hosts among the H that host no
  //    entry of the cell (L of them, L >= 2; the others keep the star: a
  //    host of the cell takes in the gather and reduces parts of its own,
  //    so moving the copies into the reducer's host onto it balances
  //    nothing, as in a psum in place) in ascending order,
  //    rotated to start at the ((j + rot) mod L)-th, each host's summands
  //    into its owner's scratch (stage 0; the owner the
  //    ((j + rot) / L mod k_h)-th holder, so that a host's owners rotate
  //    over the parts where it has the same place in the chain; a cell of
  //    one entry starts at the (G + (c mod k)) mod L-th, its owners the
  //    (c mod k_h)-th: see the chain below); the first
  //    host's partial (its scratch, or its one summand: scratch 1 across
  //    hosts, stage 0) goes into the next host's scratch (Emitted::scratch
  //    3), which adds it to its own, and so on; the last host sends one
  //    fully reduced partial to the reducer (scratch 2). Link i (from 0)
  //    runs in stage i + s0, s0 = 1 when some chained host has 2 or more
  //    summands (their scratch is complete after stage 0), else 0; the last
  //    link, into the reducer, in L - 1 + s0 for every part of the route (a
  //    destination entry's reductions must end before the gather copies
  //    into it, whichever parts it reduces). The reducer's host takes in one
  //    copy; each holder host sends the part once and takes it in unless
  //    it starts the chain: rotating the start over parts balances the
  //    holder hosts' ingress (each sends V and takes in about V (L - 1)/L).
  // The chain adds L - 1 stages to the star (whose last contribution comes
  // in stage s0) and saves L - 1 copies of the part's B bytes through the
  // reducer's NIC, each costing B / inter_host_bytes_per_second: the route
  // chains when its smallest part's bytes are above what one α buys between
  // hosts, alpha_seconds x inter_host_bytes_per_second (always with α 0;
  // smaller parts keep the star, whose fewer stages cost less than the
  // bandwidth time it adds).
  // Holders on the reducer's host send their summands to it in stage 0
  // (the chain's end), as do holders of parts of summands (a summand
  // split over replicas). Returns the stage in which the reducer receives
  // the part's last contribution (0: no pre-reduction). A pure function of
  // (tensor, cell, region, holders), like the route.
  uint32_t reduce_part(const TensorCtx& t, const Route& r, size_t j, const uint32_t* holders,
                       size_t n, bool cut);
  // The gather's offset for part j of reduce route r: the stage in which
  // its reducer receives the last contribution to the part (reduce_part; 0
  // without pre-reduction, 1 after a star, the chain's last link's stage
  // after a chain). The reduced part leaves its reducer in stage
  // 1 + part_shift and fans out inside other hosts in 2 + part_shift.
  // Worked out once per part of the route.
  uint32_t part_shift(const TensorCtx& t, const Route& r, size_t j, const uint32_t* holders,
                      size_t n) {
    if (!r.pre_reduce || !options_.relays) return 0;
    if (r.shift.size() != r.parts.size()) r.shift.assign(r.parts.size(), Route::kUnknownShift);
    if (r.shift[j] == Route::kUnknownShift) r.shift[j] = reduce_part(t, r, j, holders, n, true);
    return r.shift[j];
  }
  // The gather's offset shared by every part of every region of destination
  // cell c (box B): the largest part_shift among them (0 without
  // pre-reduction). An entry's reductions, whichever regions and parts it
  // reduces, end in or before this stage, and every gather piece from or
  // into an entry of the cell comes after it: executors that order work by
  // (stage, round) alone (execute_host) need each destination entry's
  // reduction finished before a later stage copies from or into it.
  // Fragmented destinations (an entry in several cells) never pre-reduce
  // (reduce_route), so the cell's entries reduce nothing elsewhere.
  uint32_t cell_shift(const TensorCtx& t, size_t c, const Box& B);
  // The leader of part j on the host at CellHosts index `hi`.
  uint32_t leader(const Route& r, size_t hi, size_t j) const;
  // The leader of a run of lead `lead` (Route::runs) on that host.
  uint32_t run_leader(const Route& r, size_t hi, uint32_t lead) const;
  // Relays inside hosts, tiled source: the cover indices of cell c's
  // regions that some holder on one of the cell's own hosts holds, as
  // sorted (host, index) pairs (where source and destination devices
  // coincide; empty elsewhere). Memoised per geometries, shape and cell.
  const std::vector<std::pair<int32_t, uint64_t>>& held_on_hosts(const TensorCtx& t, size_t c);
  // The block, of m on `host`, whose leader takes in the region at cover
  // index idx of n: blocks of consecutive regions among those that enter
  // the host, the ones `held` lists on it left out. Counting them too gave
  // the host's entries unequal shares of its ingress (FSDP over 4 hosts ->
  // dp8 x tp4 on the same devices: the row-parallel cells' 24 entering
  // regions split 16 and 8 between a host's 2 entries).
  static uint64_t lead_block(const std::vector<std::pair<int32_t, uint64_t>>* held, int32_t host,
                             uint64_t idx, uint64_t n, uint64_t m) {
    return lead_block_on(held_by(held, host, n), host, idx, n, m);
  }
  // The entries of `held` on `host` with an index below n, as [first,
  // second): what lead_block reads of it (the statistics find them once per
  // host, not once per region).
  using HeldRange =
      std::pair<const std::pair<int32_t, uint64_t>*, const std::pair<int32_t, uint64_t>*>;
  static HeldRange held_by(const std::vector<std::pair<int32_t, uint64_t>>* held, int32_t host,
                           uint64_t n) {
    if (held == nullptr || held->empty()) return {nullptr, nullptr};
    const auto lo = std::lower_bound(held->data(), held->data() + held->size(),
                                     std::make_pair(host, uint64_t{0}));
    const auto hi = std::lower_bound(lo, held->data() + held->size(), std::make_pair(host, n));
    return {lo, hi};
  }
  // lead_block with held_by(held, host, n) given.
  static uint64_t lead_block_on(HeldRange r, int32_t host, uint64_t idx, uint64_t n, uint64_t m) {
    const auto total = static_cast<uint64_t>(r.second - r.first);
    if (total > 0 && total < n) {
      const auto before = static_cast<uint64_t>(
          std::lower_bound(r.first, r.second, std::make_pair(host, idx)) - r.first);
      return std::min(m - 1, (idx - before) * m / (n - total));
    }
    return idx * m / n;
  }
  // The CellHosts index of the index-th receiving host.
  size_t receiving_host(const Route& r, size_t index) const;
  // receiving_index and receiving_host of every host of the route's cell
  // at once, in one pass (the global statistics ask them of each entry
  // and part, which costs the cell's hosts times the holders' hosts):
  // index_of[hi - r.cell_begin] is the receiving index of the host at
  // CellHosts index hi (-1: a holder's host), host_of[k] the CellHosts
  // index of the k-th receiving host.
  void receiving_table(const Route& r, std::vector<int64_t>& index_of,
                       std::vector<size_t>& host_of) const;
  // Whether some cell of the tensor spans at least 2 and no more hosts than
  // the source and crosses by cross_gate (the statistics' fast path applies
  // to no such tensor).
  bool crosses_few(const TensorCtx& t);
  // Whether some cell of the tensor needed on at least 2 hosts is laid out
  // by the device rule with TensorCtx::device_cross on
  // (CrossLayout::for_devices; its plan then differs:
  // Context::decide_device_cross tries those groups).
  bool device_crosses(const TensorCtx& t);
  // The device rule over the whole tensor (gate_may_cross, cells on unlike
  // hosts): whether single-hop would load a holder device, summed over the
  // cells on several hosts (each region once per host of its cell), above
  // kCrossGain x what a receiving device takes in. Past 2^16 (cell, entry)
  // pairs, false: the rule then looks at each cell alone.
  bool device_overloaded(const TensorCtx& t);
  // What a receiving device of cell k (box B) takes in: the cell over its
  // fewest entries on one host, which lead equal shares of what enters the
  // host (§5.1).
  double device_intake(size_t k, const Box& B) const {
    return static_cast<double>(B.volume()) / std::max<uint32_t>(ch_->min_members[k], 1);
  }
  // Whether f(cell, cell_begin, cell_end) holds for some non-empty cell of
  // the tensor on at least 2 and no more hosts than the source spans.
  template <class F>
  bool any_few_cell(const TensorCtx& t, F&& f);
  // Pieces of entry `e` for `region` along its route, to f. The global
  // statistics mirror it, assign (one summand) and recv's relay merging for
  // whole cells (core/src/plan/stats.cc, enum_cell): a change here needs the
  // same there (PlanStatsFastPath compares the two). `shift`: cell_shift of
  // the region's cell, for the gather's stages (send() passes 0: it keeps
  // no gather piece).
  template <class F>
  void routed_recv(const TensorCtx& t, uint32_t e, const Route& r, const Box& region,
                   const uint32_t* holders, size_t n, bool own, uint32_t shift, F&& f);

  // Transit relays: the pieces destination entry l takes into its
  // scratch (Emitted::scratch 4) and forwards from it (scratch 5) for the
  // entries it transits for, donor by donor ascending, each in recv order.
  template <class F>
  void transit_in(const TensorCtx& t, uint32_t l, F&& f);
  // Sending-side transit relays: the pieces source entry u takes into its
  // scratch (Emitted::scratch 6) and sends out from it (scratch 7) for the
  // source entries of its host it transits for, donor by donor ascending.
  template <class F>
  void send_transit_in(const TensorCtx& t, uint32_t u, F&& f);
  // Receiving-side transits on source devices (TransitShare::cross): the
  // pieces source entry u takes into its scratch (Emitted::scratch 6) from
  // other hosts and forwards from it (scratch 7) to the destination entries
  // of its host it transits for, donor by donor ascending, in recv order.
  template <class F>
  void cross_transit_in(const TensorCtx& t, uint32_t u, F&& f);
  // Both: the pieces of the donors' `recv` into transit entry l's scratch
  // (Emitted::scratch `into`) and out of it (into + 1).
  template <class F>
  void through_transit(const TensorCtx& t,
                       const std::unordered_map<uint32_t, std::vector<uint32_t>>& donors,
                       uint32_t l, uint8_t into, F&& f);

  // Naive variant of recv: finds candidate source entries by scanning all of
  // them (the quadratic baseline).
  template <class F>
  void recv_naive(const TensorCtx& t, uint32_t e, F&& f);

 private:
  // Source choice (§3) for destination entry e, each crossing piece then
  // cut by the tensor's transit relays where e donates (transit_cut).
  template <class F>
  void assign(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* holders, size_t n,
              bool own_region, F&& f);
  template <class F>
  void assign_one(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* holders,
                  size_t n, bool own_region, F&& f);
  // Transit relays: crossing piece x of destination entry e cut along its
  // first dimension with at least shares + 1 elements at the shares'
  // fractions; the first part stays x, each share's part, in relay bands,
  // enters its transit entry's scratch (Emitted::scratch 4, stage 0) and
  // is forwarded to e (scratch 5, stage 1). Uncut (x alone) where the
  // moved bytes are below cross_min_bytes or no dimension is long enough.
  template <class F>
  void transit_cut(const TensorCtx& t, uint32_t e, const std::vector<TransitShare>* shares,
                   const std::vector<TransitShare>* out, const Emitted& x, F&& f);
  // The holders part j of route r is taken from: those on the part's host
  // where a cross route names one (holders_on, into hsel_), else all n.
  std::pair<const uint32_t*, size_t> part_holders(const TensorCtx& t, const Route& r, size_t j,
                                                  const uint32_t* holders, size_t n) {
    if (!r.cross || r.part_host[j] < 0) return {holders, n};
    holders_on(t, holders, n, r.part_host[j]);
    return {hsel_.data(), hsel_.size()};
  }
  // Relays inside a host into a cell of several entries (routed_recv,
  // forward_unmerged): leader l's transit shares for part j of route r
  // (TransitTable::lead_shares), or null where it has none or passes the
  // part on across hosts or takes it in a later stage (`entry` false).
  const std::vector<TransitShare>* lead_transit(const TensorCtx& t, uint32_t l, const Route& r,
                                                size_t j, bool entry) const {
    if (t.transit == nullptr || !entry || (r.cross && r.part_entry[j] >= 0)) return nullptr;
    return t.transit->lead_shares_of(l);
  }
  // What leader l takes in of `part` from holders hs with transit shares:
  // source choice (assign_one), each crossing piece then cut by `shares`
  // (transit_cut): pieces into l (stage 0, in relay bands of each), into a
  // transit's scratch (Emitted::scratch 4, or 6 for a transit of the other
  // layout) and from it to l (5 or 7). The mates
  // and l's forwards derive theirs from the same call: the pieces into l
  // from l, the scratch's from the transit.
  template <class F>
  void lead_in(const TensorCtx& t, uint32_t l, const Box& part, const uint32_t* hs, size_t nh,
               bool cut, const std::vector<TransitShare>& shares, F&& f);
  template <class F>
  bool split(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* R, size_t nr,
             F&& f);
  template <class F>
  void refine(const TensorCtx& t, const Box& B, const std::vector<uint32_t>& cands, F&& f);
  [[noreturn]] void uncovered(const TensorCtx& t, uint32_t e, const Box& region, int32_t s);

  const CellHosts& cell_hosts(const TensorCtx& t);
  const CellShares& cell_shares(const TensorCtx& t, size_t c, size_t cell_begin, size_t cell_end);
  // Appends to volumes_ the (holder host, volume) of cell c's cover; false
  // when a region has no holder or one on a host of the cell.
  bool cell_volumes(const TensorCtx& t, size_t c, size_t cell_begin, size_t cell_end);
  // Sums volumes_ per host (sorted by host).
  void merge_volumes();
  // Cuts a cross route's region into shares and parts (see CellShares).
  void cross_parts(const TensorCtx& t, size_t c, const Box& region, const uint32_t* holders,
                   size_t n, Route& r);
  // Whether, by the α–β model, a cross route's stages (r, just cut) take
  // longer for this region than each receiving host fetching it from the
  // holders (single-hop into the host, then inside it): the stages add up.
  bool cross_slower(const TensorCtx& t, size_t c, const Box& region, size_t n,
                    const Route& r) const;
  // Whether cell c's group, on no more receiving hosts than the source spans,
  // crosses (CrossLayout::crosses, a disjoint group); memoised per tensor.
  bool cross_gate(const TensorCtx& t, size_t c, size_t cell_begin, size_t cell_end);
  // A bound cross_gate checks first: false when no holder host's entries
  // hold enough of the group for single-hop to overload it (or the group's
  // hosts hold some of it); sets same_hosts_ (every cell on c's hosts).
  bool gate_may_cross(const TensorCtx& t, size_t c, size_t cell_begin, size_t cell_end);
  // The cross layout of cell c's group (see CrossLayout), built on first use.
  const CrossLayout& cross_layout(const TensorCtx& t, size_t c, size_t cell_begin, size_t cell_end);
  // Cuts a cross route's region by its group's layout: 1 with r's parts
  // set, 0 when the group goes single-hop, -1 when no layout applies.
  int layout_parts(const TensorCtx& t, size_t c, const Box& region, Route& r);
  // Relays inside hosts: region k of n cut at the starts of `slots` equal
  // slots, into r.parts with their slots in r.part_lead (relay_cut).
  static void lead_parts(const Box& region, uint64_t k, uint64_t n, int64_t slots, Route& r);
  // Holders of `holders` on `host` (all of them for host -1), into hsel_.
  void holders_on(const TensorCtx& t, const uint32_t* holders, size_t n, int32_t host);

  const PlanOptions& options_;
  bool pre_reduce_ = false;
  bool relay_split_ = true;
  int64_t split_runs_ = 0;
  // layout_parts: the region's runs before their cut into sub-runs.
  struct RunSpan {
    int32_t host;
    int64_t from, count;
    int32_t entry;
  };
  std::vector<RunSpan> runs_;
  // Reduce routes for partial tensor t (PlanOptions::reduce_scatter and
  // TensorCtx::reduce), and pre-reduction in them (Context::pre_reduce too).
  bool reduces(const TensorCtx& t) const {
    return options_.reduce_scatter && t.reduce != TensorCtx::kSingleHop;
  }
  // Relays for a tensor of one summand (TensorCtx::single_hop).
  bool relays(const TensorCtx& t) const { return options_.relays && !t.single_hop; }
  bool pre_reduces(const TensorCtx& t) const {
    return pre_reduce_ && t.reduce == TensorCtx::kPreReduce;
  }
  std::map<const Geometry*, CellHosts> cell_hosts_;
  const Geometry* last_geo_ = nullptr;  // cell_hosts' last geometry ...
  const CellHosts* ch_ = nullptr;       // ... and its hosts
  Route route_;
  Route shift_route_;  // cell_shift's, beside route_ in use
  // route() on a tiled source: per dimension, the source's shard extent
  // (`chunk`) and the source shards [a, a + span) overlapping the box of
  // destination cell `c` of tensor *t, the last cell routed. Routes come
  // region by region of one cell: the divisions behind these run once per
  // cell, not once per region (they were most of route()'s time).
  struct CoverDims {
    const TensorCtx* t = nullptr;
    size_t c = 0;
    std::array<int64_t, kMaxRank> chunk{}, a{}, span{};
  } cover_dims_;
  const CoverDims& cover_dims(const TensorCtx& t, size_t c);
  // cell_shares(): per (source, destination) geometry pair, per cell.
  // Keyed by the tensor's shape too: a Geometry is shared by tensors of
  // every shape on one mesh and spec, and the volumes follow the shape.
  using GeoKey = std::tuple<const Geometry*, const Geometry*, std::vector<int64_t>>;
  static GeoKey geo_key(const TensorCtx& t) { return {t.sg, t.dg, t.src->shape()}; }
  std::map<GeoKey, std::unordered_map<size_t, CellShares>> shares_;
  // Per geometry pair: whether every cell is on the same hosts (and none
  // holds any of its cells), and then the shares they all use.
  struct UniformShares {
    bool uniform = false;
    CellShares shares;
  };
  std::map<GeoKey, UniformShares> uniform_shares_;
  std::unique_ptr<Enumerator> share_en_;  // covers inside a cover
  // held_on_hosts(): per (geometries and shape, source hosts, cell), and
  // its last answer.
  std::map<std::tuple<GeoKey, const GeoTopo*, size_t>, std::vector<std::pair<int32_t, uint64_t>>>
      held_;
  struct HeldLast {
    const Geometry *sg = nullptr, *dg = nullptr;
    const GeoTopo* st = nullptr;
    size_t c = 0;
    std::vector<int64_t> shape;
    const std::vector<std::pair<int32_t, uint64_t>>* held = nullptr;
  } held_last_;
  // cross_layout(): per (geometries and shape, element size, cell or
  // SIZE_MAX for a uniform group, TensorCtx::device_cross and joint_entry).
  std::map<std::tuple<GeoKey, int64_t, size_t, bool, bool>, CrossLayout> layouts_;
  std::vector<Emitted> pre_;                  // reduce_part()
  const TensorSpec* reach_tensor_ = nullptr;  // reach()
  std::unordered_map<uint32_t, int64_t> reach_;
  std::vector<std::pair<int32_t, uint32_t>> pre_hosts_;  // (source host, index in pre_)
  std::vector<size_t> chain_;     // reduce_part(): host group starts in pre_hosts_
  std::vector<size_t> links_;     // reduce_part(): the groups that may chain
  std::vector<uint32_t> owners_;  // reduce_part(): each chained host's owner (in bands)
  // cross_gate(): per key (see there) whether the group is uniform and
  // crosses, and its last answer: tensor, cell (SIZE_MAX: every cell).
  struct GateHash {
    size_t operator()(const std::vector<intptr_t>& k) const {
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (intptr_t x : k) h = (h ^ static_cast<uint64_t>(x)) * 0xbf58476d1ce4e5b9ull;
      return static_cast<size_t>(h ^ (h >> 31));
    }
  };
  std::unordered_map<std::vector<intptr_t>, std::pair<bool, bool>, GateHash> gates_;
  std::vector<intptr_t> gate_key_;
  bool same_hosts_ = false;
  const TensorSpec* gate_spec_ = nullptr;
  const Geometry* gate_geo_ = nullptr;
  size_t gate_cell_ = 0;
  bool gate_device_ = false;
  bool gate_ = false;
  std::vector<std::pair<int32_t, double>> volumes_;
  std::vector<int32_t> region_hosts_;
  std::vector<int64_t> forwarding_;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> hsel_;
  std::vector<Box> share_boxes_, entry_boxes_;
  std::vector<uint32_t> cands_, sel_, dsts_, near_, refined_;
  std::vector<std::vector<uint32_t>> active_;  // refine(): candidates per slab
  // send() on an explicit source: the network pieces of each destination
  // entry of tensor *sent_tensor_ asked so far, sorted by source entry.
  const TensorCtx* sent_tensor_ = nullptr;
  std::unordered_map<uint32_t, std::vector<Emitted>> sent_;
  std::vector<int64_t> bounds_[kMaxRank];
};

}  // namespace reshard::planning
