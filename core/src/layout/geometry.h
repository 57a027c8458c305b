// Internal: the shape-independent part of a lowered layout. Tensors that
// share a mesh and a spec share one Geometry, so a 1,100-tensor plan over
// 1,024 devices stores a handful of them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "reshard/box.h"
#include "reshard/layout.h"

namespace reshard {

class Geometry {
 public:
  bool tiled = false;
  int32_t rank = 0;
  int32_t num_summands = 1;
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> devices;   // per entry, strictly ascending
  std::vector<int32_t> summands;  // per entry

  // Tiled: per-dim shard counts; per entry its shard index per dim.
  std::array<int64_t, kMaxRank> counts{};
  std::vector<int64_t> shard;  // entry * rank + dim
  // Per entry its (first) cell; cells -> entries (CSR, entries ascending).
  // Tiled: the cells of the per-dim splits, row-major over counts.
  // Explicit: cells in ascending order of their boxes (cell_boxes). A box
  // that overlaps no other distinct box is one cell, its entries those with
  // that box. Distinct boxes that overlap are refined into disjoint
  // fragments (the arrangement of each group of mutually overlapping
  // boxes, by coordinate compression, runs merged along the last
  // dimension), each a cell whose entries are every entry whose box
  // contains it: such an entry has several cells (entry_cells). A group
  // whose refinement would exceed the fragment caps below keeps one cell
  // per distinct box, and those cells overlap (cell_overlaps).
  std::vector<int64_t> cell_of_entry;
  std::vector<uint32_t> cell_offsets;
  std::vector<uint32_t> cell_entries;
  bool unique_cells = false;  // tiled and every cell held by exactly one entry
  // Explicit only: per cell its box; per entry its cells (CSR, ascending);
  // per cell whether it may overlap another cell (a group left unrefined);
  // whether some entry has several cells.
  std::vector<Box> cell_boxes;
  std::vector<uint32_t> entry_cell_offsets, entry_cells;
  std::vector<uint8_t> cell_overlaps;
  bool fragmented = false;
  // Caps on the refinement of overlapping boxes, per layout: the fragments
  // (grid cells of the compressed coordinates) of all refined groups, the
  // (grid cell, entry) incidences the fragments list (Σ over the distinct
  // boxes of the grid cells each covers times its entries), and the pairs
  // of boxes compared to find the groups. A group
  // above what is left keeps one cell per distinct box; past the pair cap
  // no group is refined (every overlapping box keeps its own cell).
  static constexpr int64_t kMaxFragments = int64_t{1} << 18;
  static constexpr int64_t kMaxFragmentWork = int64_t{1} << 22;
  static constexpr int64_t kMaxOverlapPairs = int64_t{1} << 24;
  int64_t num_cells() const {
    if (!tiled) return static_cast<int64_t>(cell_offsets.size()) - 1;
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= counts[d];
    return n;
  }

  // Explicit: per entry box, and an index sorted by lo in `sweep_dim`.
  std::vector<Box> boxes;
  int32_t sweep_dim = 0;
  std::vector<uint32_t> by_lo;  // entries sorted by boxes[e].lo[sweep_dim]
  int64_t max_sweep_extent = 0;

  uint64_t hash = 0;  // stable hash of everything above

  // Calls f(entry) for every entry whose box (for a tensor of `shape`)
  // intersects `query` with a non-empty overlap, in ascending entry order
  // for explicit layouts and in cell order for tiled ones.
  void finalize();

 private:
  void build_explicit_cells(const std::vector<uint32_t>& order);
};

}  // namespace reshard
