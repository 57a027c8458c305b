// A lower bound on the device pairs that exchange data (stream_bound.h).
#include "plan/stream_bound.h"

#include <algorithm>

#include "layout/geometry.h"

namespace reshard::planning {

namespace {

// Relays forward a region only to a host other than its holder's
// (stats.cc, relay_cell_stats): none when every device is on one host.
bool one_host(const TensorCtx& t) {
  const auto same = [](const GeoTopo& g, int32_t h) {
    return std::all_of(g.host.begin(), g.host.end(), [h](int32_t x) { return x == h; });
  };
  if (t.st->host.empty() || t.dt->host.empty()) return true;
  const int32_t h = t.st->host.front();
  return same(*t.st, h) && same(*t.dt, h);
}

}  // namespace

int64_t min_device_pairs(const Context& ctx) {
  int64_t best = 0;
  const bool relays = ctx.input.options.relays;
  for (const TensorCtx& t : ctx.tensors) {
    const Geometry& sg = *t.sg;
    if (!sg.tiled || t.S != 1 || t.T != 1 || (relays && !one_host(t))) continue;
    const std::vector<int64_t>& shape = t.spec->shape;
    int64_t pairs = 0;
    for (size_t e = 0; e < t.dst->num_entries(); ++e) {
      const Box b = t.dst->box(e);
      // Source cells overlapping the box: per dim, the chunks (ceil(n/k)
      // elements each) that [lo, hi) touches.
      int64_t cells = 1;
      for (int d = 0; d < sg.rank && cells > 0; ++d) {
        const int64_t n = shape[static_cast<size_t>(d)];
        const int64_t k = std::max<int64_t>(sg.counts[static_cast<size_t>(d)], 1);
        if (b.hi[d] <= b.lo[d] || n <= 0) {
          cells = 0;
          break;
        }
        const int64_t chunk = n / k + (n % k != 0);
        const int64_t touched = (b.hi[d] - 1) / chunk - b.lo[d] / chunk + 1;
        cells = touched > (int64_t{1} << 62) / cells ? int64_t{1} << 62 : cells * touched;
      }
      if (cells == 0) continue;
      // The one cell this device may hold itself.
      const int64_t device = t.dst->device(e);
      if (std::binary_search(sg.devices.begin(), sg.devices.end(), device)) --cells;
      pairs = pairs > (int64_t{1} << 62) - cells ? int64_t{1} << 62 : pairs + cells;
    }
    best = std::max(best, pairs);
  }
  return best;
}

}  // namespace reshard::planning
