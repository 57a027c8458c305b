// Groups of like tensors kept across the passes of one decision (group_memo.h).
#include "plan/group_memo.h"

#include <algorithm>
#include <atomic>

#include "plan/checked.h"
#include "plan/routed_cells.h"
#include "plan/stats_pass.h"
#include "plan/tiled_cells.h"

namespace reshard::planning {

namespace {
bool memo_on = true;
}  // namespace

int64_t& tiled_groups_computed() {
  static int64_t groups = 0;
  return groups;
}
bool group_memo_on() { return memo_on; }
void set_group_memo(bool on) { memo_on = on; }

bool GroupMemo::fits(const StatsPass& p, bool schedule, bool reference) {
  return !schedule && !reference && p.counts == nullptr && p.guard == nullptr && !p.keyed &&
         p.dense_pairs && !p.track_pairs;
}

std::vector<int64_t> GroupMemo::key(const StatsPass& p, const std::vector<size_t>& members) const {
  // What a group's per-cell arithmetic reads besides the input: the
  // context's decisions and the budget (staging_options), and per member
  // its own.
  const Context& c = p.ctx;
  std::vector<int64_t> k{
      c.pre_reduce, c.scratch_reserve,        c.relay_split, c.track_streams,
      c.keyed_keys, p.o.staging_budget_bytes, p.max_bytes,   static_cast<int64_t>(members.size()),
      c.keyed_fine};
  k.reserve(k.size() + 9 * members.size());
  for (size_t i : members) {
    const TensorCtx& t = c.tensors[i];
    k.insert(k.end(), {static_cast<int64_t>(i), t.single_hop, t.reduce, t.reduce_bands,
                       t.device_cross, t.fine_lead, t.band_scale, t.joint_entry, t.cross_off});
  }
  return k;
}

bool GroupMemo::compute(const StatsPass& p, const TensorCtx& t, int64_t esum, int64_t copies,
                        GroupDelta& d) {
  PlanStats st;
  StatsPass alone(p.ctx, st, p.o, false, nullptr, p.max_bytes, nullptr);
  RoutedCells routed(alone);
  TiledCells cells(alone, routed);
  int64_t pieces = 0;
  cells.group(t, esum, copies, pieces);
  routed.drain();
  std::atomic_ref<int64_t>(tiled_groups_computed()).fetch_add(1);  // plans run side by side
  // Only what per-cell arithmetic writes (tiled_cells.cc) is merged: a
  // routed cell writes more (bands, stage-0 rows by holder, split runs).
  if (cells.routed_cells() > 0 || alone.stage_acc.size() > 2 || alone.en.split_runs() > 0 ||
      !alone.scratch_use.empty() || !alone.pair_set.empty() || alone.band_streams.size() > 0)
    return false;
  d.pieces = pieces;
  d.last_stage = alone.last_stage;
  d.relayed = alone.relayed;
  d.cross_host_bytes = st.cross_host_bytes;
  d.cross_process_bytes = st.cross_process_bytes;
  d.forwarded_bytes = st.forwarded_bytes;
  d.rows.resize(alone.stage_acc.size());
  for (size_t s = 0; s < alone.stage_acc.size(); ++s)
    for (size_t dev = 0; dev < alone.ndev; ++dev) {
      const Acc& a = alone.stage_acc[s][dev];
      if (a.send != 0 || a.recv != 0 || a.local != 0 || a.send_inter != 0 || a.recv_inter != 0 ||
          a.send_msgs != 0 || a.recv_msgs != 0 || a.send_late != 0 || a.recv_late != 0)
        d.rows[s].emplace_back(static_cast<uint32_t>(dev), a);
    }
  // Counted first: a group of the 405B plan at 16,384 devices has words
  // of bits in most of its 2^22, which grew the list by doubling.
  const auto nonzero = static_cast<size_t>(
      std::count_if(alone.bits.begin(), alone.bits.end(), [](uint64_t w) { return w != 0; }));
  if (nonzero * 2 > alone.bits.size()) {
    d.dense_bits = std::move(alone.bits);
  } else {
    d.bits.reserve(nonzero);
    for (size_t i = 0; i < alone.bits.size(); ++i)
      if (alone.bits[i] != 0) d.bits.emplace_back(i, alone.bits[i]);
  }
  if (alone.stage_acc.size() > 1)
    alone.relay_pairs[1].each(
        [&](uint32_t sd, uint32_t dd) { d.relay_pairs.emplace_back(sd, dd); });
  return true;
}

void GroupMemo::merge(StatsPass& p, const GroupDelta& d) {
  if (d.rows.size() > 1) p.stage_grow(static_cast<uint32_t>(d.rows.size() - 1));
  for (size_t s = 0; s < d.rows.size(); ++s)
    for (const auto& [dev, a] : d.rows[s]) {
      Acc& x = p.stage_acc[s][dev];
      add_to(x.send, a.send, "max_send_bytes");
      add_to(x.recv, a.recv, "max_recv_bytes");
      add_to(x.local, a.local, "local_bytes");
      add_to(x.send_inter, a.send_inter, "max_host_send_bytes");
      add_to(x.recv_inter, a.recv_inter, "max_host_recv_bytes");
      x.send_msgs += a.send_msgs;
      x.recv_msgs += a.recv_msgs;
      add_to(x.send_late, a.send_late, "max_send_bytes");
      add_to(x.recv_late, a.recv_late, "max_recv_bytes");
    }
  for (const auto& [i, w] : d.bits) p.bits[i] |= w;
  for (size_t i = 0; i < d.dense_bits.size(); ++i) p.bits[i] |= d.dense_bits[i];
  for (const auto& [sd, dd] : d.relay_pairs)
    if (p.relay_pairs[1].insert(sd, dd)) p.keep_pair();
  add_to(p.st.cross_host_bytes, d.cross_host_bytes, "cross_host_bytes");
  add_to(p.st.cross_process_bytes, d.cross_process_bytes, "cross_process_bytes");
  add_to(p.st.forwarded_bytes, d.forwarded_bytes, "forwarded_bytes");
  p.relayed = p.relayed || d.relayed;
  p.last_stage = std::max(p.last_stage, d.last_stage);
}

bool GroupMemo::add(StatsPass& p, const TensorCtx& t, const std::vector<size_t>& members,
                    int64_t esum, int64_t copies, int64_t& group_pieces) {
  std::vector<int64_t> k = key(p, members);
  if (routed_.count(k)) return false;
  auto it = kept_.find(k);
  if (it == kept_.end()) {
    GroupDelta d;
    if (!compute(p, t, esum, copies, d)) {
      routed_.emplace(std::move(k), true);
      return false;
    }
    it = kept_.emplace(std::move(k), std::move(d)).first;
  }
  merge(p, it->second);
  group_pieces += it->second.pieces;
  return true;
}

}  // namespace reshard::planning
