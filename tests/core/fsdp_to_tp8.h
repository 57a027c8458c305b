// The 405B-style fleet of the statistics' work tests (stats_work_test.cc,
// stream_bound_test.cc): a 2n x 64 bf16 tensor FSDP-sharded over n devices
// (dim 0 in n shards) -> DP(n/8) x TP8 (dim 1 in 8) on the same devices,
// 8 a host.
#pragma once

#include <cstdint>
#include <memory>
#include <numeric>

#include "reshard/layout.h"
#include "reshard/plan.h"

namespace reshard {

inline PlanInput fsdp_to_tp8(int64_t n) {
  PlanInput in;
  auto m = std::make_shared<Mesh>();
  m->axis_names = {"dp", "tp"};
  m->shape = {n / 8, 8};
  m->devices.resize(static_cast<size_t>(n));
  std::iota(m->devices.begin(), m->devices.end(), 0);
  for (int64_t d = 0; d < n; ++d)
    in.topology.add(DeviceInfo{d, static_cast<int32_t>(d), static_cast<int32_t>(d / 8),
                               static_cast<int32_t>(d % 8)});
  TensorSpec t;
  t.name = "w";
  t.shape = {2 * n, 64};
  t.dtype = DType::kBF16;
  NamedSharding s;
  s.mesh = m;
  s.dims = {{"dp", "tp"}, {}};
  t.src = Layout::from_named(s, t.shape, "t");
  s.dims = {{}, {"tp"}};
  t.dst = Layout::from_named(s, t.shape, "t");
  in.tensors.push_back(t);
  return in;
}

}  // namespace reshard
