// Test support: the cross-host bytes of a plan whose relays bring each
// element needed on a host into it once (docs/design.md
// §2.4), computed element by element from the layouts and the topology.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "reshard/plan.h"

namespace reshard::testing {

// Whether two entries of `l` have distinct boxes that overlap.
inline bool overlapping_boxes(const Layout& l) {
  if (l.tiled()) return false;
  for (size_t a = 0; a < l.num_entries(); ++a)
    for (size_t b = a + 1; b < l.num_entries(); ++b)
      if (!(l.box(a) == l.box(b)) && !intersect(l.box(a), l.box(b)).empty()) return true;
  return false;
}

// Bytes of t (not partial) that enter hosts when each host takes in each
// element that some destination box on it contains once, unless a source
// device of that host holds the element: per host, the elements held there
// and the elements needed there (the union of its destination boxes) are
// marked, then the needed and unheld ones are counted. This is the
// host-level bound (lower_bound_cross_host_bytes) for a tensor that is not
// partial, overlapping explicit boxes included (their overlap counts once
// per host).
inline int64_t cell_ingress_bytes(const Topology& topo, const TensorSpec& t) {
  Box whole;
  whole.rank = static_cast<int32_t>(t.shape.size());
  for (int d = 0; d < whole.rank; ++d) whole.hi[d] = t.shape[static_cast<size_t>(d)];
  auto each = [&](const Box& b, auto&& f) {
    if (b.empty()) return;
    int64_t idx[kMaxRank];
    for (int d = 0; d < b.rank; ++d) idx[d] = b.lo[d];
    while (true) {
      int64_t off = 0;
      for (int d = 0; d < b.rank; ++d) off = off * whole.extent(d) + idx[d];
      f(static_cast<size_t>(off));
      int d = b.rank - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < b.hi[d]) break;
        idx[d] = b.lo[d];
      }
      if (d < 0) break;
    }
  };
  std::map<int32_t, std::vector<Box>> boxes;  // host -> destination boxes
  for (size_t e = 0; e < t.dst.num_entries(); ++e)
    boxes[topo.info(t.dst.device(e)).host].push_back(t.dst.box(e));
  int64_t bytes = 0;
  std::vector<char> held, needed;
  for (const auto& [host, v] : boxes) {
    held.assign(static_cast<size_t>(std::max<int64_t>(whole.volume(), 1)), 0);
    needed.assign(held.size(), 0);
    for (size_t r = 0; r < t.src.num_entries(); ++r)
      if (topo.info(t.src.device(r)).host == host)
        each(t.src.box(r), [&](size_t i) { held[i] = 1; });
    for (const Box& b : v) each(b, [&](size_t i) { needed[i] = 1; });
    for (size_t i = 0; i < held.size(); ++i)
      if (needed[i] && !held[i]) bytes += dtype_size(t.dtype);
  }
  return bytes;
}

}  // namespace reshard::testing
