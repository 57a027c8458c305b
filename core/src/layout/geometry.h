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
  // Per entry its cell; cells -> entries (CSR, entries ascending). Tiled:
  // the cells of the per-dim splits, row-major over counts. Explicit: the
  // entries with equal boxes, cells in ascending order of their boxes;
  // cells of different boxes may overlap.
  std::vector<int64_t> cell_of_entry;
  std::vector<uint32_t> cell_offsets;
  std::vector<uint32_t> cell_entries;
  bool unique_cells = false;  // tiled and every cell held by exactly one entry
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
};

}  // namespace reshard
