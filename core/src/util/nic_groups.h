// Internal: which NIC group a device uses when its host has `nics` NICs
// (PlanOptions::nics_per_host, ClusterTopology::nics_per_host), shared by
// the planner's α–β estimate and bounds and by the fleet simulator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace reshard {

// NIC groups on a host of m devices with n NICs (0: one per device):
// min(n, m). Device i of the m (by id order) uses group i·G/m, and NIC k of
// n is in group k·G/n. Returns (group, NICs in the group).
inline std::pair<int32_t, int32_t> nic_group(int64_t i, int64_t m, int32_t nics) {
  const int64_t n = nics == 0 ? m : nics;
  const int64_t g = std::min(n, m);
  const int64_t group = i * g / m;
  // The k with k·g/n == group: from ceil(group·n/g) to ceil((group+1)·n/g).
  const int64_t first = (group * n + g - 1) / g, last = ((group + 1) * n + g - 1) / g;
  return {static_cast<int32_t>(group), static_cast<int32_t>(last - first)};
}

}  // namespace reshard
