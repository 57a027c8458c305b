// Internal: the global statistics' work refused before the planner decides
// anything (core/src/plan/stats_work.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "plan/context.h"

namespace reshard::planning {

// Fleets of more devices than this keep no dense table of the pairs that
// exchange a message (compute_stats): every tensor's pieces are then
// enumerated, none accounted by per-cell arithmetic.
inline constexpr size_t kDensePairDevices = 16384;

// A floor of the piece visits of any pass of compute_stats over ctx
// (stats_visits of one tensor per group of like tensors, whatever the
// deciders choose): per destination cell, its entries times the source
// cells its box overlaps where every piece is enumerated (above
// kDensePairDevices devices), else the lesser of that product and their
// sum. Per-dimension arithmetic over the layouts, O(cells x rank) per
// group. `groups`, when not null, receives the groups counted.
int64_t stats_visits_floor(const Context& ctx, size_t* groups = nullptr);

// Refuses with kResourceExhausted ("request.max_stats_pieces") where
// stats_visits_floor is above ctx.max_stats_pieces (-1: no check): the
// check compute_stats makes on its first pass, made before the decisions
// that precede it (Context::decide_device_cross and the others take
// seconds at 65,536 devices before their first pass). Called by make_plan
// and estimate_plan right after Context::build with their memory limit
// (`max_bytes`, -1: none): where the fewest device pairs the layouts allow
// are above what it lets the statistics track, nothing is refused here, so
// that the first pass refuses on the pairs as it does first.
void check_stats_work(const Context& ctx, int64_t max_bytes);

}  // namespace reshard::planning
