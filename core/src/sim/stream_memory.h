// Internal: what the streaming simulator (stream.cc) holds, counted as it
// grows, next to the bounds its memory estimate and its guard take (tests
// compare them).
#pragma once

#include <cstdint>

#include "reshard/plan.h"
#include "reshard/simulate.h"

namespace reshard::sim {

// Bytes of one allocation of `bytes`: glibc malloc's 8-byte header, rounded
// to 16, at least 32.
constexpr int64_t alloc_bytes(int64_t bytes) {
  return bytes <= 0 ? 0 : std::max<int64_t>(32, (bytes + 8 + 15) / 16 * 16);
}

// Bytes held, by structure. Vectors count their capacity, hash and tree
// nodes their allocations, hash tables their buckets.
struct StreamBytes {
  int64_t records = 0;  // the lanes' record blocks
  int64_t lanes = 0;    // the lanes and their per-round counts
  int64_t loop = 0;     // the event loop's own state, at its largest
  // What the lanes allow the loop at most: per lane its busiest round's
  // sends and their dependencies (the loop holds one round of each lane).
  int64_t loop_bound = 0;
  int64_t peak = 0;  // the most held at once
  // Records as the loop starts (every part added): the most they hold;
  // the loop frees them as it reads.
  int64_t records_planned = 0;
};

// The loop's bytes for each message it holds (a send of a round some lane
// is in) and for each dependency of one not completed yet.
int64_t loop_bytes_per_send();
int64_t loop_bytes_per_dependency();

// simulate_plan(input, cluster, options), also returning what it counted.
SimResult simulate_plan_counted(const PlanInput& input, const ClusterTopology& cluster,
                                const SimPlanOptions& options, StreamBytes& counted);

}  // namespace reshard::sim
