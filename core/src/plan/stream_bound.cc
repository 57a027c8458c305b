// A lower bound on the device pairs that exchange data (stream_bound.h).
#include "plan/stream_bound.h"

#include <algorithm>
#include <array>

#include "layout/geometry.h"

namespace reshard::planning {

namespace {

// Relays forward a region only to a host other than its holder's
// (tiled_cells.cc, TiledCells::relay_cell_stats): none when every device is on one host.
bool one_host(const TensorCtx& t) {
  const auto same = [](const GeoTopo& g, int32_t h) {
    return std::all_of(g.host.begin(), g.host.end(), [h](int32_t x) { return x == h; });
  };
  if (t.st->host.empty() || t.dt->host.empty()) return true;
  const int32_t h = t.st->host.front();
  return same(*t.st, h) && same(*t.dt, h);
}

constexpr int64_t kSaturated = int64_t{1} << 62;

int64_t sat_add(int64_t a, int64_t b) { return a > kSaturated - b ? kSaturated : a + b; }

}  // namespace

// Source cells of tiled `sg` (over `shape`) that box b overlaps: per dim,
// the chunks (ceil(n/k) elements each) that [lo, hi) touches; 0 for an
// empty box. Saturates at 2^62.
// With `per_dim`, the chunks per dimension too.
int64_t touched_cells(const Geometry& sg, const std::vector<int64_t>& shape, const Box& b,
                      int64_t* per_dim) {
  int64_t cells = 1;
  for (int d = 0; d < sg.rank && cells > 0; ++d) {
    const int64_t n = shape[static_cast<size_t>(d)];
    const int64_t k = std::max<int64_t>(sg.counts[static_cast<size_t>(d)], 1);
    if (b.hi[d] <= b.lo[d] || n <= 0) return 0;
    const int64_t chunk = n / k + (n % k != 0);
    const int64_t touched = (b.hi[d] - 1) / chunk - b.lo[d] / chunk + 1;
    if (per_dim) per_dim[d] = touched;
    cells = touched > (int64_t{1} << 62) / cells ? int64_t{1} << 62 : cells * touched;
  }
  return cells;
}

int64_t stats_visits(const TensorCtx& t, bool enumerated, bool relays, int64_t split_min_bytes) {
  const Geometry& dg = *t.dg;
  const Geometry& sg = *t.sg;
  // A replicated tiled source: a region of at least split_min_bytes reaches
  // an entry on a host without a source device as one piece per holder (up
  // to the region's extent; Enumerator::split).
  const int64_t src_cells = sg.tiled ? sg.num_cells() : 0;
  const int64_t replicas =
      src_cells > 0 ? static_cast<int64_t>(t.src->num_entries()) / src_cells : 1;
  std::vector<int32_t> src_hosts;
  if (enumerated && replicas > 1) {
    src_hosts = t.st->host;
    std::sort(src_hosts.begin(), src_hosts.end());
    src_hosts.erase(std::unique(src_hosts.begin(), src_hosts.end()), src_hosts.end());
  }
  std::vector<int32_t> hosts;
  int64_t visits = 0;
  for_each_dst_cell(t, [&](uint32_t b0, uint32_t b1, const Box& b) {
    std::array<int64_t, kMaxRank> per_dim;
    per_dim.fill(1);
    const int64_t regions = sg.tiled ? touched_cells(sg, t.spec->shape, b, per_dim.data()) : 1;
    const int64_t entries = b1 - b0;
    if (regions == 0) return;
    bool shared = false;  // two entries of the cell on one host
    if (!enumerated && relays) {
      hosts.clear();
      for (uint32_t i = b0; i < b1; ++i) hosts.push_back(t.dt->host[dg.cell_entries[i]]);
      std::sort(hosts.begin(), hosts.end());
      shared = std::adjacent_find(hosts.begin(), hosts.end()) != hosts.end();
    }
    if (!enumerated && !shared) {
      visits = sat_add(visits, sat_add(regions, entries));
      return;
    }
    int64_t cell = regions > kSaturated / entries ? kSaturated : regions * entries;
    if (!src_hosts.empty() && b.volume() / regions * t.esize >= split_min_bytes) {
      // Entries away from every source host, each meeting m pieces a region.
      int64_t away = 0, longest = 0;
      for (uint32_t i = b0; i < b1; ++i)
        away +=
            !std::binary_search(src_hosts.begin(), src_hosts.end(), t.dt->host[dg.cell_entries[i]]);
      for (int d = 0; d < b.rank; ++d) longest = std::max(longest, b.extent(d) / per_dim[d]);
      const int64_t m = std::min(replicas, std::max<int64_t>(longest, 1));
      const int64_t more =
          regions > kSaturated / (away * (m - 1) + 1) ? kSaturated : regions * away * (m - 1);
      cell = sat_add(cell, more);
    }
    visits = sat_add(visits, cell);
  });
  return visits;
}

int64_t min_device_pairs(const Context& ctx) {
  int64_t best = 0;
  const bool relays = ctx.input.options.relays;
  for (const TensorCtx& t : ctx.tensors) {
    const Geometry& sg = *t.sg;
    if (!sg.tiled || t.S != 1 || t.T != 1 || (relays && !one_host(t))) continue;
    const std::vector<int64_t>& shape = t.spec->shape;
    int64_t pairs = 0;
    for (size_t e = 0; e < t.dst->num_entries(); ++e) {
      int64_t cells = touched_cells(sg, shape, t.dst->box(e));
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
