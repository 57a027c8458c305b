// Internal: which NIC group a device uses (ClusterTopology::nics_per_host),
// shared by the simulation and its lower bound.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/nic_groups.h"

namespace reshard::sim {

// Per host: its devices, sorted (a device's position picks its NIC group).
struct HostMap {
  std::unordered_map<int32_t, std::vector<int64_t>> devices;
  void add(int32_t host, int64_t device) { devices[host].push_back(device); }
  void finish() {
    for (auto& [h, v] : devices) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
  }
  // NIC groups on `host`: min(n, m) for n NICs (0: one per device) and m
  // devices.
  int64_t groups(int32_t host, int32_t nics) const {
    const auto m = static_cast<int64_t>(devices.at(host).size());
    return std::min<int64_t>(nics == 0 ? m : nics, m);
  }
  // (group, NICs in the group) of `device` on `host` (reshard::nic_group).
  std::pair<int32_t, int32_t> nic_group(int32_t host, int64_t device, int32_t nics) const {
    const std::vector<int64_t>& v = devices.at(host);
    const int64_t i = std::lower_bound(v.begin(), v.end(), device) - v.begin();
    return reshard::nic_group(i, static_cast<int64_t>(v.size()), nics);
  }
};

}  // namespace reshard::sim
