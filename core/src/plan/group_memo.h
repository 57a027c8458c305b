// Internal (compute_stats, stats.cc): what one group of like tensors adds to
// a pass of the global statistics, kept across the passes of one decision.
// The single-hop guard (Context::decide_single_hop) estimates the whole plan
// once per group it tries, and each try changes one group's routes: the
// other groups add to the pass exactly what they added to the try before.
// A group accounted by per-cell arithmetic (TiledCells, no routed cell) adds
// sums to the per-device rows, bits to the stage-0 pair rows, pairs to the
// stage-1 relay pairs and three sums to the statistics, all of which are
// sums or unions: accounted alone into an empty pass and merged, it leaves
// the pass as accounting it in place would (docs/planner.md §7).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "plan/context.h"
#include "plan/stage_cost.h"

namespace reshard::planning {

class StatsPass;

// One group's contribution to a pass (GroupMemo::add).
struct GroupDelta {
  int64_t pieces = 0;  // the representative's pieces (group_pieces)
  int32_t last_stage = 0;
  bool relayed = false;
  int64_t cross_host_bytes = 0, cross_process_bytes = 0, forwarded_bytes = 0;
  std::vector<std::vector<std::pair<uint32_t, Acc>>> rows;  // per stage, non-zero rows
  // Stage-0 pair words: the non-zero ones (index, word), or where more than
  // half of them are, all of them (dense_bits, the pass's size: no more memory).
  std::vector<std::pair<size_t, uint64_t>> bits;
  std::vector<uint64_t> dense_bits;
  std::vector<std::pair<uint32_t, uint32_t>> relay_pairs;  // stage 1 (sd, dd)
};

class GroupMemo {
 public:
  // Whether pass p may take groups from the memo: a pass without the round
  // schedule, counts, guard or keys, over dense pair rows.
  static bool fits(const StatsPass& p, bool schedule, bool reference);
  // Accounts the group (`members`, representative t, accounted by per-cell
  // arithmetic) into p from the memo, computing its contribution alone the
  // first time it is asked for with these decisions. False where the group
  // takes a routed cell (p is untouched: the caller accounts it in place).
  bool add(StatsPass& p, const TensorCtx& t, const std::vector<size_t>& members, int64_t esum,
           int64_t copies, int64_t& group_pieces);

 private:
  std::vector<int64_t> key(const StatsPass& p, const std::vector<size_t>& members) const;
  // Accounts the group alone into an empty pass and reads what it added
  // into d; false where it takes a routed cell.
  static bool compute(const StatsPass& p, const TensorCtx& t, int64_t esum, int64_t copies,
                      GroupDelta& d);
  static void merge(StatsPass& p, const GroupDelta& d);
  std::map<std::vector<int64_t>, GroupDelta> kept_;
  std::map<std::vector<int64_t>, bool> routed_;  // groups that take a routed cell
};

// Groups accounted by per-cell arithmetic so far in this process, alone
// (GroupMemo) or in place (tests read it).
int64_t& tiled_groups_computed();
// Whether decide_single_hop keeps groups across its passes (on; tests turn
// it off to compare).
bool group_memo_on();
void set_group_memo(bool on);

}  // namespace reshard::planning
