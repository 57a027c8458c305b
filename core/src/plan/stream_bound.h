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

}  // namespace reshard::planning
