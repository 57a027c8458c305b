// Internal: the memory make_plan needs, estimated before planning from the
// global statistics' per-device counts (docs/design.md §2.8, `estimate_plan`),
// and the limit it is held to (PlanRequest::max_plan_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/context.h"
#include "reshard/plan.h"

namespace reshard::planning {

// What one tensor range keeps at a time to replay like tensors
// (planner.cc, build_chunk): a kind whose record would pass it enumerates
// every tensor instead. The estimate counts it once per thread.
inline constexpr size_t kReplayBytes = size_t{1} << 20;

// The slot tables a part's enumeration keeps per device and direction
// (planner.cc, MessageBuckets) are dense rows while they hold at most this
// many cells (64 MiB of rows), hash maps beyond.
inline constexpr size_t kDenseBucketCells = size_t{1} << 24;

// The estimate of make_plan(ctx.input, request) from the devices' counts;
// `cut_rounds`: the parts' rounds are cut (RoundRule::cuts);
// `largest` (when not null) receives the estimate of the busiest single part
// planned alone (PlanScope::kProcess with the same threads).
PlanEstimate estimate_parts(const Context& ctx, const std::vector<DeviceCounts>& counts,
                            const PlanRequest& request, int threads, bool cut_rounds,
                            int64_t* largest = nullptr);

// The memory this process may use: physical memory, or a container's or an
// address-space limit when lower (8 GiB when none is known).
int64_t available_memory();

// request.max_plan_bytes resolved: kUnlimitedPlanBytes or a byte count.
int64_t resolve_limit(int64_t max_plan_bytes);

// Fails with kResourceExhausted naming request.max_plan_bytes: the plan
// `e` is above its limit (`largest_part_bytes`: the busiest part alone).
[[noreturn]] void refuse(const PlanEstimate& e, const PlanRequest& request,
                         int64_t largest_part_bytes);

}  // namespace reshard::planning
