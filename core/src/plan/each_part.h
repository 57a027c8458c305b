// Internal: every process part of a plan, planned one batch at a time on one
// set of global statistics and handed over in process order (the fleet
// simulator's source, sim/stream.cc), never all held at once.
#pragma once

#include <cstddef>
#include <functional>

#include "reshard/plan.h"

namespace reshard::planning {

struct PartSink {
  // Called once, after the global statistics and before any part is planned,
  // with the plan holding no part and the memory one batch of parts takes to
  // plan (the busiest part alone times part_batch; 0 without a limit,
  // request.max_plan_bytes = kUnlimitedPlanBytes). It may throw to stop
  // before the parts: the planner does not refuse them itself.
  std::function<void(const Plan&, int64_t batch_bytes)> stats;
  // Called for each part in process order with the plan holding that part
  // alone; the part is dropped when it returns.
  std::function<void(const Plan&)> each;
};

// Parts planned at once on `threads` threads (one each), as make_plan's
// PlanScope::kAll plans them: `threads` when there are at least as many
// parts, else 1 (that part on every thread).
size_t part_batch(int threads, size_t parts);

// make_plan(input, request) with request.scope = PlanScope::kAll, except
// that the parts go to `sink` and the returned plan holds none: each part is
// the one make_plan returns. The memory of the parts is the sink's to weigh
// (PartSink::stats). Other scopes are kInvalidArgument naming request.scope.
Plan plan_each_part(const PlanInput& input, const PlanRequest& request, const PartSink& sink);

}  // namespace reshard::planning
