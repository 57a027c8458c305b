// The data of the enumeration (plan/enumerate.h): per-tensor context
// (GeoTopo, TensorCtx), what it reports per piece (Emitted), relay and
// reduction bands, the hosts of each destination cell (CellHosts), a
// region's route (Route), the merging of relay pieces (RelayMerger) and
// the tests' overrides of the reduce route's choices (ChoiceOverride).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "layout/geometry.h"
#include "reshard/error.h"
#include "reshard/plan.h"

namespace reshard::planning {

// TensorCtx::joint_entry's bound on the pieces a geometry pair's like
// tensors may be cut into.
inline constexpr int64_t kJointEntryPieces = int64_t{1} << 22;
// Context::decide_joint_entry tries plans of at most this many single-hop
// pieces (every tensor's stats_visits): each try is a whole pass.
inline constexpr int64_t kJointTrialPieces = int64_t{1} << 20;

// Per-entry topology of one geometry, computed once per make_plan call.
struct GeoTopo {
  std::vector<int32_t> process;  // per entry
  std::vector<int32_t> host;     // per entry
  std::vector<uint32_t> dense;   // per entry: index of its device in the plan's device list
  std::vector<int32_t> procs;    // sorted unique processes
  std::vector<uint32_t> proc_offsets, proc_entries;  // CSR process -> entries (ascending)
  int32_t num_hosts = 0;                             // distinct hosts of the entries
  int64_t max_host_entries = 0;                      // the most entries on one host
};

// Transit relays (Context::decide_transit, Enumerator::transit_cut): per
// destination entry whose NIC group takes in more of its host's crossing
// bytes than its share of the host's NICs, the entries of other devices of
// its host (with NICs to spare) that take part of each crossing piece in
// over their own NICs into a copy-staging scratch (stage 0) and forward it
// to the entry inside the host (stage 1). A share is the fraction [lo, hi)
// of every crossing piece's extent along its cut dimension; [0, first lo)
// stays direct. A pure function of the tensor's layouts, shape and the
// topology: every process builds the same table.
struct TransitShare {
  uint32_t via = 0;  // the transit entry (of another device of the host; `cross` below)
  double lo = 0, hi = 0;
  // The transit is an entry of the other layout: a device of the host with
  // no entry of this side and a NIC to spare (a source device of the
  // receiving host, a destination device of the sending host), `via` a
  // source entry on the receiving side and a destination entry on the
  // sending side. Its pieces are those of the other side's transits
  // (Emitted::scratch 6 and 7 on the receiving side, 4 and 5 on the
  // sending side), the transit on the other host.
  bool cross = false;
};
// The sending side likewise (send_shares): per source entry whose NIC group
// sends out more than its share of its host's crossing bytes, source
// entries of other devices of its host that take part of each crossing
// piece into their scratch inside the host (stage 0) and send it out
// (stage 1); its shares take the bottom of the piece ([0, last hi)), the
// receiving side's the top.
struct TransitTable {
  std::unordered_map<uint32_t, std::vector<TransitShare>> shares;       // donor entry -> shares
  std::unordered_map<uint32_t, std::vector<uint32_t>> donors;           // transit entry -> donors
  std::unordered_map<uint32_t, std::vector<TransitShare>> send_shares;  // source entry -> shares
  std::unordered_map<uint32_t, std::vector<uint32_t>>
      send_donors;  // transit source entry -> donors
  // Receiving-side transits on source devices (TransitShare::cross): a
  // transit source entry -> the destination entries of its host it
  // transits for. The sending side's (destination devices of the sending
  // host) are in `donors`: a transit destination entry -> the destination
  // entries (on other hosts) whose pieces from its host it carries.
  std::unordered_map<uint32_t, std::vector<uint32_t>> cross_donors;
  // Cells of several entries on a receiving host (relays inside it, §5.1):
  // a leader's shares of the crossing pieces it takes in to pass on; the
  // transit forwards its part to the leader and to every other entry of the
  // cell on the host (Enumerator::lead_in), so its scratch is written once
  // and read by several forwards (the mates are in `donors` or
  // `cross_donors` with the leader). Apart from `shares`: assign never cuts
  // these.
  std::unordered_map<uint32_t, std::vector<TransitShare>> lead_shares;
  static const std::vector<TransitShare>* find(
      const std::unordered_map<uint32_t, std::vector<TransitShare>>& m, uint32_t e) {
    const auto it = m.find(e);
    return it == m.end() ? nullptr : &it->second;
  }
  const std::vector<TransitShare>* shares_of(uint32_t e) const { return find(shares, e); }
  const std::vector<TransitShare>* send_shares_of(uint32_t r) const { return find(send_shares, r); }
  const std::vector<TransitShare>* lead_shares_of(uint32_t e) const { return find(lead_shares, e); }
};

struct TensorCtx {
  uint32_t index = 0;
  const TensorSpec* spec = nullptr;
  const Layout* src = nullptr;
  const Layout* dst = nullptr;
  const Geometry* sg = nullptr;
  const Geometry* dg = nullptr;
  const GeoTopo* st = nullptr;
  const GeoTopo* dt = nullptr;
  int64_t esize = 1;
  int32_t S = 1;      // source summands
  int32_t T = 1;      // destination summands
  std::string field;  // "tensors[i]"
  // Partial sources, how far the reduce routes go (Context::decide_reductions,
  // with PlanOptions::reduce_scatter on): kPreReduce, reduce-scatter with
  // pre-reduction on the holders' hosts (where Context::pre_reduce allows);
  // kReduceScatter, without it; kSingleHop, no reduce route (every entry
  // fetches every summand it lacks).
  enum Reduce : uint8_t { kSingleHop = 0, kReduceScatter = 1, kPreReduce = 2 };
  Reduce reduce = kPreReduce;
  // The bytes of every tensor with this tensor's source and destination
  // geometries (whatever their shapes) over this tensor's own (1 for a
  // tensor alone, 512 for one of 512 like biases): their pieces between the
  // same devices travel in the same messages, so the α a relay adds is
  // shared by them all (CrossLayout's chunked sequence; Context::build).
  double share = 1;
  // The cross layout's entry runs count every like tensor's bytes (share)
  // against split_min_bytes a run, and its sub-runs against
  // cross_min_bytes: their runs between the same devices travel in the
  // same messages. Set by Context::build where the pieces that can make
  // stay bounded (kJointEntryPieces: a run per receiving host of every
  // piece the like tensors have single-hop); on small plans kept only
  // where the estimate is not lower without it (decide_joint_entry).
  bool joint_entry = false;
  // Groups on no more receiving hosts than the source spans also cross,
  // laid out for devices, where single-hop would load a source *device*
  // above kCrossGain times what a receiving device takes in
  // (CrossLayout::for_devices): set per group of like tensors where that
  // lowers the whole plan's α–β estimate (Context::decide_device_cross).
  bool device_cross = false;
  // No cell crosses by cross_gate (neither the host rule nor the device
  // rule): each receiving host fetches a cell from its holders, and the
  // group's transit relays spread that ingress over the host's NICs. Set
  // per group of like tensors with a transit table of its own where that
  // lowers the whole plan's α–β estimate (Context::decide_transit): a
  // holder host the host rule spares may have NICs to spare while the
  // leader's device would take a whole cell through one NIC.
  bool cross_off = false;
  // Pre-reduction under a staging budget (Context::decide_pre_reduce): each
  // part a holder host pre-reduces in a star is cut into this many bands
  // (reduce_band_cut), band k's summands written into the owner's scratch
  // in stage k and sent on in stage k + 1, so that a scratch lives two
  // stages and one two stages later reuses its bytes (plan/scratch_layout.h);
  // such parts never chain. 1: one band, the whole part in stage 0. Set per
  // group of like tensors.
  uint32_t reduce_bands = 1;
  // No route at all (Context::decide_single_hop): the tensor's pieces go
  // straight from a holder to each destination entry, as with relays and
  // reduce-scatter off, where that single-hop plan is faster by the whole
  // plan's α–β estimate. Set per group of like tensors; a partial tensor
  // takes kSingleHop besides.
  bool single_hop = false;
  // Relays inside hosts (Enumerator::relay_cut): regions that do not fall
  // evenly on a host's entries are cut into lead parts down to
  // cross_min_bytes a part rather than from twice split_min_bytes. One
  // leader per region puts the ingress of every like tensor on the same
  // entries (the first of each cell's entries on Qwen3's attention, EP → dp8 ×
  // tp8 on one GB200 host: 8 of 64 NICs); the parts spread it over all of
  // them at an α a part. Set per group of like tensors where that lowers the
  // whole plan's α–β estimate (Context::decide_lead_cut).
  bool fine_lead = false;
  // Relay bands (relay_bands) of relay_chunk_bytes times this: a device
  // behind g NICs moves a band of c bytes in 1/g of the time one NIC takes,
  // so its α weighs g times more; fewer, larger bands pay fewer α where the
  // pipeline gains less than they cost. Set for the whole plan where that
  // lowers its α–β estimate (Context::decide_band_scale).
  uint32_t band_scale = 1;
  // Transit relays (TransitTable): set per group of like tensors where
  // that lowers the whole plan's α–β estimate (Context::decide_transit);
  // owned by the Context.
  const TransitTable* transit = nullptr;
};

// The most bands a pre-reduced part is cut into (TensorCtx::reduce_bands).
inline constexpr uint32_t kMaxReduceBands = 4096;

// The bands `part` is cut into for TensorCtx::reduce_bands = `bands`: its
// dimensions in order, each cut into as many slabs as still wanted (at most
// its extent), until at least `bands` (or every element); band k is the
// k-th box of that grid in row-major order, its d-th coordinate
// [lo + ext i / c, lo + ext (i + 1) / c). Calls f(sub, k) in ascending k.
template <class F>
void reduce_band_cut(const Box& part, uint32_t bands, F&& f) {
  std::array<int64_t, kMaxRank> cut{};
  int64_t n = 1;
  for (int d = 0; d < part.rank; ++d) {
    const int64_t want = n >= bands ? 1 : (bands + n - 1) / n;
    cut[static_cast<size_t>(d)] = std::max<int64_t>(1, std::min<int64_t>(part.extent(d), want));
    n *= cut[static_cast<size_t>(d)];
  }
  if (n <= 1) {
    f(part, uint32_t{0});
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    Box sub = part;
    int64_t rest = k;
    for (int d = part.rank - 1; d >= 0; --d) {
      const int64_t c = cut[static_cast<size_t>(d)];
      const int64_t i = rest % c;
      rest /= c;
      const int64_t ext = part.extent(d);
      sub.lo[d] = part.lo[d] + ext * i / c;
      sub.hi[d] = part.lo[d] + ext * (i + 1) / c;
    }
    f(sub, static_cast<uint32_t>(k));
  }
}

// What the enumeration reports for every piece.
struct Emitted {
  uint32_t src_entry;
  uint32_t dst_entry;
  Box region;
  bool own_region;  // region may differ from src box ∩ dst box (split or refined)
  bool local;       // source and destination on the same device
  bool forced;      // the only holder of this summand (no choice of sender)
  // > 0: a relay piece of that stage; src_entry is a *destination* entry
  // that received the region in an earlier stage and forwards it.
  uint32_t stage = 0;
  // Relay chunk (see Bands): pieces of a relay stream in chunk k travel in
  // the stream's k-th message, so a relay forwards chunk k once chunk k
  // arrived. 0 for pieces of no relay stream.
  uint32_t band = 0;
  // Pre-reduction on the holders' hosts (Enumerator::reduce_part): 1, the
  // piece writes a summand of source entry `src_entry` into the scratch of
  // source entry `dst_entry` (its owner; `local` when the sender is on the
  // owner's device; stage 0, across hosts only as a chain's first link);
  // 2, the piece reads the scratch of source entry `src_entry` and is one
  // contribution to destination entry `dst_entry`; 3, a chain link: the
  // piece reads the scratch of source entry `src_entry` and is one
  // contribution to the scratch of source entry `dst_entry`, on another
  // holder host. Transit relays (TransitTable): 4, a stage-0 piece from
  // source entry `src_entry` into the copy-staging scratch on the device of
  // destination entry `dst_entry` (the transit entry); 5, a stage-1 piece
  // from the scratch on the device of destination entry `src_entry` (the
  // transit entry) into destination entry `dst_entry`; 6, a stage-0 piece
  // from source entry `src_entry` into the scratch on the device of source
  // entry `dst_entry` (a sending-side transit, on the sender's host; `via`
  // the destination entry); 7, a stage-1 piece from that scratch (source
  // entry `src_entry`'s device) into destination entry `dst_entry`. A
  // transit of the other layout's entry (TransitShare::cross) is 4 and 5 on
  // the sending host, 6 and 7 on the receiving host. 0 for every other
  // piece.
  uint8_t scratch = 0;
  // Enumerator::send's cache: a scratch write kept under its owner.
  bool mirror = false;
  // Emitted::scratch 6: the destination entry the piece is for.
  uint32_t via = 0;
  bool relay() const { return stage > 0; }
};

// Relay bands. Each part of a region a destination cell routes (Route::parts;
// the region is a source cell clipped to the cell's box) is cut into n bands
// along one dimension: n = the part's bytes over relay_chunk_bytes(options)
// times TensorCtx::band_scale, clamped to
// [1, kRelayBands], the dimension the first with at least n elements (else
// the longest, n at most its extent). Every relay piece of the region — the
// stage-0 delivery into a relay that forwards it and each later-stage
// forward — is cut at the band boundaries and carries its band; a (stage,
// source, destination) stream sends its bands in ascending order, one
// message each. A forward of band k reads only what band k's messages into
// the relay wrote, so the relay forwards band k while band k + 1 still
// arrives, with or without a staging budget. Bands follow the part, not the
// cell: holders sending their parts side by side deliver the first band of
// every part first, so a relay fed by several holders forwards early too,
// and a part a host takes in to forward across hosts is forwarded band by
// band. The bands depend on the part, the tensor and the options alone:
// every process cuts them the same way.
inline constexpr int64_t kRelayBands = 8;
// Bands no smaller than options.split_min_bytes (the size below which the
// planner cuts no piece) and 8 α's worth of inter-host bandwidth (a band's
// α at most 1/8 of its time): 1 MiB by default.
inline int64_t relay_chunk_bytes(const PlanOptions& o) {
  const double v = 8 * o.alpha_seconds * o.inter_host_bytes_per_second;
  return std::max<int64_t>({o.split_min_bytes, v < 9e18 ? static_cast<int64_t>(v) : INT64_MAX, 1});
}
// The smallest entry chunk of a relay across hosts (CrossLayout's chunked
// sequence): the lesser of split_min_bytes and the reduce-scatter floor, a
// quarter of what one α buys between hosts and at least 4 KiB (31,250 bytes
// by default: a chunk's α at most 4 times its bandwidth time).
inline int64_t cross_min_bytes(const PlanOptions& o) {
  const double v = std::max(4096.0, o.alpha_seconds * o.inter_host_bytes_per_second / 4);
  return std::min<int64_t>(o.split_min_bytes, v < 9e18 ? static_cast<int64_t>(v) : INT64_MAX);
}

struct Bands {
  int dim = -1;  // -1: one band
  int64_t n = 1, lo = 0, ext = 0;
  // The band holding coordinate x (along dim).
  int64_t of(int64_t x) const {
    return static_cast<int64_t>((static_cast<__int128>(x - lo + 1) * n - 1) / ext);
  }
  int64_t start(int64_t k) const {
    return lo + static_cast<int64_t>(static_cast<__int128>(ext) * k / n);
  }
  // Calls f(sub, band) for the parts of `part` (a box inside the region) in
  // each band it overlaps, ascending; band k of n is numbered k * 8 / n, its
  // place among 8 (a stream sends a band of each region it carries in one
  // message, the regions' bands in step).
  template <class F>
  void each(const Box& part, F&& f) const {
    if (dim < 0 || part.empty()) {
      f(part, uint32_t{0});
      return;
    }
    const int64_t k0 = of(part.lo[dim]), k1 = of(part.hi[dim] - 1);
    for (int64_t k = k0; k <= k1; ++k) {
      Box sub = part;
      sub.lo[dim] = std::max(part.lo[dim], start(k));
      sub.hi[dim] = std::min(part.hi[dim], start(k + 1));
      f(sub, static_cast<uint32_t>(k * kRelayBands / n));
    }
  }
};
// relay_chunk_bytes(o) times `scale` (TensorCtx::band_scale), saturating.
inline int64_t band_bytes(const PlanOptions& o, uint32_t scale) {
  const int64_t c = relay_chunk_bytes(o);
  return c > INT64_MAX / std::max<uint32_t>(scale, 1) ? INT64_MAX
                                                      : c * std::max<uint32_t>(scale, 1);
}
// The relay bands of D for bands of `chunk` bytes (band_bytes of t's
// options and band scale: relay_bands below; a caller banding many parts
// of one tensor computes it once).
inline Bands relay_bands_of(const Box& D, int64_t esize, int64_t chunk) {
  Bands b;
  if (D.rank == 0 || D.empty()) return b;
  const int64_t bytes = D.volume() * esize;
  int64_t n = std::min<int64_t>(kRelayBands, bytes / chunk);
  if (n < 2) return b;
  int dim = -1;
  for (int d = 0; d < D.rank && dim < 0; ++d)
    if (D.extent(d) >= n) dim = d;
  if (dim < 0) {
    dim = 0;
    for (int d = 1; d < D.rank; ++d)
      if (D.extent(d) > D.extent(dim)) dim = d;
    n = std::min(n, D.extent(dim));
  }
  if (n < 2) return b;
  b.dim = dim;
  b.n = n;
  b.lo = D.lo[dim];
  b.ext = D.extent(dim);
  return b;
}
inline Bands relay_bands(const Box& D, const TensorCtx& t, const PlanOptions& o) {
  return relay_bands_of(D, t.esize, band_bytes(o, t.band_scale));
}

// The hosts of each cell of a destination geometry (tiled, or explicit:
// entries with equal boxes), and the entries of the cell on each host (both
// ascending): the relay groups.
struct CellHosts {
  std::vector<uint32_t> cell_offsets;  // cell -> [begin, end) into hosts
  std::vector<int32_t> hosts;
  std::vector<uint32_t> member_offsets;  // hosts index -> [begin, end) into members
  std::vector<uint32_t> members;
  std::vector<uint32_t> max_members;  // per cell: the most entries on one host
  std::vector<uint32_t> min_members;  // per cell: the fewest entries on one host
};

// How one region of a destination cell reaches the cell's entries
// (PlanOptions::relays), derived from the cell, the region and its holders
// alone. Receiving hosts: hosts with an entry of the cell and no holder of
// the region. Within a receiving host the entries share the region: for
// each part, one (the part's leader, rotating) takes it in and forwards it
// to the others. Across hosts (`cross`: at least 2 receiving hosts and more
// than the source spans) the region is cut into parts, each enters
// one receiving host (stage 0), crosses from that host's leader to the other
// hosts' leaders (stage 1), and fans out inside each host (stage 1 on the
// entry host, 2 on the others). Otherwise each receiving host takes the
// whole region in (stage 0) and fans it out (stage 1).
struct Route {
  // Reduce-scatter (PlanOptions::reduce_scatter, partial sources): part j's
  // reducer, an entry of the cell, receives every summand of it (stage 0)
  // and forwards the reduced part to the cell's other entries (stage 1);
  // with relays, to one entry per other host (its leader for part j,
  // stage 1), which fans it out inside its host (stage 2).
  bool reduce = false;
  // Reduce routes with relays: the gather's fan-out across the cell's hosts
  // (Enumerator::gather_fanout): 0, the star (the reducer sends to one leader
  // on every other host); k > 0, a tree of fan-out k (1: a chain) over the
  // hosts in the part's gather order, each host's leader taking the part in
  // once and forwarding it to its children's leaders and inside its host, in
  // stage 1 + shift + its level.
  uint32_t fanout = 0;
  // Reduce routes: whether holder hosts may pre-reduce their summands of a
  // part (Enumerator::reduce_part).
  bool pre_reduce = false;
  // Per part: Enumerator::part_shift's value, kUnknownShift until worked
  // out; cleared whenever the route is set.
  static constexpr uint32_t kUnknownShift = UINT32_MAX;
  mutable std::vector<uint32_t> shift;
  // Whether parts whose summands sit on 2 or more holder hosts chain
  // (Enumerator::reduce_part): -1 until worked out, from the route's
  // smallest part; cleared with `shift`.
  mutable int8_t chain = -1;
  size_t cell = 0;                          // the destination cell routed
  uint32_t cell_first = 0, cell_count = 0;  // the cell's entries in Geometry::cell_entries
  bool cross = false;
  size_t cell_begin = 0, cell_end = 0;  // the cell's range in CellHosts::hosts
  std::vector<int32_t> holder_hosts;    // sorted, unique
  size_t receiving = 0;                 // receiving hosts
  std::vector<Box> parts;
  // Cross routes, per part: the host whose holders send it in stage 0 (-1:
  // any holder), and the receiving host (index among the receiving hosts)
  // it enters, or -1 for a direct part, which the holders send to every
  // receiving host's leader themselves (see CellShares).
  std::vector<int32_t> part_host, part_entry;
  // Per part, when set: the index that picks its leaders (below) in place
  // of the part's own; the boxes of one run share it (CrossLayout). With n >
  // 0 (lead_parts): the part's slot among `lead_slots`, which map onto a
  // host's entries in blocks.
  std::vector<uint32_t> part_lead;
  uint32_t lead_slots = 0;
  // The global statistics of an all-to-all cell (RoutedCells::a2a_runs):
  // with `want_runs` set, a region that layout_parts lays out without
  // cutting its runs into sub-runs keeps its runs (`as_runs`, `runs`)
  // instead of their boxes and the per-part vectors above: run k's parts
  // are linear_boxes(region, from, from + count), in run order, each with
  // the run's host, entry and lead.
  struct Run {
    int32_t host = 0, entry = 0;
    uint32_t lead = 0;
    int64_t from = 0, count = 0;
  };
  bool want_runs = false, as_runs = false;
  std::vector<Run> runs;
  uint64_t rot = 0;
  // Relays inside hosts, tiled source: the region is source cell `idx` of
  // the `n` (row-major) covering the destination box; the leaders take
  // blocks of consecutive cells (leader k of c: cells [k n / c, (k+1) n / c)),
  // so each forwards boxes that merge (Relay merging below). n = 0: rotate.
  uint64_t idx = 0, n = 0;
  // The cover indices of the cell's regions held on the cell's own hosts,
  // sorted (host, index) (Enumerator::held_on_hosts); null: none asked. On
  // such a host the leaders take blocks of the regions that enter it.
  const std::vector<std::pair<int32_t, uint64_t>>* held = nullptr;
};

// Merges the relay pieces of one (relay, receiver) pair: consecutive boxes
// (in cover order) that extend each other along one dimension become one
// piece. Sender and receiver see the same sequence per pair, so both merge
// it the same way.
class RelayMerger {
 public:
  template <class F>
  void add(uint32_t key, const Emitted& x, F&& f) {
    auto [it, fresh] = pending_.try_emplace(key, x);
    if (fresh) return;
    Emitted& p = it->second;
    if (p.stage == x.stage && p.band == x.band && p.src_entry == x.src_entry &&
        p.dst_entry == x.dst_entry && extends(p.region, x.region))
      return;
    f(p);
    p = x;
  }
  template <class F>
  void flush(F&& f) {
    for (auto& [key, x] : pending_) f(x);
    pending_.clear();
  }

  // Whether `b` continues `a` along one dimension; if so `a` grows to cover
  // both.
  static bool extends(Box& a, const Box& b) {
    if (a.rank != b.rank) return false;
    int along = -1;
    for (int d = 0; d < a.rank; ++d) {
      if (a.lo[d] == b.lo[d] && a.hi[d] == b.hi[d]) continue;
      if (along >= 0 || a.hi[d] != b.lo[d]) return false;
      along = d;
    }
    if (along < 0) return false;
    a.hi[along] = b.hi[along];
    return true;
  }

 private:
  std::map<uint32_t, Emitted> pending_;
};

// Tests only (tests/core/plan_scratch_test.cc): overrides of the reduce
// route's α–β choices, to plan the alternative a choice rejected and
// compare estimates. Set before make_plan, never while one runs; plans made
// with an override are not what their fingerprint says.
// The even bounds of spread cuts the planner prices by default
// (plan/rounds.h, spread_bounds; ChoiceOverride::spread).
inline constexpr int64_t kSpreadEven = 24;
struct ChoiceOverride {
  int one_part = 0;  // 1: cells below two parts always take one part; 0: the model's choice
  int fanout = -1;   // >= 0: the gather's fan-out wherever parts are fewer than the hosts
  // 0: no group crosses by the device rule; 1: every group it changes does
  // (TensorCtx::device_cross); -1: the estimate's choice.
  int device_cross = -1;
  // 0: no group takes TensorCtx::fine_lead; 1: every group it changes
  // does; -1: the estimate's choice (Context::decide_lead_cut).
  int fine_lead = -1;
  // 0: no single-hop guard (the routes the other deciders leave,
  // Context::decide_single_hop); -1: the estimate's choice.
  int single_hop = -1;
  // g > 0: a pipelined plan takes keyed cuts of granule g bytes wherever
  // the staging budget allows (plan/rounds.h, RoundRule::keys); 0: the
  // estimate's choice (granule kKeyGranule); -1: never keyed.
  int64_t keyed = 0;
  // s > 0: every tensor's relay bands of s times relay_chunk_bytes
  // (TensorCtx::band_scale); 0: the estimate's choice
  // (Context::decide_band_scale).
  uint32_t band_scale = 0;
  // e > 0: a pipelined plan without a staging budget prices spread cuts of
  // e even bounds (plan/rounds.h, spread_bounds) and takes them where the
  // estimate is faster (the default: kSpreadEven); -e: takes them there
  // always (tests); 0: never.
  int64_t spread = kSpreadEven;
  // n > 0: spread cuts are priced on plans of at most n pieces (tests); 0:
  // kSpreadPieces (stats_finish.cc).
  int64_t spread_pieces = 0;
  // 0: no group takes transit relays (TensorCtx::transit); 1: every group
  // with a transit table does; -1: the estimate's choice
  // (Context::decide_transit).
  int transit = -1;
  // 0: no group takes TensorCtx::cross_off; -1: the estimate's choice
  // (Context::decide_transit).
  int cross_off = -1;
};
inline ChoiceOverride& choice_override() {
  static ChoiceOverride o;
  return o;
}

}  // namespace reshard::planning
