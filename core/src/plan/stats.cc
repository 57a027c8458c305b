// Global statistics of a plan: what the plan moves (per-cell arithmetic or
// enumeration, never the parts themselves), its round schedule, and its
// lower bounds (core/src/plan/bounds.cc).
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "plan/all_to_all_cell.h"
#include "plan/assign_stats.h"
#include "plan/bounds.h"
#include "plan/checked.h"
#include "plan/context.h"
#include "plan/pair_bytes.h"
#include "plan/round_figures.h"
#include "plan/rounds.h"
#include "plan/scratch_layout.h"
#include "plan/stage_cost.h"
#include "plan/stage_pairs.h"
#include "plan/stats_work.h"
#include "plan/stream_bound.h"
#include "plan/stream_map.h"
#include "reshard/error.h"

namespace reshard::planning {

void stat_overflow(const char* figure) {
  fail(ErrorCode::kOverflow, std::string("stats.") + figure,
       "exceeds 2^63 - 1: the plan moves more than 64-bit statistics can count (plan the "
       "tensors in several plans, or cut them smaller)");
}

namespace {

// 1234567 -> "1,234,567".
std::string commas(int64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0 && d[i - 1] != '-') out += ',';
    out += d[i];
  }
  return out;
}

}  // namespace

// Keyed cuts (rounds.h) are tried on plans of at most kKeyedPieces pieces
// (the keyed pass enumerates every piece), and taken where they split at
// most kKeyedSplitPieces more (each block of a piece its own piece).
constexpr int64_t kKeyedPieces = int64_t{1} << 20;
constexpr int64_t kKeyedSplitPieces = int64_t{1} << 22;

void compute_stats(Context& ctx, PlanStats& st, const PlanOptions& o, bool schedule,
                   std::vector<DeviceCounts>* counts, int64_t max_bytes, bool reference,
                   std::vector<DeviceLoad>* stage_loads, RoundRule* rounds_out, GuardStop* guard) {
  const size_t ndev = ctx.devices.size();
  std::atomic_ref<int64_t>(stats_passes()).fetch_add(1);  // plans run side by side
  const PlanStats entry = st;  // to start again from (Context::relay_split)
  if (counts) counts->assign(ndev, DeviceCounts{});
  // Per stage (0: from the sources; later ones: relays forwarding, scratch
  // sent along a reduction's chain and to its reducer, and the gather after
  // it) and device; as many stages as the pieces name (grown by
  // stage_grow). Deques: growing them keeps references to earlier stages'
  // rows and maps valid (acc, StreamRef::plain).
  std::deque<std::vector<Acc>> stage_acc;
  stage_acc.emplace_back(ndev);
  // Scratch (pre-reduction) per (tensor group, owner device, box corner):
  // the lowest stage of a message writing it, the highest reading it, its
  // elements (scratch_layout.h places them). Every tensor of the group
  // (groups_seen[group_index], the group being accounted) has such a
  // scratch, in its own dtype.
  struct ScratchUse {
    uint32_t first = UINT32_MAX;  // none yet
    uint32_t last = 0;
    int64_t volume = 0;
  };
  std::map<std::tuple<size_t, uint32_t, std::vector<int64_t>>, ScratchUse> scratch_use;
  std::vector<std::vector<size_t>> groups_seen;
  size_t group_index = 0;
  auto scratch_at = [&](uint32_t device, const Box& box) -> ScratchUse& {
    ScratchUse& u = scratch_use[{group_index, device,
                                 std::vector<int64_t>(box.lo.begin(), box.lo.begin() + box.rank)}];
    u.volume = box.volume();
    return u;
  };
  int32_t last_stage = 0;
  std::vector<Acc>& acc = stage_acc[0];
  // `bytes` from dense device sd to dd in one stage's rows `a`, and across
  // hosts when `inter`.
  auto charge = [&](std::vector<Acc>& a, uint32_t sd, uint32_t dd, int64_t bytes, bool inter) {
    add_to(a[sd].send, bytes, "max_send_bytes");
    add_to(a[dd].recv, bytes, "max_recv_bytes");
    if (!inter) return;
    add_to(a[sd].send_inter, bytes, "max_host_send_bytes");
    add_to(a[dd].recv_inter, bytes, "max_host_recv_bytes");
    add_to(st.cross_host_bytes, bytes, "cross_host_bytes");
  };
  bool relayed = false;
  // Tensors with the same shape and layout geometries have proportional
  // statistics: enumerate one of them and scale by the group's bytes/element.
  // With relays, element sizes too: relay bands follow a cell's bytes.
  std::map<std::tuple<std::vector<int64_t>, const Geometry*, const Geometry*, int64_t>,
           std::vector<size_t>>
      groups;
  // A keyed pass (Context::keyed_keys) enumerates every piece, and like
  // tensors share their keys only with their element size (key_blocks).
  const int64_t nkeys = ctx.keyed_keys;
  const bool keyed = nkeys > 0;
  for (size_t i = 0; i < ctx.tensors.size(); ++i) {
    const TensorCtx& t = ctx.tensors[i];
    groups[{t.spec->shape, t.sg, t.dg, o.relays || keyed ? t.esize * 2 + t.single_hop : 0}]
        .push_back(i);
  }
  // Pairs (dst device row, src device column) that exchange a message, per
  // stage (stage 1 sparse: relays stay inside hosts).
  const bool dense_pairs = ndev <= kDensePairDevices;  // stats_work.h
  const size_t words = (ndev + 63) / 64;
  std::vector<uint64_t> bits(dense_pairs ? ndev * words : 0);
  std::unordered_set<uint64_t> pair_set;
  // Relay stages (index 0 unused): dense while all of them together hold at
  // most kDenseRelayBytes.
  constexpr size_t kDenseRelayBytes = size_t{32} << 20;
  size_t dense_relay_bytes = 0;
  std::deque<StagePairs> relay_pairs;
  relay_pairs.emplace_back(0, false);
  // Each pair in a hash set or map costs about kPairBytes; checked as the
  // sets grow, so that a plan where every device talks to every other is
  // refused at the limit instead of exhausting memory.
  // Bookkeeping up to kPairFloor is always allowed: the limit is meant for
  // plans that would not fit, and small plans' statistics are never
  // refused in its place (the parts' estimate names the way out).
  constexpr int64_t kPairBytes = 48;
  constexpr int64_t kPairFloor = int64_t{64} << 20;
  int64_t pairs_kept = 0;
  auto keep_pair = [&] {
    if (max_bytes < 0 || ++pairs_kept * kPairBytes <= std::max(max_bytes, kPairFloor)) return;
    fail(ErrorCode::kResourceExhausted, "request.max_plan_bytes",
         "the global statistics track more than " + std::to_string(pairs_kept) +
             " pairs of devices that exchange data (about " +
             std::to_string(pairs_kept * kPairBytes >> 20) + " MiB), above the limit of " +
             std::to_string(max_bytes >> 20) + " MiB (" + std::to_string(max_bytes) +
             " bytes); every device of these " + std::to_string(ndev) +
             " talks to many others: use a coarser layout (fewer devices, or a "
             "replicated source sharded first), or raise the limit");
  };
  Enumerator en(o, ctx.pre_reduce, ctx.relay_split);
  int64_t pieces = 0;
  int64_t part_visits = 0;  // relay_parts_visited()
  std::vector<uint64_t> cell_bits;
  // Bytes per (src, dst) stream, needed for the statistics of the rounds.
  const bool budgeted = o.staging_budget_bytes > 0;
  // Pipelined plans (RoundRule) are cut without a budget too: their
  // streams' bytes are tracked once a plan turns out to have several stages
  // (Context::track_streams, set below).
  const bool track_pairs = (budgeted || ctx.track_streams) && schedule;
  // Stage-0 stream bytes (PairBytes): dense from the start where the table
  // takes at most what a 4,096-device square one did, else once the hash
  // map reaches a quarter of it (a table of up to kDensePairCap, and within
  // max_bytes: the 405B plan at 16,384 devices has 2^28 streams, 2 GiB as
  // a table against some 17 GiB as a map).
  constexpr size_t kDensePairCap = size_t{2} << 30;
  std::vector<uint8_t> can_recv(track_pairs ? ndev : 0), can_send(track_pairs ? ndev : 0);
  if (track_pairs) {
    std::set<const GeoTopo*> seen;
    auto mark = [&](const GeoTopo* g, std::vector<uint8_t>& v) {
      for (uint32_t d : g->dense) v[d] = 1;
    };
    for (const TensorCtx& t : ctx.tensors) {
      // Rows: destination devices, and holders taking a summand into their
      // scratch (partial sources); columns: source devices.
      if (seen.insert(t.dt).second) mark(t.dt, can_recv);
      if (t.S > 1) mark(t.st, can_recv);
    }
    seen.clear();
    for (const TensorCtx& t : ctx.tensors)
      if (seen.insert(t.st).second) mark(t.st, can_send);
  }
  PairBytes pair_bytes(
      can_recv, can_send,
      max_bytes < 0
          ? kDensePairCap
          : std::min(kDensePairCap, static_cast<size_t>(std::max(max_bytes, kPairFloor))));
  if (track_pairs && pair_bytes.table_bytes() <= size_t{4096} * 4096 * sizeof(int64_t))
    pair_bytes.make_dense();
  const bool dense_bytes = pair_bytes.dense();
  // Refused up front, in time linear in the layouts' entries, when the
  // fewest pairs the layouts allow are already above what keep_pair
  // accepts (it would refuse anyway, after enumerating them).
  if (max_bytes >= 0 && (!dense_pairs || (track_pairs && !dense_bytes))) {
    const int64_t least = min_device_pairs(ctx);
    const int64_t most = std::max(max_bytes, kPairFloor) / kPairBytes;
    if (least > most)
      fail(ErrorCode::kResourceExhausted, "request.max_plan_bytes",
           "the global statistics would track at least " + std::to_string(least) +
               " pairs of devices that exchange data (estimated from the layouts before "
               "planning: about " +
               std::to_string(
                   static_cast<int64_t>(static_cast<double>(least) * kPairBytes / (1 << 20))) +
               " MiB at " + std::to_string(kPairBytes) + " bytes a pair), above the limit of " +
               std::to_string(std::max(max_bytes, kPairFloor) >> 20) + " MiB (" +
               std::to_string(max_bytes) + " bytes); each of these " + std::to_string(ndev) +
               " devices receives from many others (an all-gather over every device?): "
               "use a coarser layout (fewer devices, or gather within groups first), or raise "
               "the limit (-1: no limit)");
  }
  std::deque<StreamMap<int64_t>> relay_bytes(1);
  // Makes room for stage s in the per-stage rows and maps.
  auto stage_grow = [&](uint32_t s) {
    while (stage_acc.size() <= s) {
      stage_acc.emplace_back(ndev);
      const size_t b = StagePairs::dense_bytes(ndev);
      const bool dense = dense_relay_bytes + b <= kDenseRelayBytes;
      if (dense) dense_relay_bytes += b;
      relay_pairs.emplace_back(ndev, dense);
      relay_bytes.emplace_back();
    }
  };
  // Streams cut into relay bands (BandStream), keyed stage << 40 | source
  // dense << 20 | destination dense.
  BandStreams band_streams;
  auto add_pair = [&](uint32_t sd, uint32_t dd, int64_t bytes) {
    if (pair_bytes.add(sd, dd, bytes, kPairBytes)) keep_pair();
  };
  // Destination geometries where relays across hosts may apply: a cell
  // spanning at least 2 hosts and more than the source spans (the per-cell
  // arithmetic below handles relays inside hosts, not across them).
  std::map<std::tuple<const Geometry*, const GeoTopo*, const GeoTopo*>, bool> relay_geo;
  auto may_relay = [&](const TensorCtx& t) {
    if (!o.relays || t.single_hop || t.S > 1 || t.T > 1 || !t.dg->tiled) return false;
    auto [it, fresh] = relay_geo.emplace(std::make_tuple(t.dg, t.dt, t.st), false);
    if (!fresh) return it->second;
    const Geometry& dg = *t.dg;
    std::vector<int32_t> hosts;
    for (int64_t c = 0; c < dg.num_cells() && !it->second; ++c) {
      hosts.clear();
      for (uint32_t i = dg.cell_offsets[static_cast<size_t>(c)];
           i < dg.cell_offsets[static_cast<size_t>(c) + 1]; ++i)
        hosts.push_back(t.dt->host[dg.cell_entries[i]]);
      std::sort(hosts.begin(), hosts.end());
      const auto distinct =
          static_cast<size_t>(std::unique(hosts.begin(), hosts.end()) - hosts.begin());
      if (distinct >= 2 && distinct > static_cast<size_t>(t.st->num_hosts)) it->second = true;
    }
    return it->second;
  };
  // ... or a cell on no more hosts than the source spans whose group
  // crosses anyway (Enumerator::cross_gate: single-hop would overload a
  // holder host); it depends on the shape too.
  auto may_cross = [&](const TensorCtx& t) {
    if (may_relay(t)) return true;
    return o.relays && !t.single_hop && t.S == 1 && t.T == 1 && t.dg->tiled && en.crosses_few(t);
  };
  // Whether the statistics account group representative t by per-cell
  // arithmetic (the loop over groups below), else by enumerating its pieces.
  auto per_cell = [&](const TensorCtx& t) {
    return !reference && !keyed && dense_pairs && t.sg->unique_cells && t.dg->tiled && t.S == 1 &&
           t.T == 1 && !may_cross(t);
  };
  // The work of this pass counted up front (stats_visits, per dimension),
  // refused above Context::max_stats_pieces before any piece is visited.
  if (ctx.max_stats_pieces >= 0 && !ctx.stats_checked) {
    ctx.stats_checked = true;
    int64_t visits = 0;
    for (const auto& [key, members] : groups) {
      const TensorCtx& t = ctx.tensors[members.front()];
      // Per-cell arithmetic still visits every (region, entry) stream
      // where the round schedule needs its bytes (add_pair).
      const int64_t v = stats_visits(t, !per_cell(t) || track_pairs, o.relays && !t.single_hop,
                                     o.split_min_bytes);
      visits = visits > (int64_t{1} << 62) - v ? int64_t{1} << 62 : visits + v;
    }
    if (visits > ctx.max_stats_pieces)
      fail(ErrorCode::kResourceExhausted, "request.max_stats_pieces",
           "the global statistics would visit about " + commas(visits) +
               " pieces (counted from the layouts before planning: one tensor of each of " +
               std::to_string(groups.size()) + " groups of like tensors over " +
               std::to_string(ndev) + " devices), above the limit of " +
               commas(ctx.max_stats_pieces) +
               " (2^31 by default: minutes of one core); plan fewer devices per plan, "
               "or raise the limit (-1: no limit)");
  }
  // Band streams looked up recently: a direct-mapped cache (a leader's
  // stage-0 bands alternate between its holders' streams).
  constexpr size_t kBandCache = 256;
  std::array<std::pair<uint64_t, uint32_t>, kBandCache> band_cache;
  band_cache.fill({BandStreams::kNone, 0});
  // The index of the band stream `key` in band_streams.
  auto band_index = [&](uint64_t key) -> uint32_t {
    auto& slot = band_cache[(key * 0x9e3779b97f4a7c15ull) >> 56];
    if (slot.first == key) return slot.second;
    bool fresh = false;
    const uint32_t i = band_streams.index(key, &fresh);
    if (fresh) keep_pair();
    slot = {key, i};
    return i;
  };
  // Keyed pass: each stream's keys (stage << 40 | source dense << 20 |
  // destination dense), and per stage, key and device the bytes of that
  // key's round (send, recv and their parts across hosts); the group's
  // blocks (key_blocks of its representative).
  std::unordered_map<uint64_t, uint32_t> key_streams;
  std::deque<std::vector<std::vector<Acc>>> key_acc;
  KeyBlocks group_blocks;
  std::array<int64_t, 32> key_vol{};
  int64_t key_split = 0;  // pieces the keyed cuts add
  // One piece x of destination entry e of t (a group of `copies` tensors of
  // `esum` bytes per element in all).
  auto account = [&](const TensorCtx& t, uint32_t e, const Emitted& x, int64_t esum, int64_t copies,
                     int64_t& group_pieces) {
    // A piece into a holder's scratch goes to that source entry's device
    // rather than e's (Emitted::scratch).
    const bool into_scratch = x.scratch == 1 || x.scratch == 3;
    const GeoTopo& to = into_scratch ? *t.st : *t.dt;
    if (into_scratch) e = x.dst_entry;
    const uint32_t dd = to.dense[e];
    ++group_pieces;
    const int64_t bytes = mul_of(x.region.volume(), esum, "network_bytes");
    // A relay piece's source is a destination entry (stages > 0), a
    // scratch's its owner, a source entry.
    const GeoTopo& from = x.relay() && x.scratch == 0 ? *t.dt : *t.st;
    const uint32_t sd = from.dense[x.src_entry];
    if (x.scratch == 2 || x.scratch == 3) {  // read in x.stage
      ScratchUse& u = scratch_at(sd, x.region);
      u.last = std::max(u.last, x.stage);
    }
    if ((x.scratch == 1 && !x.local) || x.scratch == 3) {  // written by a message of x.stage
      ScratchUse& u = scratch_at(dd, x.region);
      u.first = std::min(u.first, x.stage);
    }
    if (counts) {
      DeviceCounts& c = (*counts)[dd];
      if (x.local) {
        c.local_pieces += copies;
        if (x.own_region) c.regions += copies;
      } else {
        c.recv_pieces += copies;
        (*counts)[sd].send_pieces += copies;
        if (x.own_region) {
          c.regions += copies;
          (*counts)[sd].regions += copies;
        }
      }
    }
    if (x.local) {
      add_to(acc[dd].local, bytes, "local_bytes");
      return;
    }
    stage_grow(x.stage);
    charge(stage_acc[x.stage], sd, dd, bytes, from.host[x.src_entry] != to.host[e]);
    if (keyed) {
      key_vol.fill(0);
      const int64_t blocks = key_volumes(x.region, group_blocks, nkeys, key_vol.data());
      while (key_acc.size() <= x.stage)
        key_acc.emplace_back(static_cast<size_t>(nkeys), std::vector<Acc>(ndev));
      uint32_t mask = 0;
      for (int64_t r = 0; r < nkeys; ++r) {
        if (key_vol[static_cast<size_t>(r)] <= 0) continue;
        mask |= 1u << r;
        std::vector<Acc>& k = key_acc[x.stage][static_cast<size_t>(r)];
        const int64_t v = mul_of(key_vol[static_cast<size_t>(r)], esum, "network_bytes");
        add_to(k[sd].send, v, "max_send_bytes");
        add_to(k[dd].recv, v, "max_recv_bytes");
        if (from.host[x.src_entry] != to.host[e]) {
          add_to(k[sd].send_inter, v, "max_host_send_bytes");
          add_to(k[dd].recv_inter, v, "max_host_recv_bytes");
        }
      }
      key_streams[uint64_t{x.stage} << 40 | uint64_t{sd} << 20 | dd] |= mask;
      if (blocks > 1) add_to(key_split, mul_of(blocks - 1, copies, "pieces"), "pieces");
      if (counts && blocks > 1) {  // the piece is split at every block boundary
        const int64_t more = mul_of(blocks - 1, copies, "pieces");
        (*counts)[dd].recv_pieces += more;
        (*counts)[sd].send_pieces += more;
        (*counts)[dd].regions += more;
        (*counts)[sd].regions += more;
      }
    }
    if (from.process[x.src_entry] != to.process[e])
      add_to(st.cross_process_bytes, bytes, "cross_process_bytes");
    if (x.relay()) {
      relayed = true;
      last_stage = std::max(last_stage, static_cast<int32_t>(x.stage));
      add_to(st.forwarded_bytes, bytes, "forwarded_bytes");
    }
    if (x.band > 0) {  // its stream's own message
      add_to(stage_acc[x.stage][sd].send_late, bytes, "max_send_bytes");
      add_to(stage_acc[x.stage][dd].recv_late, bytes, "max_recv_bytes");
      BandStream& b =
          band_streams.at(band_index(uint64_t{x.stage} << 40 | uint64_t{sd} << 20 | dd));
      b.mask |= 1u << x.band;
      if (track_pairs) add_to(b.bytes[x.band], bytes, "network_bytes");
      return;
    }
    if (x.relay()) {
      const uint64_t key = (uint64_t{sd} << 32) | dd;
      if (relay_pairs[x.stage].insert(sd, dd)) keep_pair();
      if (track_pairs) add_to(relay_bytes[x.stage][key], bytes, "network_bytes");
      return;
    }
    if (track_pairs) add_pair(sd, dd, bytes);
    if (dense_pairs) {
      bits[dd * words + (sd >> 6)] |= uint64_t{1} << (sd & 63);
    } else {
      if (pair_set.insert((uint64_t{sd} << 32) | dd).second) keep_pair();
    }
  };
  // GuardStop: once a later stage has pieces, every 4 * ndev pieces
  // (the floor costs a pass over the devices), at the end of a cell or an
  // entry (within a cell the per-cell arithmetic takes back the bytes a
  // device keeps: the rows only grow from cell to cell), whether the floor
  // of the estimate so far is above the single-hop plan's; sets `stopped`.
  bool stopped = false;
  double guard_single = 0, guard_floor = 0;
  bool guard_asked = false;
  int64_t guard_next = 0;
  std::optional<Bounds> guard_lb;
  auto guard_stops_here = [&](int64_t visited) {
    if (!guard || stopped || last_stage < 1 || visited < guard_next) return stopped;
    guard_next = visited + 4 * static_cast<int64_t>(ndev);
    if (!guard_asked) {
      guard_single = guard->single_cost();
      guard_asked = true;
    }
    if (!guard_lb) guard_lb = compute_bounds(ctx);
    guard_floor = stage_cost_floor(stage_acc, *guard_lb, o);
    stopped = guard_floor > guard_single;
    return stopped;
  };
  // The pieces of destination entry e of t, enumerated.
  auto enum_entry = [&](const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                        int64_t& group_pieces) {
    en.recv(t, e, [&](const Emitted& x) { account(t, e, x, esum, copies, group_pieces); });
  };
  // A routed part's bands (relay_bands), worked out once per region for
  // every entry of the cell: the elements of each band by band number (the
  // k-th of n is numbered k * kRelayBands / n), the numbers above 0 as a
  // mask, and the first and last bands' boxes (what merging looks at).
  struct PartBands {
    Bands bands;
    int64_t n = 1;
    uint32_t mask = 0, last_band = 0;
    std::array<int64_t, kRelayBands> volume{};
    Box first, last;
  };
  auto part_bands_of = [&](const Box& part, int64_t esize, PartBands& pb) {
    pb.bands = relay_bands(part, esize, o);
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
  };
  // A relay stream (stage, destination entry src -> the entry being
  // enumerated) as relay_part found it: its keys, counted in relay_pairs
  // and band_streams (kept by keep_pair) the first time, and where its bytes
  // add up (indices into relay_bytes[stage] and band_streams). Looked up
  // once per cell instead of once per part.
  constexpr uint32_t kUnset = UINT32_MAX;
  struct StreamRef {
    uint32_t src = 0, stage = 0;
    bool counted = false;
    uint32_t plain = kUnset;   // relay_bytes[stage] (with track_pairs)
    uint32_t banded = kUnset;  // band_streams
  };
  // The relay pieces of `part` from destination entry `src` to e in stage
  // `stage`, cut into `bands` (relay_bands of the part): what account() does
  // for each band's piece, at once. `added`: the pieces they make after
  // merging (Enumerator::recv's RelayMerger; see merge_part).
  auto relay_part = [&](const TensorCtx& t, StreamRef& ref, uint32_t e, const Box& part,
                        const PartBands& pb, int64_t added, int64_t esum, int64_t copies,
                        int64_t& group_pieces) {
    const uint32_t src = ref.src, stage = ref.stage;
    const uint32_t sd = t.dt->dense[src], dd = t.dt->dense[e];
    ++part_visits;
    group_pieces += added;
    if (counts) {
      (*counts)[dd].recv_pieces += copies * added;
      (*counts)[dd].regions += copies * added;
      (*counts)[sd].send_pieces += copies * added;
      (*counts)[sd].regions += copies * added;
    }
    const int64_t bytes = mul_of(part.volume(), esum, "network_bytes");
    stage_grow(stage);
    charge(stage_acc[stage], sd, dd, bytes, t.dt->host[src] != t.dt->host[e]);
    if (t.dt->process[src] != t.dt->process[e])
      add_to(st.cross_process_bytes, bytes, "cross_process_bytes");
    relayed = true;
    last_stage = std::max(last_stage, static_cast<int32_t>(stage));
    add_to(st.forwarded_bytes, bytes, "forwarded_bytes");
    // Band 0 travels with the stream's pieces of no band, the others in
    // their own messages.
    if (!ref.counted) {
      if (relay_pairs[stage].insert(sd, dd)) keep_pair();
      if (track_pairs) ref.plain = relay_bytes[stage].index((uint64_t{sd} << 32) | dd);
      ref.counted = true;
    }
    if (track_pairs)
      add_to(relay_bytes[stage].at(ref.plain), mul_of(pb.volume[0], esum, "network_bytes"),
             "network_bytes");
    if (pb.n == 1) return;
    const int64_t late = bytes - mul_of(pb.volume[0], esum, "network_bytes");  // bands above 0
    add_to(stage_acc[stage][sd].send_late, late, "max_send_bytes");
    add_to(stage_acc[stage][dd].recv_late, late, "max_recv_bytes");
    if (ref.banded == kUnset)
      ref.banded = band_index(uint64_t{stage} << 40 | uint64_t{sd} << 20 | dd);
    BandStream& b = band_streams.at(ref.banded);
    b.mask |= pb.mask;
    if (track_pairs)
      for (size_t k = 1; k < kRelayBands; ++k)
        add_to(b.bytes[k], mul_of(pb.volume[k], esum, "network_bytes"), "network_bytes");
  };
  // Enumerator::recv merges the relay pieces of each (relay, receiver) pair
  // (RelayMerger): per entry of the cell being enumerated, the pending piece
  // from each relay. A part's bands have distinct band numbers, so only its
  // first band can extend the pending piece (of band 0), and its last band
  // is pending after it (enum_cell counts the pieces a part adds).
  struct Pending {
    uint32_t src = 0, stage = 0, band = 0;
    Box box;
  };
  // The stage-0 pieces a region's holders send, accounted without
  // enumerating them (assign_stats.h).
  AssignStats assigned({.ndev = ndev,
                        .o = &o,
                        .acc = &acc,
                        .counts = counts,
                        .st = &st,
                        .dense_pairs = dense_pairs,
                        .words = words,
                        .bits = &bits,
                        .pair_set = &pair_set,
                        .track_pairs = track_pairs,
                        .pair_bytes = &pair_bytes,
                        .keep_pair = keep_pair,
                        .add_pair = add_pair},
                       account);
  // Destination cell c of t (tiled, one summand on both sides), as
  // Enumerator::recv enumerates each of its entries, but with the cover and
  // each region's route computed once for the cell (both depend on the cell
  // and the region alone) and each relay part's bands accounted at once
  // (relay_part) instead of piece by piece. Returns false, having
  // accounted nothing, when a region has no holder (the caller enumerates,
  // which reports it).
  Route route;
  std::vector<std::vector<Pending>> pending;
  std::vector<std::vector<StreamRef>> streams;  // per entry of the cell
  std::vector<uint8_t> several;                 // per entry of the cell: another entry on its host
  std::vector<size_t> slot;                     // per entry of the cell: Enumerator::host_slot
  std::vector<PartBands> part_bands;            // per part of the region's route
  std::vector<uint32_t> part_holders;           // holders on a part's host, per part
  std::vector<size_t> holder_begin;  // per part: offset into part_holders (+1 at the end)
  std::vector<std::pair<int32_t, uint32_t>> by_host_cell;
  std::vector<int64_t> recv_index;  // per host of the cell (Enumerator::receiving_table)
  std::vector<size_t> recv_host;    // per receiving host
  // Per cell: each entry's position in it, per (entry, source entry) of
  // the cell the index of the entry's pending piece, and per (entry,
  // source entry, stage) that of its stream, each valid where its stamp is
  // the cell's tick. Stamp and index side by side (one cache miss a
  // lookup, not two) and no unused pending slots: a 1,024-entry cell's
  // tables take 24 MiB instead of 48, and the misses on four separate
  // arrays were about a tenth of the statistics' time of a 4,096-device
  // MoE sync.
  struct Stamped {
    uint32_t tick = 0, index = 0;
  };
  std::vector<uint32_t> pos_in_cell;
  std::vector<Stamped> pending_at, stream_at;
  uint32_t cell_tick = 0;
  // A cell whose entries take each source's relay parts alike
  // (all_to_all_cell.h).
  AllToAllCell a2a;
  // a2a's sums since the last flush, added to every (entry, source) pair
  // of the cell with entries cell_entries[b0 .. b0 + m) of t: what
  // relay_part does for each part of each pair.
  auto a2a_flush = [&](const TensorCtx& t, uint32_t b0, size_t m, int64_t copies,
                       int64_t& group_pieces) {
    const Geometry& dg = *t.dg;
    for (size_t p = 0; p < m; ++p) {
      AllToAllSource& s = a2a.src[p];
      if (!s.touched) continue;
      const uint32_t src = dg.cell_entries[b0 + p], sd = t.dt->dense[src];
      for (size_t i = 0; i < m; ++i) {
        if (i == p) continue;
        const uint32_t e = dg.cell_entries[b0 + i], dd = t.dt->dense[e];
        const AllToAllCell::Ref& r = a2a.ref[i * m + p];
        group_pieces += s.added;
        if (counts) {
          (*counts)[dd].recv_pieces += copies * s.added;
          (*counts)[dd].regions += copies * s.added;
          (*counts)[sd].send_pieces += copies * s.added;
          (*counts)[sd].regions += copies * s.added;
        }
        charge(stage_acc[1], sd, dd, s.bytes, t.dt->host[src] != t.dt->host[e]);
        if (t.dt->process[src] != t.dt->process[e])
          add_to(st.cross_process_bytes, s.bytes, "cross_process_bytes");
        add_to(st.forwarded_bytes, s.bytes, "forwarded_bytes");
        if (track_pairs) add_to(relay_bytes[1].at(r.plain), s.plain, "network_bytes");
        if (!s.banded) continue;
        add_to(stage_acc[1][sd].send_late, s.late, "max_send_bytes");
        add_to(stage_acc[1][dd].recv_late, s.late, "max_recv_bytes");
        BandStream& b = band_streams.at(r.banded);
        b.mask |= s.mask;
        if (track_pairs)
          for (size_t k = 1; k < kRelayBands; ++k) add_to(b.bytes[k], s.band[k], "network_bytes");
      }
      relayed = true;
      last_stage = std::max(last_stage, 1);
      s.clear_sums();
    }
  };
  // A region of such a cell (route, recv_index, recv_host, slot and
  // part_bands set for it): each entry's stage-0 parts by stage0(b0 + i,
  // entry, part), in part order, and each relay part once for every entry.
  // False, having done nothing, where the region is not one: it does not
  // enter every host of the cell, or a part's leader is not its host's
  // entry.
  auto a2a_region = [&](const TensorCtx& t, uint32_t b0, size_t m, size_t np, int64_t esum,
                        auto&& stage0) {
    if (!route.cross || recv_host.size() != m || route.cell_end - route.cell_begin != m)
      return false;
    const Geometry& dg = *t.dg;
    a2a.pos.resize(m);
    for (size_t i = 0; i < m; ++i) a2a.pos[slot[i] - route.cell_begin] = static_cast<uint32_t>(i);
    a2a.part.assign(np, AllToAllCell::kNone);
    for (size_t j = 0; j < np; ++j) {
      if (route.part_entry[j] < 0) continue;
      const size_t hi = recv_host[static_cast<size_t>(route.part_entry[j])];
      const uint32_t p = a2a.pos[hi - route.cell_begin];
      if (en.leader(route, hi, j) != dg.cell_entries[b0 + p]) return false;
      a2a.part[j] = p;
    }
    a2a.sort_parts(route.part_entry, m);
    for (size_t i = 0; i < m; ++i) {
      const uint32_t e = dg.cell_entries[b0 + i];
      a2a.each_stage0(static_cast<size_t>(recv_index[slot[i] - route.cell_begin]),
                      [&](size_t j) { stage0(b0 + static_cast<uint32_t>(i), e, j); });
    }
    if (!a2a.any_entered()) return true;
    // The relay parts, once per source.
    stage_grow(1);
    if (!a2a.on) a2a.start(m);
    a2a.events.clear();
    for (size_t j = 0; j < np; ++j) {
      const uint32_t p = a2a.part[j];
      if (p == AllToAllCell::kNone) continue;
      ++part_visits;
      AllToAllSource& s = a2a.src[p];
      const PartBands& pb = part_bands[j];
      if (!s.seen) a2a.events.push_back({p, false});
      s.seen = s.touched = true;
      s.added += s.merge(pb.first, pb.last, pb.n, pb.last_band);
      const int64_t bytes = mul_of(route.parts[j].volume(), esum, "network_bytes");
      const int64_t plain = mul_of(pb.volume[0], esum, "network_bytes");
      add_to(s.bytes, bytes, "forwarded_bytes");
      add_to(s.plain, plain, "network_bytes");
      if (pb.n == 1) continue;
      add_to(s.late, bytes - plain, "max_send_bytes");
      s.mask |= pb.mask;
      for (size_t k = 1; k < kRelayBands; ++k)
        add_to(s.band[k], mul_of(pb.volume[k], esum, "network_bytes"), "network_bytes");
      if (!s.banded) a2a.events.push_back({p, true});
      s.banded = true;
    }
    // Each pair's streams counted at its first part (and its first banded
    // one), entry by entry, as relay_part counts them.
    for (size_t i = 0; i < m; ++i) {
      const uint32_t dd = t.dt->dense[dg.cell_entries[b0 + i]];
      for (const AllToAllCell::Event& ev : a2a.events) {
        if (ev.p == i) continue;
        const uint32_t sd = t.dt->dense[dg.cell_entries[b0 + ev.p]];
        AllToAllCell::Ref& r = a2a.ref[i * m + ev.p];
        if (ev.band) {
          r.banded = band_index(uint64_t{1} << 40 | uint64_t{sd} << 20 | dd);
          continue;
        }
        if (relay_pairs[1].insert(sd, dd)) keep_pair();
        if (track_pairs) r.plain = relay_bytes[1].index((uint64_t{sd} << 32) | dd);
      }
    }
    return true;
  };
  // Hands the cell's pending pieces and streams, taken alike so far, to
  // every (entry, source) pair, to go on one by one (after a2a_flush).
  auto a2a_leave = [&](const TensorCtx& t, uint32_t b0, size_t m, bool indexed) {
    const Geometry& dg = *t.dg;
    for (size_t i = 0; i < m; ++i)
      for (size_t p = 0; p < m; ++p) {
        const AllToAllSource& s = a2a.src[p];
        if (p == i || !s.seen) continue;
        const uint32_t src = dg.cell_entries[b0 + p];
        const AllToAllCell::Ref& r = a2a.ref[i * m + p];
        const size_t pk = i * m + p;
        if (indexed)
          stream_at[pk * 2] = Stamped{cell_tick, static_cast<uint32_t>(streams[i].size())};
        streams[i].push_back(StreamRef{src, 1, true, r.plain, r.banded});
        if (indexed) pending_at[pk] = Stamped{cell_tick, static_cast<uint32_t>(pending[i].size())};
        pending[i].push_back(Pending{src, 1, s.pending_band, s.pending});
      }
    a2a.on = false;
  };
  auto enum_cell = [&](const TensorCtx& t, size_t c, int64_t esum, int64_t copies,
                       int64_t& group_pieces) {
    const Geometry& dg = *t.dg;
    const uint32_t b0 = dg.cell_offsets[c], b1 = dg.cell_offsets[c + 1];
    const Box B = t.dst->box(dg.cell_entries[b0]);
    bool held = true;
    en.cover(t, B, [&](const Box&, const uint32_t*, size_t n, bool) { held &= n > 0; });
    if (!held) return false;
    const size_t m = b1 - b0;
    pending.resize(std::max(pending.size(), m));
    streams.resize(std::max(streams.size(), m));
    for (size_t i = 0; i < m; ++i) {
      pending[i].clear();
      streams[i].clear();
    }
    several.assign(m, 0);
    slot.assign(m, 0);
    a2a.on = false;
    if (++cell_tick == 0) {  // wrapped: every stamp is stale again
      std::fill(pending_at.begin(), pending_at.end(), Stamped{});
      std::fill(stream_at.begin(), stream_at.end(), Stamped{});
      cell_tick = 1;
    }
    // Indexed where the tables stay small (16 Mi slots), else scanned; set
    // up at the first region that takes a route (a single-hop pass needs
    // none; zeroing them was 8% of `reshard plan` on the 4,096-device MoE
    // sync of bench/plan_scale.py).
    const bool indexed = m * m * 2 <= (size_t{1} << 24);
    by_host_cell.clear();
    for (uint32_t i = b0; i < b1; ++i) by_host_cell.emplace_back(t.dt->host[dg.cell_entries[i]], i);
    std::sort(by_host_cell.begin(), by_host_cell.end());
    for (size_t i = 1; i < m; ++i)
      if (by_host_cell[i].first == by_host_cell[i - 1].first)
        several[by_host_cell[i].second - b0] = several[by_host_cell[i - 1].second - b0] = 1;
    bool slots = false;
    // Whether the cell's relay parts may still be taken alike (see
    // A2aSource): one entry a host, no relay piece taken one by one yet.
    bool a2a_ok = m >= 2 && m * m <= (size_t{1} << 24) &&
                  std::find(several.begin(), several.end(), 1) == several.end();
    en.cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool own) {
      if (!en.route(t, c, region, h, n, route))
        return assigned.assign_cell(t, b0, b1, region, h, n, own, esum, copies, group_pieces);
      if (route.reduce) fail(ErrorCode::kInternal, "statistics: a reduce route in one summand");
      if (!slots) {
        for (uint32_t i = b0; i < b1; ++i) slot[i - b0] = en.host_slot(t, dg.cell_entries[i], c);
        slots = true;
        if (indexed && pos_in_cell.size() < t.dst->num_entries())
          pos_in_cell.resize(t.dst->num_entries());
        if (indexed)
          for (uint32_t i = b0; i < b1; ++i) pos_in_cell[dg.cell_entries[i]] = i - b0;
        if (indexed && stream_at.size() < m * m * 2) {
          pending_at.assign(m * m, Stamped{});
          stream_at.assign(m * m * 2, Stamped{});
        }
      }
      assigned.region_holders().set(t, h, n);
      const size_t np = route.parts.size();
      part_bands.resize(np);
      part_holders.clear();
      holder_begin.assign(np + 1, 0);
      for (size_t j = 0; j < np; ++j) {
        part_bands_of(route.parts[j], t.esize, part_bands[j]);
        holder_begin[j] = part_holders.size();
        if (route.cross && route.part_host[j] >= 0)
          for (size_t k = 0; k < n; ++k)
            if (t.st->host[h[k]] == route.part_host[j]) part_holders.push_back(h[k]);
      }
      holder_begin[np] = part_holders.size();
      en.receiving_table(route, recv_index, recv_host);
      // Part j of entry e (at i) in stage 0, from a holder (on the part's
      // host, if it has one).
      auto stage0 = [&](uint32_t i, uint32_t e, size_t j) {
        const Box& part = route.parts[j];
        const bool cut = own || np > 1;
        const bool shared = route.cross && route.part_host[j] >= 0;
        const uint32_t* hs = shared ? part_holders.data() + holder_begin[j] : h;
        const size_t nh = shared ? holder_begin[j + 1] - holder_begin[j] : n;
        const HolderSets* sets = shared ? nullptr : &assigned.region_holders();
        bool ok = true;
        if (!several[i - b0] && !(route.cross && route.part_entry[j] >= 0))
          ok = assigned.assign(t, e, part, hs, nh, cut, 0, esum, copies, group_pieces, sets);
        else
          part_bands[j].bands.each(part, [&](const Box& sub, uint32_t band) {
            ok &= assigned.assign(t, e, sub, hs, nh, cut || !(sub == part), band, esum, copies,
                                  group_pieces, sets);
          });
        if (!ok) fail(ErrorCode::kInternal, "statistics: a route part without holders");
      };
      if (a2a_ok && a2a_region(t, b0, m, np, esum, stage0)) return;
      if (a2a.on) {  // taken one by one from here: each pair's pending piece and stream
        a2a_flush(t, b0, m, copies, group_pieces);
        a2a_leave(t, b0, m, indexed);
      }
      a2a_ok = false;
      for (uint32_t i = b0; i < b1; ++i) {
        const uint32_t e = dg.cell_entries[i];
        const size_t hi = slot[i - b0];
        const int64_t ri = recv_index[hi - route.cell_begin];
        if (ri < 0) {  // a holder on e's host
          assigned.assign(t, e, region, h, n, own, 0, esum, copies, group_pieces,
                          &assigned.region_holders());
          continue;
        }
        const auto idx = static_cast<size_t>(ri);
        for (size_t j = 0; j < np; ++j) {
          const Box& part = route.parts[j];
          const PartBands& pb = part_bands[j];
          const bool entry = Enumerator::arrives_first(route, j, idx);
          const uint32_t l = en.leader(route, hi, j);
          uint32_t src = l, stage = entry ? 1 : 2;
          if (l == e) {
            if (entry) {
              stage0(i, e, j);
              continue;
            }
            src = en.leader(route, recv_host[static_cast<size_t>(route.part_entry[j])], j);
            stage = 1;  // across hosts, from the entry host's leader
          }
          // RelayMerger on the entry's pending piece from `src` (`added`:
          // the pieces the part adds after merging), and the entry's
          // stream from src: found by index (src, a leader, is an entry of
          // the cell, at pos_in_cell[src]), or by a scan where the cell is
          // too large for the tables (a scan per part was most of the
          // statistics' time on a 4,096-device MoE sync).
          std::vector<Pending>& pe = pending[i - b0];
          std::vector<StreamRef>& se = streams[i - b0];
          int64_t added = pb.n;
          size_t pk = 0, key = 0;
          Pending* q = nullptr;
          StreamRef* ref = nullptr;
          if (indexed) {
            pk = (i - b0) * m + pos_in_cell[src];  // pending: by source alone
            key = pk * 2 + (stage == 1 ? 0 : 1);
            if (pending_at[pk].tick == cell_tick) q = &pe[pending_at[pk].index];
            if (stream_at[key].tick == cell_tick) ref = &se[stream_at[key].index];
          } else {
            for (Pending& x : pe)
              if (x.src == src) q = &x;
            for (StreamRef& r : se)
              if (r.src == src && r.stage == stage) ref = &r;
          }
          if (!q) {
            if (indexed) pending_at[pk] = Stamped{cell_tick, static_cast<uint32_t>(pe.size())};
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
            if (indexed) stream_at[key] = Stamped{cell_tick, static_cast<uint32_t>(se.size())};
            ref = &se.emplace_back(StreamRef{src, stage});
          }
          relay_part(t, *ref, e, part, pb, added, esum, copies, group_pieces);
        }
      }
    });
    if (a2a.on) a2a_flush(t, b0, m, copies, group_pieces);
    std::atomic_ref<int64_t>(relay_parts_visited()).fetch_add(part_visits);
    part_visits = 0;
    return true;
  };
  // Every cell of t (tiled destination, one summand on both sides) by
  // enum_cell.
  auto enum_cells = [&](const TensorCtx& t, int64_t esum, int64_t copies, int64_t& group_pieces) {
    const Geometry& dg = *t.dg;
    for (int64_t c = 0; c < dg.num_cells(); ++c) {
      const auto cs = static_cast<size_t>(c);
      if (dg.cell_offsets[cs] == dg.cell_offsets[cs + 1]) continue;
      if (t.dst->box(dg.cell_entries[dg.cell_offsets[cs]]).empty()) continue;
      if (guard_stops_here(pieces + group_pieces)) return;
      if (enum_cell(t, cs, esum, copies, group_pieces)) continue;
      // A region held by no source device: the enumeration reports the first
      // such piece, in entry order, as a plan would.
      for (uint32_t e = 0; e < t.dst->num_entries(); ++e) en.recv(t, e, [](const Emitted&) {});
      fail(ErrorCode::kInternal, "statistics: a region without holders was not reported");
    }
  };
  for (auto& [key, members] : groups) {
    if (stopped) break;
    int64_t esum = 0;
    for (size_t i : members) esum += ctx.tensors[i].esize;
    group_index = groups_seen.size();
    if (keyed) {
      const TensorCtx& r = ctx.tensors[members.front()];
      group_blocks = key_blocks(r.spec->shape, r.esize, ctx.keyed_granule);
    }
    groups_seen.push_back(members);
    const TensorCtx& t = ctx.tensors[members.front()];
    // Every member has the representative's pieces.
    const int64_t copies = static_cast<int64_t>(members.size());
    int64_t group_pieces = 0;
    if (per_cell(t)) {
      // No choice of sender anywhere: statistics follow from per-cell
      // arithmetic over destination cells, without enumerating pieces.
      const Geometry& dg = *t.dg;
      std::vector<std::pair<uint32_t, int64_t>> hv;  // (holder entry, elements)
      std::vector<Box> regions;                      // parallel to hv
      // Whether two entries of the cell share a host (relays inside hosts).
      std::vector<std::pair<int32_t, uint32_t>> by_host;  // (host, entry), sorted
      auto relay_cell = [&](const TensorCtx& tc, uint32_t b0, uint32_t b1) {
        by_host.clear();
        for (uint32_t i = b0; i < b1; ++i) {
          const uint32_t e = tc.dg->cell_entries[i];
          by_host.emplace_back(tc.dt->host[e], e);
        }
        std::sort(by_host.begin(), by_host.end());
        for (size_t i = 1; i < by_host.size(); ++i)
          if (by_host[i].first == by_host[i - 1].first) return true;
        return false;
      };
      // Per entry and region, the enumerator's relay rule (Route, non-cross)
      // without enumerating: on a host with no holder of the region and
      // several entries of the cell, the leader (by blocks of source cells)
      // takes the region in and forwards it to the others in stage 1, the
      // forwarded boxes merged as RelayMerger does. Returns the cell's pieces.
      // The leaders are visited host by host, each host's regions in cover
      // order (a leader's messages in one row of the stage-0 pairs and
      // stream bytes; region by region over every host, each message missed
      // the cache: most of the global statistics' time of the 405B plan at
      // 16,384 devices, whose norms are replicated on every device), and
      // each leader's forwarded boxes merged as they arrive. `leading`
      // lists the leaders with any region in the order their first region
      // reaches them region by region (first region, then host), which is
      // the order their relay streams are added in.
      struct RegionAt {
        uint32_t h;
        int64_t bytes;
        int32_t host;
        uint64_t idx, n;  // its position in the cover (cover_position)
      };
      struct Leader {
        size_t first, span, lp;  // first region, host (index into spans), by_host position
        int64_t bytes, merged;
      };
      struct LeaderRun {
        size_t first = 0, count = 0;
        int64_t bytes = 0, merged = 0;
        Box cur;
      };
      std::vector<RegionAt> region_at;
      std::vector<uint32_t> leader_of;  // per region: its leader's position in a host's entries
      std::unordered_map<int32_t, size_t> on_host;  // regions per holder host
      std::vector<Leader> leading;
      std::vector<LeaderRun> runs;
      std::vector<std::pair<size_t, size_t>> spans, small_spans;  // small: one entry
      auto relay_cell_stats = [&](const TensorCtx& tc, size_t c, const Box& B, int64_t es,
                                  int64_t cp) {
        const std::vector<std::pair<int32_t, uint64_t>>* held = &en.held_on_hosts(tc, c);
        int64_t cell_pieces = 0;
        leading.clear();
        spans.clear();
        for (size_t g = 0, g_end = 0; g < by_host.size(); g = g_end) {
          for (g_end = g; g_end < by_host.size() && by_host[g_end].first == by_host[g].first;)
            ++g_end;
          spans.emplace_back(g, g_end);
        }
        // The pieces from holder h into entry e (stage 0).
        auto direct = [&](uint32_t h, uint32_t e, int64_t bytes, bool other_host) {
          const uint32_t sd = tc.st->dense[h];
          const uint32_t dd = tc.dt->dense[e];
          ++cell_pieces;
          if (tc.dg->devices[e] == tc.sg->devices[h]) {  // its own copy
            add_to(acc[dd].local, bytes, "local_bytes");
            if (counts) (*counts)[dd].local_pieces += cp;
            return;
          }
          charge(acc, sd, dd, bytes, other_host);
          if (tc.st->process[h] != tc.dt->process[e])
            add_to(st.cross_process_bytes, bytes, "cross_process_bytes");
          bits[dd * words + (sd >> 6)] |= uint64_t{1} << (sd & 63);
          if (track_pairs) add_pair(sd, dd, bytes);
          if (counts) {
            (*counts)[sd].send_pieces += cp;
            (*counts)[dd].recv_pieces += cp;
          }
        };
        region_at.resize(hv.size());
        for (size_t k = 0; k < hv.size(); ++k) {
          const uint32_t h = hv[k].first;
          Route pos;
          cover_position(tc, B, regions[k], pos);
          region_at[k] = {h, mul_of(hv[k].second, es, "network_bytes"), tc.st->host[h], pos.idx,
                          pos.n};
        }
        size_t leader_of_m = 0;  // the m leader_of holds (0: none yet)
        // Every entry of a host with one entry of the cell, or of the
        // region's holder's host, takes the region directly.
        small_spans.clear();
        for (const auto& sp : spans)
          if (sp.second - sp.first < 2) small_spans.push_back(sp);
        for (size_t k = 0; k < hv.size(); ++k) {
          const RegionAt& r = region_at[k];
          for (const auto& [g, g_end] : small_spans)
            for (size_t i = g; i < g_end; ++i)
              direct(r.h, by_host[i].second, r.bytes, r.host != by_host[g].first);
          // Spans are sorted by host.
          auto own = std::lower_bound(spans.begin(), spans.end(), r.host,
                                      [&](const std::pair<size_t, size_t>& sp, int32_t h) {
                                        return by_host[sp.first].first < h;
                                      });
          if (own == spans.end() || by_host[own->first].first != r.host ||
              own->second - own->first < 2)
            continue;
          for (size_t i = own->first; i < own->second; ++i)
            direct(r.h, by_host[i].second, r.bytes, false);
        }
        // On the other hosts the leader (by blocks of source cells) takes it
        // in and forwards it: a distinct stream per (region, host) there.
        if (track_pairs) {
          on_host.clear();
          for (const RegionAt& r : region_at) ++on_host[r.host];
          size_t streams = 0;
          for (const auto& [g, g_end] : spans)
            if (g_end - g >= 2) {
              auto it = on_host.find(by_host[g].first);
              streams += hv.size() - (it == on_host.end() ? 0 : it->second);
            }
          pair_bytes.expect(streams, kPairBytes);
        }
        for (size_t si = 0; si < spans.size(); ++si) {
          const auto [g, g_end] = spans[si];
          const size_t m = g_end - g;
          const int32_t host = by_host[g].first;
          if (m < 2) continue;
          runs.assign(m, LeaderRun{});
          // Each region's leader among m entries (Enumerator::lead_block):
          // the same on every host that holds none of the cell's regions.
          // (held is sorted by host.)
          const auto on =
              std::lower_bound(held->begin(), held->end(), std::make_pair(host, uint64_t{0}));
          const bool holds = on != held->end() && on->first == host;
          if (holds || m != leader_of_m) {
            leader_of.resize(hv.size());
            // held_by once per cover size (the regions of a cell share it).
            uint64_t range_n = 0;
            Enumerator::HeldRange range{nullptr, nullptr};
            for (size_t k = 0; k < hv.size(); ++k) {
              const uint64_t n = region_at[k].n;
              if (holds && (k == 0 || n != range_n)) {
                range = Enumerator::held_by(held, host, n);
                range_n = n;
              }
              leader_of[k] = static_cast<uint32_t>(
                  Enumerator::lead_block_on(range, host, region_at[k].idx, n, m));
            }
            leader_of_m = holds ? 0 : m;
          }
          for (size_t k = 0; k < hv.size(); ++k) {
            const RegionAt& r = region_at[k];
            if (r.host == host) continue;
            const size_t q = leader_of[k];
            LeaderRun& run = runs[q];
            if (run.count++ == 0) run.first = k;
            add_to(run.bytes, r.bytes, "forwarded_bytes");
            direct(r.h, by_host[g + q].second, r.bytes, true);
            if (run.count > 1 && RelayMerger::extends(run.cur, regions[k])) continue;
            run.cur = regions[k];
            ++run.merged;
          }
          for (size_t q = 0; q < m; ++q)
            if (runs[q].count > 0)
              leading.push_back({runs[q].first, si, g + q, runs[q].bytes, runs[q].merged});
        }
        std::sort(leading.begin(), leading.end(), [](const Leader& a, const Leader& b) {
          return std::tie(a.first, a.span) < std::tie(b.first, b.span);
        });
        // Relay pieces: each leader's regions merged in cover order, one
        // sequence per other entry of its host.
        for (const Leader& l : leading) {
          const auto [g, g_end] = spans[l.span];
          const uint32_t lead = by_host[l.lp].second;
          const int64_t bytes = l.bytes;
          const int64_t merged = l.merged;
          const uint32_t ld = tc.dt->dense[lead];
          stage_grow(1);
          relayed = true;
          last_stage = std::max(last_stage, 1);
          for (size_t i = g; i < g_end; ++i) {
            const uint32_t e = by_host[i].second;
            if (e == lead) continue;
            const uint32_t dd = tc.dt->dense[e];
            add_to(stage_acc[1][ld].send, bytes, "max_send_bytes");
            add_to(stage_acc[1][dd].recv, bytes, "max_recv_bytes");
            if (tc.dt->process[lead] != tc.dt->process[e])
              add_to(st.cross_process_bytes, bytes, "cross_process_bytes");
            add_to(st.forwarded_bytes, bytes, "forwarded_bytes");
            if (relay_pairs[1].insert(ld, dd)) keep_pair();
            if (track_pairs)
              add_to(relay_bytes[1][(uint64_t{ld} << 32) | dd], bytes, "network_bytes");
            cell_pieces += merged;
            if (counts) {
              (*counts)[ld].send_pieces += cp * merged;
              (*counts)[dd].recv_pieces += cp * merged;
              (*counts)[ld].regions += cp * merged;
              (*counts)[dd].regions += cp * merged;
            }
          }
        }
        return cell_pieces;
      };
      std::map<int32_t, int64_t> dst_on_host, dst_on_proc, vol_on_host;
      std::vector<int32_t> hv_cols;  // per region: its holder's column of pair_bytes
      for (int64_t c = 0; c < dg.num_cells(); ++c) {
        if (guard_stops_here(pieces + group_pieces)) break;
        const uint32_t b0 = dg.cell_offsets[static_cast<size_t>(c)],
                       b1 = dg.cell_offsets[static_cast<size_t>(c) + 1];
        if (b0 == b1) continue;
        const Box B = t.dst->box(dg.cell_entries[b0]);
        if (B.empty()) continue;
        hv.clear();
        regions.clear();
        // The cover alone (one holder per cell: no choice, no relay).
        en.cover(t, B, [&](const Box& region, const uint32_t* h, size_t, bool) {
          hv.emplace_back(h[0], region.volume());
          regions.push_back(region);
        });
        const int64_t n = b1 - b0;
        if (o.relays && !t.single_hop && relay_cell(t, b0, b1)) {
          // The most entries of the cell on one host (by_host: relay_cell's).
          int64_t members = 0;
          for (size_t i = 0, j = 0; i < by_host.size(); i = j) {
            for (j = i; j < by_host.size() && by_host[j].first == by_host[i].first;) ++j;
            members = std::max(members, static_cast<int64_t>(j - i));
          }
          bool split = false;
          for (const Box& region : regions) {
            Route pos;
            cover_position(t, B, region, pos);
            split |= en.relay_cut(t, members, region, pos.n);
          }
          // Relay bands, or regions cut into parts for more leaders: by enum_cell.
          if (split || relay_bands(B, t.esize, o).n > 1) {
            if (!enum_cell(t, static_cast<size_t>(c), esum, copies, group_pieces))
              fail(ErrorCode::kInternal, "statistics: a tiled source cell without holders");
            continue;
          }
          group_pieces += relay_cell_stats(t, static_cast<size_t>(c), B, esum, copies);
          continue;
        }
        dst_on_host.clear();
        dst_on_proc.clear();
        vol_on_host.clear();
        for (uint32_t i = b0; i < b1; ++i) {
          ++dst_on_host[t.dt->host[dg.cell_entries[i]]];
          ++dst_on_proc[t.dt->process[dg.cell_entries[i]]];
        }
        cell_bits.assign(words, 0);
        int64_t total = 0;
        for (auto [h, vol] : hv) {
          const uint32_t sd = t.st->dense[h];
          const int64_t bytes = mul_of(vol, esum, "network_bytes");
          const int64_t other_host =
              n - (dst_on_host.count(t.st->host[h]) ? dst_on_host[t.st->host[h]] : 0);
          const int64_t other_proc =
              n - (dst_on_proc.count(t.st->process[h]) ? dst_on_proc[t.st->process[h]] : 0);
          add_to(acc[sd].send, mul_of(bytes, n, "max_send_bytes"), "max_send_bytes");
          const int64_t inter = mul_of(bytes, other_host, "cross_host_bytes");
          add_to(acc[sd].send_inter, inter, "max_host_send_bytes");
          add_to(st.cross_host_bytes, inter, "cross_host_bytes");
          add_to(st.cross_process_bytes, mul_of(bytes, other_proc, "cross_process_bytes"),
                 "cross_process_bytes");
          add_to(vol_on_host[t.st->host[h]], bytes, "max_host_send_bytes");
          add_to(total, bytes, "max_recv_bytes");
          cell_bits[sd >> 6] |= uint64_t{1} << (sd & 63);
          if (counts) (*counts)[sd].send_pieces += n * copies;
        }
        group_pieces += static_cast<int64_t>(hv.size()) * n;
        // Where every holder has a column of pair_bytes' table, each
        // entry's streams are added along its row (each entry takes a
        // distinct stream from every holder but its own device).
        hv_cols.clear();
        if (track_pairs && !hv.empty())
          pair_bytes.expect(static_cast<size_t>(n) * (hv.size() - 1), kPairBytes);
        if (track_pairs && pair_bytes.dense())
          for (auto [h, vol] : hv) {
            const int32_t col = pair_bytes.column(t.st->dense[h]);
            if (col < 0) {
              hv_cols.clear();
              break;
            }
            hv_cols.push_back(col);
          }
        for (uint32_t i = b0; i < b1; ++i) {
          const uint32_t e = dg.cell_entries[i];
          const uint32_t dd = t.dt->dense[e];
          int64_t own = 0;
          if (auto r = t.src->entry_of(dg.devices[e])) {
            own = mul_of(intersect(t.src->box(*r), B).volume(), esum, "local_bytes");
            // The device keeps its own overlap: a local copy, not a send.
            acc[t.st->dense[*r]].send -= own;
            // Its holder is then one of hv, counted above as a sender.
            if (counts && own > 0) {
              (*counts)[t.st->dense[*r]].send_pieces -= copies;
              (*counts)[dd].local_pieces += copies;
              (*counts)[dd].recv_pieces -= copies;
            }
          }
          if (counts) (*counts)[dd].recv_pieces += static_cast<int64_t>(hv.size()) * copies;
          add_to(acc[dd].local, own, "local_bytes");
          add_to(acc[dd].recv, total - own, "max_recv_bytes");
          add_to(acc[dd].recv_inter,
                 total - (vol_on_host.count(t.dt->host[e]) ? vol_on_host[t.dt->host[e]] : 0),
                 "max_host_recv_bytes");
          uint64_t* row = bits.data() + dd * words;
          for (size_t w = 0; w < words; ++w) row[w] |= cell_bits[w];
          if (!track_pairs) continue;
          if (int64_t* prow = hv_cols.empty() ? nullptr : pair_bytes.row(dd)) {
            for (size_t k = 0; k < hv.size(); ++k)
              if (t.st->dense[hv[k].first] != dd)
                add_to(prow[hv_cols[k]], hv[k].second * esum, "network_bytes");
            continue;
          }
          for (auto [h, vol] : hv)
            if (t.st->dense[h] != dd) add_pair(t.st->dense[h], dd, vol * esum);  // <= bytes above
        }
      }
      pieces += group_pieces * static_cast<int64_t>(members.size());
      continue;
    }
    if (!reference && !keyed && t.dg->tiled && t.S == 1 && t.T == 1) {
      enum_cells(t, esum, copies, group_pieces);
    } else {
      for (uint32_t e = 0; e < t.dst->num_entries(); ++e) {
        if (t.dst->box(e).empty()) continue;
        if (guard_stops_here(pieces + group_pieces)) break;
        enum_entry(t, e, esum, copies, group_pieces);
      }
    }
    pieces += group_pieces * static_cast<int64_t>(members.size());
    if (guard_stops_here(pieces)) break;
  }
  assigned.flush_rows();
  if (stopped) {
    // The guard takes the single-hop plan (GuardStop): what it reads.
    st.cost_seconds = guard_floor;
    st.stages = 1 + last_stage;
    apply_bounds(ctx, *guard_lb, o, st);
    guard->stopped = true;
    std::atomic_ref<int64_t>(guard_stops_taken()).fetch_add(1);  // plans run side by side
    return;
  }
  // Streams (device pairs with a message) per device: stage 0 from the bit
  // rows or the pair set, stage 1 from the relay pairs.
  std::vector<int64_t> send_msgs(ndev, 0), recv_msgs(ndev, 0);
  const auto nstages = static_cast<int>(stage_acc.size());
  std::vector<std::vector<int64_t>> stage_send_msgs(stage_acc.size(),
                                                    std::vector<int64_t>(ndev, 0));
  std::vector<std::vector<int64_t>> stage_recv_msgs = stage_send_msgs;
  if (dense_pairs) {
    // Each column's bits counted bit-sliced: per word of the row, plane i
    // holds bit i of the 64 columns' counts, and a row adds with carries
    // (a column per set bit was most of this loop's time where every
    // device talks to every other: 2^28 bits at 16,384 devices).
    const int nplanes = std::bit_width(ndev);
    std::vector<uint64_t> planes(words * static_cast<size_t>(nplanes), 0);
    for (size_t dd = 0; dd < ndev; ++dd) {
      uint64_t* row = bits.data() + dd * words;
      row[dd >> 6] &= ~(uint64_t{1} << (dd & 63));  // a device never messages itself
      for (size_t w = 0; w < words; ++w) {
        uint64_t carry = row[w];
        stage_recv_msgs[0][dd] += __builtin_popcountll(carry);
        for (uint64_t* c = planes.data() + w * static_cast<size_t>(nplanes); carry; ++c) {
          const uint64_t next = *c & carry;
          *c ^= carry;
          carry = next;
        }
      }
    }
    for (size_t w = 0; w < words; ++w)
      for (int i = 0; i < nplanes; ++i)
        for (uint64_t v = planes[w * static_cast<size_t>(nplanes) + static_cast<size_t>(i)]; v;
             v &= v - 1)
          stage_send_msgs[0][w * 64 + static_cast<size_t>(__builtin_ctzll(v))] += int64_t{1} << i;
  } else {
    for (uint64_t pr : pair_set) {
      ++stage_send_msgs[0][pr >> 32];
      ++stage_recv_msgs[0][pr & 0xffffffffu];
    }
  }
  for (int s = 1; s < nstages; ++s) {
    relay_pairs[s].each([&](uint32_t sd, uint32_t dd) {
      ++stage_send_msgs[s][sd];
      ++stage_recv_msgs[s][dd];
    });
  }
  // Streams cut into bands: a message per band above 0 (a stream with no
  // piece outside them was not counted above); per stage, the most messages
  // one stream has (its rounds without a budget).
  std::vector<int64_t> stage_rounds(stage_acc.size(), 0);
  for (int s = 0; s < nstages; ++s)
    for (size_t d = 0; d < ndev && stage_rounds[s] == 0; ++d)
      if (stage_recv_msgs[s][d] > 0) stage_rounds[s] = 1;
  auto plain_pair = [&](uint32_t s, uint32_t sd, uint32_t dd) {
    if (s > 0) return relay_pairs[s].contains(sd, dd);
    if (dense_pairs) return (bits[dd * words + (sd >> 6)] >> (sd & 63) & 1) != 0;
    return pair_set.count(uint64_t{sd} << 32 | dd) > 0;
  };
  band_streams.each([&](uint64_t key, const BandStream& b) {
    const auto s = static_cast<uint32_t>(key >> 40);
    const auto sd = static_cast<uint32_t>(key >> 20 & 0xfffff);
    const auto dd = static_cast<uint32_t>(key & 0xfffff);
    const int bands = __builtin_popcount(b.mask);
    stage_send_msgs[s][sd] += bands;
    stage_recv_msgs[s][dd] += bands;
    stage_rounds[s] = std::max<int64_t>(stage_rounds[s], bands + (plain_pair(s, sd, dd) ? 1 : 0));
  });
  // Every stage together: the figures of the statistics. Round cutting
  // takes each stage's alone (rounds.h): a round belongs to one stage.
  std::vector<DeviceLoad> loads(static_cast<size_t>(nstages) * ndev);
  for (int s = 0; s < nstages; ++s)
    for (size_t d = 0; d < ndev; ++d)
      loads[static_cast<size_t>(s) * ndev + d] = {stage_send_msgs[s][d] + stage_recv_msgs[s][d],
                                                  stage_acc[s][d].send + stage_acc[s][d].recv};
  for (int s = 0; s < nstages; ++s)
    for (size_t d = 0; d < ndev; ++d) {
      stage_acc[s][d].send_msgs = stage_send_msgs[s][d];
      stage_acc[s][d].recv_msgs = stage_recv_msgs[s][d];
    }
  std::vector<Acc> total(ndev);
  for (int s = 0; s < nstages; ++s) {
    for (size_t d = 0; d < ndev; ++d) {
      const Acc& x = stage_acc[s][d];
      add_to(total[d].send, x.send, "max_send_bytes");
      add_to(total[d].recv, x.recv, "max_recv_bytes");
      add_to(total[d].local, x.local, "local_bytes");
      add_to(total[d].send_inter, x.send_inter, "max_host_send_bytes");
      add_to(total[d].recv_inter, x.recv_inter, "max_host_recv_bytes");
      send_msgs[d] += stage_send_msgs[s][d];
      recv_msgs[d] += stage_recv_msgs[s][d];
    }
  }
  std::vector<int64_t> host_send, host_recv;
  const Bounds lb = compute_bounds(ctx);
  host_send.assign(lb.hosts.size(), 0);
  host_recv.assign(lb.hosts.size(), 0);
  st.per_device.resize(ndev);
  for (size_t d = 0; d < ndev; ++d) {
    const Acc& x = total[d];
    DeviceTraffic& dt = st.per_device[d];
    dt.device = ctx.devices[d];
    dt.send_bytes = x.send;
    dt.recv_bytes = x.recv;
    dt.local_bytes = x.local;
    dt.send_messages = send_msgs[d];
    dt.recv_messages = recv_msgs[d];
    add_to(st.network_bytes, x.recv, "network_bytes");
    add_to(st.local_bytes, x.local, "local_bytes");
    add_to(st.messages, recv_msgs[d], "messages");
    st.max_send_bytes = std::max(st.max_send_bytes, x.send);
    st.max_recv_bytes = std::max(st.max_recv_bytes, x.recv);
    add_to(host_send[lb.host_of_device[d]], x.send_inter, "max_host_send_bytes");
    add_to(host_recv[lb.host_of_device[d]], x.recv_inter, "max_host_recv_bytes");
    if (!budgeted) {
      int64_t staged = x.send;
      add_to(staged, x.recv, "peak_staging_bytes");
      st.peak_staging_bytes = std::max(st.peak_staging_bytes, staged);
    }
  }
  // Pipelined stages (rounds.h, RoundRule): k rounds, stage s's pipeline
  // budget P_s from its busiest device; the estimate counts the rounds the
  // busiest device's streams then span (fewer where the smallest pipelined
  // round m allows fewer). Kept only where the estimate is faster for it:
  // where a link busy over every stage binds, more rounds only add α.
  RoundRule rule;
  rule.budget = o.staging_budget_bytes;
  rule.min_chunk = std::max<int64_t>(1, cross_min_bytes(o));
  st.cost_seconds = stage_cost(stage_acc, stage_rounds, lb, o);
  // k from pipeline_rounds, at most kFewPipelineRounds on plans of at most
  // kKeyedPieces pieces, where keyed cuts are tried (they remove the
  // forwards' lag, and a keyed pass counts at most 32 keys:
  // one_holder_to_8_hosts, keyed at 16, simulates 2.916 ms against 2.919
  // pipelined at 64). Above kFewPipelineRounds both counts
  // are priced and the cheaper by the estimate is kept, so a plan is never
  // slower by it than with at most kFewPipelineRounds rounds.
  std::vector<int64_t> piped_rounds;
  auto try_pipeline = [&](int64_t k) {
    std::vector<int64_t> piped = stage_rounds;
    std::vector<int64_t> budgets(static_cast<size_t>(nstages), 0);
    std::vector<int64_t> spans(static_cast<size_t>(nstages), 0);
    for (int s = 0; s < nstages; ++s) {
      int64_t most = 0;
      for (size_t d = 0; d < ndev; ++d)
        most = std::max(most, loads[static_cast<size_t>(s) * ndev + d].bytes);
      if (most <= 0) continue;
      budgets[static_cast<size_t>(s)] = most / k + (most % k != 0 ? 1 : 0);
      spans[static_cast<size_t>(s)] = std::min(k, most / rule.min_chunk + 1);
      piped[static_cast<size_t>(s)] =
          std::max(piped[static_cast<size_t>(s)], spans[static_cast<size_t>(s)]);
    }
    const double cost = stage_cost(stage_acc, piped, lb, o, RoundSizes::kEven);
    if (cost < st.cost_seconds) {
      st.cost_seconds = cost;
      rule.pipeline = std::move(budgets);
      rule.spans = std::move(spans);
      piped_rounds = std::move(piped);
    }
  };
  if (const int64_t k = pipeline_rounds(stage_acc, lb, o); k > 1) {
    const bool keyed_tried = keyed || pieces <= kKeyedPieces || choice_override().keyed > 0;
    if (k > kFewPipelineRounds && !keyed_tried) try_pipeline(kFewPipelineRounds);
    try_pipeline(keyed_tried ? std::min(k, kFewPipelineRounds) : k);
  }
  if (!piped_rounds.empty()) stage_rounds = std::move(piped_rounds);
  // Keyed cuts (rounds.h, a keyed pass): a stream's messages are the keys
  // it holds, a stage's rounds the highest key held in it plus one, and a
  // round's bytes its key's. Taken where every device's bytes of one round
  // stay below the budget and the estimate (lag 0, each round as long as
  // its key's bytes make it) is no slower than the pipelined one: a tie
  // goes to keyed cuts, whose lag of 0 holds by construction, while the
  // pipelined estimate's lag of one round is a floor (forwards of
  // rl_sync_uneven_replicas_4_to_2_hosts read three to four rounds late:
  // both estimate 1.055 ms, simulated 1.231 pipelined and 1.047 keyed). On
  // request (choice_override().keyed > 0) wherever the budget allows.
  bool keyed_taken = false;
  int64_t keyed_messages = 0, keyed_peak = 0;
  std::vector<int64_t> keyed_device_msgs;
  if (keyed && !rule.pipeline.empty() &&
      *std::max_element(rule.spans.begin(), rule.spans.end()) == nkeys) {
    std::vector<uint32_t> stage_keys(static_cast<size_t>(nstages), 0);
    keyed_device_msgs.assign(ndev, 0);
    for (const auto& [key, mask] : key_streams) {
      const auto s = static_cast<size_t>(key >> 40);
      const size_t sd = key >> 20 & 0xfffff, dd = key & 0xfffff;
      const int n = std::popcount(mask);
      stage_keys[s] |= mask;
      keyed_messages += n;
      keyed_device_msgs[sd] += n;
      keyed_device_msgs[dd] += n;
    }
    std::vector<int64_t> rounds(static_cast<size_t>(nstages), 0);
    KeyedRounds kr;
    kr.seconds.resize(static_cast<size_t>(nstages));
    for (size_t s = 0; s < static_cast<size_t>(nstages); ++s) {
      rounds[s] = std::bit_width(stage_keys[s]);
      for (size_t r = 0; r < static_cast<size_t>(rounds[s]) && s < key_acc.size(); ++r) {
        const std::vector<Acc>& x = key_acc[s][r];
        kr.seconds[s].push_back(busiest_link_seconds(x, lb, o));
        for (const Acc& a : x) keyed_peak = std::max(keyed_peak, a.send + a.recv);
      }
    }
    const double cost = stage_cost(stage_acc, rounds, lb, o, RoundSizes::kEven, &kr);
    const bool forced = choice_override().keyed > 0;
    const bool fits = o.staging_budget_bytes <= 0 || keyed_peak < o.staging_budget_bytes;
    if (fits && (forced || (cost <= st.cost_seconds && key_split <= kKeyedSplitPieces))) {
      keyed_taken = true;
      st.cost_seconds = cost;
      stage_rounds = std::move(rounds);
      rule.keys = nkeys;
      rule.key_granule = ctx.keyed_granule;
    }
  }
  for (size_t h = 0; h < lb.hosts.size(); ++h) {
    st.max_host_send_bytes = std::max(st.max_host_send_bytes, host_send[h]);
    st.max_host_recv_bytes = std::max(st.max_host_recv_bytes, host_recv[h]);
  }
  apply_bounds(ctx, lb, o, st);
  // validate(PlanOptions) keeps the estimate finite; should a plan still
  // come out with an infinite one, refuse it here rather than write bytes
  // that no reader accepts (decode checks stats.cost_seconds).
  if (!std::isfinite(st.cost_seconds) || !std::isfinite(st.lower_bound_cost_seconds))
    fail(ErrorCode::kInvalidArgument, "options",
         "the cost estimate of this plan is not finite (alpha_seconds " +
             std::to_string(o.alpha_seconds) + ", intra_host_bytes_per_second " +
             std::to_string(o.intra_host_bytes_per_second) + ", inter_host_bytes_per_second " +
             std::to_string(o.inter_host_bytes_per_second) + ")");
  st.pieces = pieces;
  int64_t all_stage_rounds = 0;
  for (int64_t r : stage_rounds) add_to(all_stage_rounds, r, "rounds");
  if (all_stage_rounds > INT32_MAX) stat_overflow("rounds");  // stages, not budget rounds
  st.rounds = static_cast<int32_t>(all_stage_rounds);
  if (!scratch_use.empty()) {
    std::vector<ScratchLife> lives;
    for (const auto& [key, u] : scratch_use) {
      for (size_t i : groups_seen[std::get<0>(key)]) {
        ScratchLife l;
        l.device = ctx.devices[std::get<1>(key)];
        l.bytes = mul_of(u.volume, ctx.tensors[i].esize, "max_scratch_bytes");
        l.first = u.first == UINT32_MAX ? 0 : u.first;
        l.last = std::max(u.last, l.first);
        lives.push_back(l);
      }
    }
    st.max_scratch_bytes = most_scratch(lives);
  }
  st.stages = pieces > 0 ? 1 + last_stage : 0;
  if (budgeted) {
    const int64_t budget = o.staging_budget_bytes;
    for (int s = 0; s < nstages; ++s) {
      for (size_t d = 0; d < ndev; ++d) {
        const int64_t peers = loads[static_cast<size_t>(s) * ndev + d].peers;
        if (peers > 0 && budget <= 16 * peers && ctx.relay_split && en.split_runs() > 0) {
          // Without sub-runs (Context::relay_split), from the start.
          ctx.relay_split = false;
          st = entry;
          compute_stats(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads,
                        rounds_out);
          return;
        }
        if (peers > 0 && budget <= 16 * peers)
          fail(ErrorCode::kInvalidArgument,
               "options.staging_budget_bytes: " + std::to_string(budget) +
                   " bytes cannot stage device " + std::to_string(ctx.devices[d]) + " with " +
                   std::to_string(peers) + " peers in stage " + std::to_string(s) +
                   " (needs more than 16 bytes per peer)");
      }
    }
  }
  // A pipelined plan of few pieces tries keyed cuts (rounds.h): from the
  // start in a keyed pass with K the most rounds of a stage and the streams
  // tracked (the pass falls back to the pipelined cuts where keyed ones are
  // slower or do not fit the budget). With or without the round schedule:
  // a process planning its part without statistics decides as the whole
  // plan does. Not tried where one round of a stage
  // would hold more than the budget on some device (a device's busiest
  // round holds at least 1/K of its bytes in the stage).
  if (!keyed && !rule.pipeline.empty() && choice_override().keyed >= 0) {
    const int64_t k = *std::max_element(rule.spans.begin(), rule.spans.end());
    bool worth = k > 1 && k <= 32 && (choice_override().keyed > 0 || pieces <= kKeyedPieces);
    for (const DeviceLoad& l : loads)
      if (o.staging_budget_bytes > 0 && l.bytes / k >= o.staging_budget_bytes) worth = false;
    if (worth) {
      struct Keyed {
        Context& c;
        ~Keyed() { c.keyed_keys = c.keyed_granule = 0; }
      } pass{ctx};
      ctx.track_streams = true;
      ctx.keyed_keys = k;
      ctx.keyed_granule = choice_override().keyed > 0 ? choice_override().keyed : kKeyGranule;
      st = entry;
      compute_stats(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads, rounds_out);
      return;
    }
  }
  if (!track_pairs && schedule && !rule.pipeline.empty()) {
    // Pipelined without a budget: the round schedule needs every stream's
    // bytes; from the start with them tracked.
    ctx.track_streams = true;
    st = entry;
    compute_stats(ctx, st, o, schedule, counts, max_bytes, reference, stage_loads, rounds_out);
    return;
  }
  if (stage_loads && rule.cuts()) *stage_loads = loads;
  if (rounds_out) *rounds_out = rule;
  if (keyed_taken) {
    st.peak_staging_bytes = std::max(st.peak_staging_bytes, keyed_peak);
    st.messages = keyed_messages;
  } else if (track_pairs && rule.cuts()) {
    const RoundFigures r = round_schedule(ndev, nstages, rule, loads,
                                          {&pair_bytes, &relay_bytes, &band_streams}, counts);
    st.peak_staging_bytes = std::max(st.peak_staging_bytes, r.peak_staging);
    // A plan's rounds are int32 (PlanStats) and its messages' uint32: never
    // saturated, an error naming the budget that needs them.
    if (r.rounds > INT32_MAX)
      fail(ErrorCode::kOverflow, "stats.rounds",
           std::to_string(r.rounds) + " rounds exceed 2^31 - 1: options.staging_budget_bytes (" +
               std::to_string(o.staging_budget_bytes) + ") is too small for these tensors");
    st.rounds = static_cast<int32_t>(r.rounds);
    st.messages = r.messages;
  }
  if (!counts) return;
  for (size_t d = 0; d < ndev; ++d) (*counts)[d].streams = send_msgs[d] + recv_msgs[d];
  if (keyed_taken) {
    for (size_t d = 0; d < ndev; ++d) {
      DeviceCounts& c = (*counts)[d];
      c.messages = keyed_device_msgs[d];
      c.cuts = std::max<int64_t>(0, c.messages - c.streams);
    }
    return;
  }
  if (track_pairs && rule.cuts()) return;  // exact messages and cuts above
  if (!rule.cuts()) {
    for (DeviceCounts& c : *counts) c.messages = c.streams;
    return;
  }
  bound_cuts(ndev, nstages, rule, loads, *counts);
}

}  // namespace reshard::planning
