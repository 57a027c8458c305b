// One pass of the global statistics (stats_pass.h): its state, the
// accounting of one piece, the guard's early stop.
#include "plan/stats_pass.h"

#include <algorithm>
#include <set>
#include <string>

#include "plan/stats_work.h"
#include "plan/stream_bound.h"
#include "reshard/error.h"

namespace reshard::planning {

namespace {

// Stage-0 stream bytes (PairBytes): dense from the start where the table
// takes at most 128 MiB, else once the hash map reaches a quarter of it (a
// table of up to kDensePairCap, and within max_bytes: the 405B plan at
// 16,384 devices has 2^28 streams, 1 GiB as a table against some 17 GiB
// as a map).
constexpr size_t kDensePairCap = size_t{2} << 30;

PairBytes pair_bytes_for(const Context& ctx, bool track_pairs, int64_t max_bytes) {
  const size_t ndev = ctx.devices.size();
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
  PairBytes pb(can_recv, can_send,
               max_bytes < 0 ? kDensePairCap
                             : std::min(kDensePairCap, static_cast<size_t>(std::max(
                                                           max_bytes, StatsPass::kPairFloor))));
  if (track_pairs && pb.table_bytes() <= size_t{128} << 20) pb.make_dense();
  return pb;
}

}  // namespace

StatsPass::StatsPass(Context& ctx_, PlanStats& st_, const PlanOptions& o_, bool schedule,
                     std::vector<DeviceCounts>* counts_, int64_t max_bytes_, GuardStop* guard_)
    : ctx(ctx_),
      st(st_),
      o(o_),
      counts(counts_),
      ndev(ctx_.devices.size()),
      max_bytes(max_bytes_),
      guard(guard_),
      stage_acc(1, std::vector<Acc>(ctx_.devices.size())),
      acc(stage_acc[0]),
      nkeys(ctx_.keyed_keys),
      keyed(ctx_.keyed_keys > 0),
      // Stage 1 is sparse (relays stay inside hosts).
      dense_pairs(ndev <= kDensePairDevices),  // stats_work.h
      words((ndev + 63) / 64),
      bits(dense_pairs ? ndev * words : 0),
      en(o_, ctx_.pre_reduce, ctx_.relay_split),
      budgeted(o_.staging_budget_bytes > 0),
      track_pairs((budgeted || ctx_.track_streams) && schedule),
      pair_bytes(pair_bytes_for(ctx_, track_pairs, max_bytes_)),
      relay_bytes(1),
      spread_runs(track_pairs && ctx_.track_spread),
      assigned({.ndev = ndev,
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
                .keep_pair = keep_pair_fn_,
                .add_pair = add_pair_fn_},
               account_fn_) {
  relay_pairs.emplace_back(0, false);
  band_cache_.fill({BandStreams::kNone, 0});
  refuse_up_front();
}

void StatsPass::refuse_pairs() const {
  fail(ErrorCode::kResourceExhausted, "request.max_plan_bytes",
       "the global statistics track more than " + std::to_string(pairs_kept) +
           " pairs of devices that exchange data (about " +
           std::to_string(pairs_kept * kPairBytes >> 20) + " MiB), above the limit of " +
           std::to_string(max_bytes >> 20) + " MiB (" + std::to_string(max_bytes) +
           " bytes); every device of these " + std::to_string(ndev) +
           " talks to many others: use a coarser layout (fewer devices, or a "
           "replicated source sharded first), or raise the limit");
}

void StatsPass::refuse_up_front() const {
  if (max_bytes < 0 || (dense_pairs && (!track_pairs || pair_bytes.dense()))) return;
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

void StatsPass::grow_stage() {
  stage_acc.emplace_back(ndev);
  const size_t b = StagePairs::dense_bytes(ndev);
  const bool dense = dense_relay_bytes_ + b <= kDenseRelayBytes;
  if (dense) dense_relay_bytes_ += b;
  relay_pairs.emplace_back(ndev, dense);
  relay_bytes.emplace_back();
}

ScratchUse& StatsPass::scratch_at(uint32_t device, const Box& box) {
  ScratchUse& u = scratch_use[{group_index, device,
                               std::vector<int64_t>(box.lo.begin(), box.lo.begin() + box.rank)}];
  u.volume = box.volume();
  return u;
}

void StatsPass::account(const TensorCtx& t, uint32_t e, const Emitted& x, int64_t esum,
                        int64_t copies, int64_t& group_pieces) {
  // A piece into a holder's scratch goes to that source entry's device
  // rather than e's (Emitted::scratch).
  // A transit's scratch (Emitted::scratch 4) is on its transit entry's
  // device, a destination entry's.
  const bool into_scratch = x.scratch == 1 || x.scratch == 3 || x.scratch == 6;
  const GeoTopo& to = into_scratch ? *t.st : *t.dt;
  if (into_scratch || x.scratch == 4) e = x.dst_entry;
  const uint32_t dd = to.dense[e];
  ++group_pieces;
  const int64_t bytes = mul_of(x.region.volume(), esum, "network_bytes");
  // A relay piece's source is a destination entry (stages > 0), a
  // scratch's its owner, a source entry, a transit's its transit entry.
  const GeoTopo& from = x.relay() && (x.scratch == 0 || x.scratch == 5) ? *t.dt : *t.st;
  const uint32_t sd = from.dense[x.src_entry];
  if (x.scratch == 2 || x.scratch == 3 || x.scratch == 5 || x.scratch == 7) {  // read in x.stage
    ScratchUse& u = scratch_at(sd, x.region);
    u.last = std::max(u.last, x.stage);
  }
  if ((x.scratch == 1 && !x.local) || x.scratch == 3 || x.scratch == 4 ||
      x.scratch == 6) {  // written by a message of x.stage
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
  const bool inter = from.host[x.src_entry] != to.host[e];
  charge(stage_acc[x.stage], sd, dd, bytes, inter);
  if (spread_runs) {
    const uint64_t stream = stage_stream_key(x.stage, sd, dd);
    const auto g = static_cast<uint32_t>(group_index);
    if (!spread_records.empty() && spread_records.back().stream == stream &&
        spread_records.back().group == g)
      add_to(spread_records.back().volume, x.region.volume(), "network_bytes");
    else
      spread_records.push_back({stream, g, x.region.volume()});
  }
  if (keyed) count_keys(x, sd, dd, inter, esum, copies);
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
    BandStream& b = band_streams.at(band_index(stage_stream_key(x.stage, sd, dd)));
    b.mask |= 1u << x.band;
    if (track_pairs) add_to(b.bytes[x.band], bytes, "network_bytes");
    return;
  }
  if (x.relay()) {
    const uint64_t key = device_pair_key(sd, dd);
    if (relay_pairs[x.stage].insert(sd, dd)) keep_pair();
    if (track_pairs) add_to(relay_bytes[x.stage][key], bytes, "network_bytes");
    return;
  }
  direct_pair(sd, dd, bytes);
}

bool StatsPass::guard_stops_here(int64_t visited) {
  if (!guard || stopped || last_stage < 1 || visited < guard_next_) return stopped;
  guard_next_ = visited + 4 * static_cast<int64_t>(ndev);
  if (!guard_asked_) {
    guard_single = guard->single_cost();
    guard_asked_ = true;
  }
  if (!guard_lb) guard_lb = compute_bounds(ctx);
  guard_floor = stage_cost_floor(stage_acc, *guard_lb, o);
  stopped = guard_floor > guard_single;
  return stopped;
}

}  // namespace reshard::planning
