// test_core checks the routes themselves (relays, reduce routes, bands,
// scratch) on small random tensors, where the per-message α makes the
// single-hop plan faster by the estimate and the planner's single-hop
// guard (Context::decide_single_hop) would take it instead. So this
// binary plans with the guard off (planning::ChoiceOverride::single_hop),
// except where a test turns it on: plan_single_hop_test.cc checks the
// guard itself on the same random fleets, every plan against the oracle.
#include "plan/enumerate.h"

namespace {
const bool kRoutesAsBuilt = [] {
  reshard::planning::choice_override().single_hop = 0;
  return true;
}();
}  // namespace
