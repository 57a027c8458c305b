// The global statistics' work refused up front (stats_work.h).
#include "plan/stats_work.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "layout/geometry.h"
#include "plan/stream_bound.h"
#include "reshard/error.h"

namespace reshard::planning {

namespace {

constexpr int64_t kSaturated = int64_t{1} << 62;

int64_t sat_add(int64_t a, int64_t b) { return a > kSaturated - b ? kSaturated : a + b; }
int64_t sat_mul(int64_t a, int64_t b) { return a != 0 && b > kSaturated / a ? kSaturated : a * b; }

// stats_visits(t, enumerated, relays, ...) for any `relays`, and for
// `enumerated` false any flags, is at least this: enumerated, it is that
// count itself; else per cell entries x regions or entries + regions.
int64_t floor_of(const TensorCtx& t, bool enumerated, int64_t split_min_bytes) {
  if (enumerated) return stats_visits(t, true, false, split_min_bytes);
  const Geometry& sg = *t.sg;
  int64_t visits = 0;
  for_each_dst_cell(t, [&](uint32_t b0, uint32_t b1, const Box& b) {
    const int64_t regions = sg.tiled ? touched_cells(sg, t.spec->shape, b) : 1;
    if (regions == 0) return;
    const int64_t entries = b1 - b0;
    visits = sat_add(visits, std::min(sat_mul(regions, entries), regions + entries));
  });
  return visits;
}

}  // namespace

int64_t stats_visits_floor(const Context& ctx, size_t* groups) {
  // compute_stats counts one tensor of each group of like tensors (shape
  // and geometries; with relays or keyed cuts, element size and
  // single_hop too): these groups are as coarse or coarser, and each counts
  // the least of its members' counts (the element size, the source's
  // devices and replicas set what a replicated source splits into).
  const bool relays = ctx.input.options.relays;
  const bool enumerated = ctx.devices.size() > kDensePairDevices;
  using Like = std::tuple<std::vector<int64_t>, const Geometry*, const Geometry*, int64_t>;
  std::map<Like, int64_t> least;
  std::map<std::tuple<Like, const GeoTopo*, int64_t, uint32_t>, bool> seen;
  for (const TensorCtx& t : ctx.tensors) {
    Like like{t.spec->shape, t.sg, t.dg, relays ? t.esize : 0};
    if (!seen.emplace(std::make_tuple(like, t.st, t.esize, t.src->num_entries()), true).second)
      continue;
    const int64_t v = floor_of(t, enumerated, ctx.input.options.split_min_bytes);
    auto [it, fresh] = least.emplace(std::move(like), v);
    if (!fresh) it->second = std::min(it->second, v);
  }
  if (groups) *groups = least.size();
  int64_t visits = 0;
  for (const auto& [key, v] : least) visits = sat_add(visits, v);
  return visits;
}

void check_stats_work(const Context& ctx, int64_t max_bytes) {
  if (ctx.max_stats_pieces < 0) return;
  // compute_stats refuses on the device pairs first (min_device_pairs at 48
  // bytes a pair against max_bytes, at least 64 MiB: stats.cc's kPairBytes
  // and kPairFloor): such plans keep that refusal, from the first pass.
  if (max_bytes >= 0 &&
      min_device_pairs(ctx) > std::max(max_bytes, int64_t{64} << 20) / int64_t{48})
    return;
  size_t groups = 0;
  const int64_t visits = stats_visits_floor(ctx, &groups);
  if (visits <= ctx.max_stats_pieces) return;
  auto commas = [](int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  };
  fail(ErrorCode::kResourceExhausted, "request.max_stats_pieces",
       "the global statistics would visit at least " + commas(visits) +
           " pieces (counted from the layouts before planning: one tensor of each of " +
           std::to_string(groups) + " groups of like tensors over " +
           std::to_string(ctx.devices.size()) + " devices), above the limit of " +
           commas(ctx.max_stats_pieces) +
           " (2^31 by default: minutes of one core); plan fewer devices per plan, or raise the "
           "limit (-1: no limit)");
}

}  // namespace reshard::planning
