// Internal: a lower bound on the device pairs (streams) a plan's statistics
// track, from per-dimension arithmetic over the layouts' entries, computed
// before the statistics enumerate anything (core/src/plan/stream_bound.cc).
#pragma once

#include <cstdint>

#include "plan/context.h"

namespace reshard::planning {

// At least this many distinct (source device, destination device) pairs
// exchange data in the plan of `ctx`: for each tensor whose pieces cannot be
// relayed (relays off, or all its devices on one host) with a tiled source
// and no partial summands, every destination entry receives each source
// cell its box overlaps and it does not hold from a different device (a
// device holds one cell of a tiled layout). The largest tensor's count.
// Costs O(destination entries x rank) per tensor.
int64_t min_device_pairs(const Context& ctx);

// The piece visits of one statistics pass over tensor t (compute_stats
// accounts one tensor per group of like tensors): per destination cell,
// its entries times the source cells its box overlaps where `enumerated`
// (each entry meets each region of the cover at least once: its pieces
// enumerated, or each stream's bytes added for the round schedule) or where
// `relays` (on for t) and two entries of the cell share a host (the
// per-cell arithmetic then enumerates cells whose relays are cut into
// parts or bands), else those counts added (per-cell arithmetic); a region of a replicated source
// of at least `split_min_bytes` counts one piece per holder (up to its extent) for each entry on a
// host without a source device (Enumerator::split). Per-dimension arithmetic over the source's
// splits, O(entries + cells x rank); a source that is not tiled counts one region a cell. An
// estimate (routes may add parts and bands); saturates at 2^62.
int64_t stats_visits(const TensorCtx& t, bool enumerated, bool relays, int64_t split_min_bytes);

// Source cells of tiled `sg` (over `shape`) that box b overlaps: per dim,
// the chunks (ceil(n/k) elements each) that [lo, hi) touches; 0 for an
// empty box. Saturates at 2^62. With `per_dim`, the chunks per dimension too.
int64_t touched_cells(const Geometry& sg, const std::vector<int64_t>& shape, const Box& b,
                      int64_t* per_dim = nullptr);

// Calls f(b0, b1, box) for each destination cell of t that holds entries
// (dg.cell_entries[b0, b1)) and a non-empty box.
template <class F>
void for_each_dst_cell(const TensorCtx& t, F&& f) {
  const Geometry& dg = *t.dg;
  for (int64_t c = 0; c < dg.num_cells(); ++c) {
    const uint32_t b0 = dg.cell_offsets[static_cast<size_t>(c)],
                   b1 = dg.cell_offsets[static_cast<size_t>(c) + 1];
    if (b0 == b1) continue;
    const Box b = t.dst->box(dg.cell_entries[b0]);
    if (!b.empty()) f(b0, b1, b);
  }
}

}  // namespace reshard::planning
