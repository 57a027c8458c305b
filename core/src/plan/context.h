// Internal: the state one make_plan call shares between its steps
// (validation, intersection, source assignment, parts, statistics).
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/enumerate.h"
#include "reshard/plan.h"

namespace reshard::planning {

// Shared state of one make_plan call.
struct Context {
  const PlanInput& input;
  std::vector<TensorCtx> tensors;
  std::vector<int64_t> devices;  // sorted unique devices of all layouts
  std::map<const Geometry*, GeoTopo> topo;
  std::vector<int32_t> processes;

  explicit Context(const PlanInput& in) : input(in) {}

  uint32_t dense(int64_t device) const {
    return static_cast<uint32_t>(std::lower_bound(devices.begin(), devices.end(), device) -
                                 devices.begin());
  }

  // Collects the devices, per-geometry topology and tensor contexts.
  void build();
};

// Entries of geometry topo `gt` on process p.
inline std::pair<const uint32_t*, const uint32_t*> entries_on(const GeoTopo& gt, int32_t p) {
  auto it = std::lower_bound(gt.procs.begin(), gt.procs.end(), p);
  if (it == gt.procs.end() || *it != p) return {nullptr, nullptr};
  const size_t k = static_cast<size_t>(it - gt.procs.begin());
  return {gt.proc_entries.data() + gt.proc_offsets[k],
          gt.proc_entries.data() + gt.proc_offsets[k + 1]};
}

// Global statistics of the plan of `ctx` (core/src/plan/stats.cc). With
// `schedule`, also those of the round schedule (rounds, messages, peak
// staging), which need every stream's bytes; a process planning only its
// part needs just the per-device figures and skips them.
void compute_stats(Context& ctx, PlanStats& st, const PlanOptions& o, bool schedule);

}  // namespace reshard::planning
