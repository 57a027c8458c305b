// Internal (compute_stats, stats.cc): the statistics of a group whose
// representative has no choice of sender anywhere (a tiled destination,
// unique source cells, one summand, no cell that may cross hosts): per-cell
// arithmetic over the destination cells, without enumerating pieces
// (docs/planner.md §8). Cells whose relays inside hosts cut regions into
// parts or bands go to the routed cells (routed_cells.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plan/routed_cells.h"
#include "plan/stats_pass.h"

namespace reshard::planning {

class TiledCells {
 public:
  TiledCells(StatsPass& p, RoutedCells& routed) : p_(p), routed_(routed) {}
  // Every cell of t (a group of `copies` tensors of `esum` bytes per
  // element in all), stopping where the guard stops the pass.
  void group(const TensorCtx& t, int64_t esum, int64_t copies, int64_t& group_pieces);
  // Cells group() handed to the routed cells (relay bands, or regions cut
  // into parts).
  int64_t routed_cells() const { return routed_cells_; }

 private:
  // Whether two entries of the cell (entries cell_entries[b0..b1) of tc)
  // share a host (relays inside hosts); sets by_host_.
  bool relay_cell(const TensorCtx& tc, uint32_t b0, uint32_t b1);
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
  int64_t relay_cell_stats(const TensorCtx& tc, size_t c, const Box& B, int64_t es, int64_t cp);

  StatsPass& p_;
  RoutedCells& routed_;
  int64_t routed_cells_ = 0;
  std::vector<std::pair<uint32_t, int64_t>> hv_;       // (holder entry, elements)
  std::vector<Box> regions_;                           // parallel to hv_
  std::vector<std::pair<int32_t, uint32_t>> by_host_;  // (host, entry), sorted
  std::vector<RegionAt> region_at_;
  std::vector<uint32_t> leader_of_;  // per region: its leader's position in a host's entries
  std::unordered_map<int32_t, size_t> on_host_;  // regions per holder host
  std::vector<Leader> leading_;
  std::vector<LeaderRun> runs_;
  std::vector<std::pair<size_t, size_t>> spans_, small_spans_;  // small: one entry
  std::map<int32_t, int64_t> dst_on_host_, dst_on_proc_, vol_on_host_;
  std::vector<int32_t> hv_cols_;     // per region: its holder's column of pair_bytes
  std::vector<uint32_t> run_bytes_;  // per region: its bytes, where group adds them as a run
  std::vector<uint64_t> cell_bits_;
};

}  // namespace reshard::planning
