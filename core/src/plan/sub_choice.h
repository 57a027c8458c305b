// Internal: tests only (tests/core/plan_property_test.cc). A pipelined
// plan's keyed pass takes sub-messages of P subs of block B wherever the
// staging budget allows (RoundRule::subs; keyed_stats.cc, choose_subs),
// instead of the estimate's choice among its trials. Set before make_plan,
// never while one runs; plans made with it are not what their fingerprint
// says.
#pragma once

#include <cstdint>
#include <utility>

namespace reshard::planning {

// (P, B); P = 0: the estimate's choice; P < 0: never subs.
inline std::pair<int64_t, int64_t>& forced_subs() {
  static std::pair<int64_t, int64_t> o{0, 0};
  return o;
}

}  // namespace reshard::planning
