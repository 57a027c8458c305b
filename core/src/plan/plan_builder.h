// Internal: write access to a Plan for the planner and the wire decoder.
#pragma once

#include "reshard/plan.h"

namespace reshard {

struct Plan::Builder {
  static std::vector<TensorSpec>& tensors(Plan& p) { return p.tensors_; }
  static Topology& topology(Plan& p) { return p.topology_; }
  static PlanOptions& options(Plan& p) { return p.options_; }
  static PlanStats& stats(Plan& p) { return p.stats_; }
  static bool& has_stats(Plan& p) { return p.has_stats_; }
  static uint64_t& fingerprint(Plan& p) { return p.fingerprint_; }
  static std::vector<int32_t>& processes(Plan& p) { return p.processes_; }
  static std::map<int32_t, ProcessPart>& parts(Plan& p) { return p.parts_; }
  // Every part's digest (Plan::part_digests): set once the parts are final;
  // code that edits parts afterwards (tests) clears or recomputes it.
  static std::vector<uint64_t>& part_digests(Plan& p) { return p.part_digests_; }
};

}  // namespace reshard
