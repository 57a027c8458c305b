// Internal (compute_stats, stats.cc): what one pass of the global
// statistics adds up, and the accounting of one piece into it. The pass's
// other rooms write into a StatsPass: the routed cells
// (routed_cells.{h,cc}, all_to_all_cell.cc), the per-cell arithmetic of
// tiled cells (tiled_cells.{h,cc}), the keyed rounds (keyed_stats.cc), and
// the figures read back at the end of the pass (stats_finish.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "plan/assign_stats.h"
#include "plan/bounds.h"
#include "plan/checked.h"
#include "plan/context.h"
#include "plan/enumerate.h"
#include "plan/pair_bytes.h"
#include "plan/round_figures.h"
#include "plan/rounds.h"
#include "plan/stage_cost.h"
#include "plan/stage_pairs.h"
#include "plan/stream_map.h"

namespace reshard::planning {

// Scratch (pre-reduction) of one (tensor group, owner device, box corner):
// the lowest stage of a message writing it, the highest reading it, its
// elements (scratch_layout.h places them).
struct ScratchUse {
  uint32_t first = UINT32_MAX;  // none yet
  uint32_t last = 0;
  int64_t volume = 0;
};

// What compute_stats does once the pass's figures are read (finish): the
// statistics are complete, or the pass starts again from the statistics it
// was given, without sub-runs (Context::relay_split), keyed
// (Context::keyed_keys, set by finish), or with every stream tracked
// (Context::track_streams).
enum class PassEnd { kDone, kWithoutSplit, kKeyed, kTracked };

class StatsPass {
 public:
  StatsPass(Context& ctx, PlanStats& st, const PlanOptions& o, bool schedule,
            std::vector<DeviceCounts>* counts, int64_t max_bytes, GuardStop* guard);
  StatsPass(const StatsPass&) = delete;
  StatsPass& operator=(const StatsPass&) = delete;

  // `bytes` from dense device sd to dd in one stage's rows `a`, and across
  // hosts when `inter`.
  void charge(std::vector<Acc>& a, uint32_t sd, uint32_t dd, int64_t bytes, bool inter) {
    charge_rows(a, sd, dd, bytes, inter);
    if (inter) add_to(st.cross_host_bytes, bytes, "cross_host_bytes");
  }
  // The same in the rows alone (a key's or a sub's share of a stage).
  static void charge_rows(std::vector<Acc>& a, uint32_t sd, uint32_t dd, int64_t bytes,
                          bool inter) {
    add_to(a[sd].send, bytes, "max_send_bytes");
    add_to(a[dd].recv, bytes, "max_recv_bytes");
    if (!inter) return;
    add_to(a[sd].send_inter, bytes, "max_host_send_bytes");
    add_to(a[dd].recv_inter, bytes, "max_host_recv_bytes");
  }
  // A new pair of devices kept in a hash set or map: refused past
  // max_plan_bytes (each pair costs about kPairBytes; bookkeeping up to
  // kPairFloor is always allowed: the limit is meant for plans that would
  // not fit, and small plans' statistics are never refused in its place).
  void keep_pair() {
    if (max_bytes < 0 || ++pairs_kept * kPairBytes <= std::max(max_bytes, kPairFloor)) return;
    refuse_pairs();
  }
  void add_pair(uint32_t sd, uint32_t dd, int64_t bytes) {
    if (pair_bytes.add(sd, dd, bytes, kPairBytes)) keep_pair();
  }
  // A direct (single-hop) stream of `bytes` from sd to dd: its bytes where
  // pairs are tracked, and the pair in the bit table or the set.
  void direct_pair(uint32_t sd, uint32_t dd, int64_t bytes) {
    if (track_pairs) add_pair(sd, dd, bytes);
    if (dense_pairs) {
      bits[dd * words + (sd >> 6)] |= uint64_t{1} << (sd & 63);
    } else if (pair_set.insert(device_pair_key(sd, dd)).second) {
      keep_pair();
    }
  }
  // Makes room for stage s in the per-stage rows and maps.
  void stage_grow(uint32_t s) {
    while (stage_acc.size() <= s) grow_stage();
  }
  // The index of the band stream `key` (stage << 40 | source dense << 20 |
  // destination dense) in band_streams.
  uint32_t band_index(uint64_t key) {
    auto& slot = band_cache_[(key * 0x9e3779b97f4a7c15ull) >> 56];
    if (slot.first == key) return slot.second;
    bool fresh = false;
    const uint32_t i = band_streams.index(key, &fresh);
    if (fresh) keep_pair();
    slot = {key, i};
    return i;
  }
  // One piece x of destination entry e of t (a group of `copies` tensors of
  // `esum` bytes per element in all).
  void account(const TensorCtx& t, uint32_t e, const Emitted& x, int64_t esum, int64_t copies,
               int64_t& group_pieces);
  // The pieces of destination entry e of t, enumerated.
  void enum_entry(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                  int64_t& group_pieces) {
    en.recv(t, e, [&](const Emitted& x) { account(t, e, x, esum, copies, group_pieces); });
  }
  // GuardStop: once a later stage has pieces, every 4 * ndev pieces
  // (the floor costs a pass over the devices), at the end of a cell or an
  // entry (within a cell the per-cell arithmetic takes back the bytes a
  // device keeps: the rows only grow from cell to cell), whether the floor
  // of the estimate so far is above the single-hop plan's; sets `stopped`.
  bool guard_stops_here(int64_t visited);

  // `n` more pieces (and regions) sent by dense device `sd` to `dd`, where
  // the caller asked for `counts`.
  void count_pieces(uint32_t sd, uint32_t dd, int64_t n) {
    if (!counts) return;
    (*counts)[dd].recv_pieces += n;
    (*counts)[dd].regions += n;
    (*counts)[sd].send_pieces += n;
    (*counts)[sd].regions += n;
  }

  // Reads the pass's figures into `st` (stats_finish.cc): the streams and
  // messages per device, the round rule (pipelined or keyed), the
  // estimate, the bounds; what the caller asked for into `stage_loads`,
  // `rounds_out` and `counts`. kDone, or how to start again.
  PassEnd finish(bool schedule, std::vector<DeviceLoad>* stage_loads, RoundRule* rounds_out);

  Context& ctx;
  PlanStats& st;
  const PlanOptions& o;
  std::vector<DeviceCounts>* counts;
  const size_t ndev;
  const int64_t max_bytes;
  GuardStop* guard;

  // Per stage (0: from the sources; later ones: relays forwarding, scratch
  // sent along a reduction's chain and to its reducer, and the gather after
  // it) and device; as many stages as the pieces name (grown by
  // stage_grow). Deques: growing them keeps references to earlier stages'
  // rows and maps valid (acc, RoutedCells' stream indices).
  std::deque<std::vector<Acc>> stage_acc;
  std::vector<Acc>& acc;  // stage 0's
  // Scratch per (tensor group, owner device, box corner). Every tensor of
  // the group (groups_seen[group_index], the group being accounted) has
  // such a scratch, in its own dtype.
  std::map<std::tuple<size_t, uint32_t, std::vector<int64_t>>, ScratchUse> scratch_use;
  std::vector<std::vector<size_t>> groups_seen;
  size_t group_index = 0;
  int32_t last_stage = 0;
  bool relayed = false;
  int64_t pieces = 0;

  // A keyed pass (Context::keyed_keys) enumerates every piece, and like
  // tensors share their keys only with their element size (key_blocks).
  const int64_t nkeys;
  const bool keyed;
  // Keyed pass: each stream's keys (stage << 40 | source dense << 20 |
  // destination dense), and per stage, key and device the bytes of that
  // key's round (send, recv and their parts across hosts); the group's
  // blocks (key_blocks of its representative).
  std::unordered_map<uint64_t, uint32_t> key_streams;
  // Keyed pass: per stream (keyed as key_streams) the kinds of forward it
  // feeds (bits 0-3) and makes (bits 4-7): keyed_kind.
  std::unordered_map<uint64_t, uint8_t> key_stream_kinds;
  std::deque<std::vector<std::vector<Acc>>> key_acc;
  KeyBlocks group_blocks;
  // Per key offset r (KeyOffsets, mod K): the bytes per element of the
  // group's tensors whose keys start at r; they sum to the group's.
  std::array<int64_t, 32> group_key_esum{};
  std::vector<KeyBlocks> tensor_blocks;  // per tensor (tensor_key_blocks)
  int64_t key_split = 0;                 // pieces the keyed cuts add
  // Per device, where counted: the pieces keyed cuts add at its sending and
  // receiving ends, added to `counts` only where the cuts are taken.
  std::vector<int64_t> key_send_split, key_recv_split;
  // Keyed pass: sub-messages (RoundRule::subs) priced at each of
  // kSubTrials (P, B): each stream's subs per trial, per trial, stage, sub and
  // device the sub's bytes, the pieces the cuts add (in all and, where
  // counted, per device) and the group's blocks (sub_blocks).
  static constexpr size_t kSubTrials = 4;
  // The most stages the busiest-link estimate of subs decides on
  // (choose_subs).
  static constexpr int kSubStages = 3;
  static constexpr std::array<std::pair<int64_t, int64_t>, kSubTrials> kSubTrial = {
      {{4, 64}, {4, 256}, {8, 64}, {8, 256}}};
  struct SubTrial {
    std::deque<std::vector<std::vector<Acc>>> acc;
    KeyBlocks blocks;
    int64_t split = 0;
    std::vector<int64_t> send_split, recv_split;  // per device, where counted
  };
  std::array<SubTrial, kSubTrials> sub_trials;
  std::unordered_map<uint64_t, std::array<uint32_t, kSubTrials>> sub_streams;  // per trial
  // Trial i's (P, B): kSubTrial's, or forced_subs' alone (sub_choice.h).
  static std::pair<int64_t, int64_t> sub_trial(size_t i);

  // Pairs (dst device row, src device column) that exchange a message in
  // stage 0: bit rows where dense_pairs, else a hash set.
  const bool dense_pairs;
  const size_t words;
  std::vector<uint64_t> bits;
  std::unordered_set<uint64_t> pair_set;
  // Relay stages (index 0 unused): dense while all of them together hold at
  // most kDenseRelayBytes.
  std::deque<StagePairs> relay_pairs;
  Enumerator en;
  // Bytes per (src, dst) stream, needed for the statistics of the rounds:
  // under a staging budget, and in pipelined plans (RoundRule), which are
  // cut without a budget too: their streams' bytes are tracked once a plan
  // turns out to have several stages (Context::track_streams).
  const bool budgeted;
  const bool track_pairs;
  PairBytes pair_bytes;
  std::deque<StreamMap<int64_t>> relay_bytes;
  // Streams cut into relay bands (BandStream), keyed stage << 40 | source
  // dense << 20 | destination dense.
  BandStreams band_streams;
  // Spread cuts counted exactly (Context::track_spread, with track_pairs):
  // every piece enumerated, its elements added per (stream, group of like
  // tensors), the stream keyed as band_streams; records of one stream and
  // group in a row merged. spread_streams (stats_finish.cc) turns them into
  // each stream's spread cuts.
  struct SpreadRecord {
    uint64_t stream;
    uint32_t group;
    int64_t volume;
  };
  const bool spread_runs;
  std::vector<SpreadRecord> spread_records;

  // The guard's reading (guard_stops_here).
  bool stopped = false;
  double guard_single = 0, guard_floor = 0;
  std::optional<Bounds> guard_lb;

  // The stage-0 pieces a region's holders send, accounted without
  // enumerating them (assign_stats.h).
  AssignStats assigned;

  static constexpr int64_t kPairBytes = 48;
  static constexpr int64_t kPairFloor = int64_t{64} << 20;

 private:
  // The keyed rounds of piece x from sd to dd (keyed_stats.cc).
  void count_keys(const Emitted& x, uint32_t sd, uint32_t dd, bool inter, int64_t esum,
                  int64_t copies);
  // Its subs at each trial of sub-messages (keyed_stats.cc).
  void count_subs(const Emitted& x, uint32_t sd, uint32_t dd, bool inter, int64_t esum,
                  int64_t copies);
  ScratchUse& scratch_at(uint32_t device, const Box& box);
  [[noreturn]] void refuse_pairs() const;
  void grow_stage();
  // Refused up front, in time linear in the layouts' entries, when the
  // fewest pairs the layouts allow are already above what keep_pair
  // accepts (it would refuse anyway, after enumerating them).
  void refuse_up_front() const;
  // The keyed cuts' choice at the end of a keyed pass (keyed_stats.cc).
  struct KeyedChoice {
    bool taken = false;
    int64_t messages = 0, peak = 0;
    std::vector<int64_t> device_msgs;
  };
  KeyedChoice choose_keyed(int nstages, RoundRule& rule, const Bounds& lb,
                           std::vector<int64_t>& stage_rounds);
  // Sub-messages' choice after the keyed one (keyed_stats.cc): the trial
  // whose estimate is lowest, taken where below st.cost_seconds; then sets
  // st.cost_seconds, stage_rounds, c and rule (from `base`, a pipelined
  // rule, with subs instead of keys or spread cuts). `by_busiest`: where
  // no trial gains by sub_pipeline, the busiest-link estimate may decide.
  void choose_subs(int nstages, RoundRule& rule, const RoundRule& base, const Bounds& lb,
                   std::vector<int64_t>& stage_rounds, KeyedChoice& c, bool by_busiest = true);
  // Each stream's spread cuts under `rule` from spread_records.
  SpreadStreams spread_streams(const RoundRule& rule) const;

  static constexpr size_t kDenseRelayBytes = size_t{32} << 20;
  size_t dense_relay_bytes_ = 0;
  int64_t pairs_kept = 0;
  // Band streams looked up recently: a direct-mapped cache (a leader's
  // stage-0 bands alternate between its holders' streams).
  static constexpr size_t kBandCache = 256;
  std::array<std::pair<uint64_t, uint32_t>, kBandCache> band_cache_;
  bool guard_asked_ = false;
  int64_t guard_next_ = 0;
  // AssignStats' callbacks.
  struct KeepPair {
    StatsPass* p;
    void operator()() const { p->keep_pair(); }
  } keep_pair_fn_{this};
  struct AddPair {
    StatsPass* p;
    void operator()(uint32_t sd, uint32_t dd, int64_t bytes) const { p->add_pair(sd, dd, bytes); }
  } add_pair_fn_{this};
  struct AccountFn {
    StatsPass* p;
    void operator()(const TensorCtx& t, uint32_t e, const Emitted& x, int64_t esum, int64_t copies,
                    int64_t& group_pieces) const {
      p->account(t, e, x, esum, copies, group_pieces);
    }
  } account_fn_{this};
};

}  // namespace reshard::planning
