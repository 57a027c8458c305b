// Relays across hosts (plan/enumerate.h; docs/planner.md §5.2): cutting a
// region into entry and direct parts (cross_parts, cross_slower), the
// holder hosts' shares (cell_shares, share_targets) and the group's layout
// at element granularity (cross_layout, layout_parts).
#pragma once

#include <limits>

#include "plan/enumerate/cells.h"

namespace reshard::planning {

inline bool Enumerator::cross_slower(const TensorCtx& t, size_t c, const Box& region, size_t n,
                                     const Route& r) const {
  const double a = options_.alpha_seconds, bx = 1.0 / options_.inter_host_bytes_per_second,
               bi = 1.0 / options_.intra_host_bytes_per_second;
  const auto B = static_cast<double>(region.volume() * t.esize);
  const auto R = static_cast<double>(r.receiving);
  const auto M = static_cast<double>(ch_->max_members[c]);
  const auto nd = static_cast<double>(std::max<size_t>(n, 1));
  // The estimate's model (PlanStats::cost_seconds): a stage's messages run
  // side by side, so it takes one α and its busiest link's bytes; a
  // device's intra-host port and its NIC are separate links. Into each
  // receiving host from the holders, then inside it.
  const bool split = n > 1 && region.volume() * t.esize >= options_.split_min_bytes;
  const double peers = split ? R : std::ceil(R / nd);
  const double inside = M > 1 ? a + bi * (M - 1) * B : 0;
  const double single = a + bx * (split ? R * B / nd : peers * B) + inside;
  // Cross: the holders send the entry parts once and the direct parts to
  // every receiving host (stage 0); the busiest entry host forwards its
  // parts to the others (stage 1); the other hosts fan out (stage 2).
  double sent = 0, entries = 0;
  for (size_t j = 0; j < r.parts.size(); ++j) {
    const auto v = static_cast<double>(r.parts[j].volume() * t.esize);
    if (r.part_entry[j] < 0) {
      sent += R * v;
    } else {
      sent += v;
      ++entries;
    }
  }
  double most = 0;  // bytes the busiest receiving host forwards
  for (int64_t v : forwarding_) most = std::max(most, static_cast<double>(v * t.esize));
  const double stage0 = a + bx * sent / nd;
  const double stage1 = entries > 0 ? a + std::max(bx * (R - 1), bi * (M - 1)) * most : 0;
  // Only for regions too small to give every receiving host a part: larger
  // ones are bandwidth-bound, where the cross route keeps every NIC near its
  // bound and single-hop multiplies the holders' egress by R.
  return entries < R && stage0 + stage1 + inside > single;
}

inline void Enumerator::cross_parts(const TensorCtx& t, size_t c, const Box& region,
                                    const uint32_t* holders, size_t n, Route& r) {
  (void)holders;
  (void)n;
  const CellShares& cs = cell_shares(t, c, r.cell_begin, r.cell_end);
  // One share per holder host (cut evenly), or the whole region from any
  // holder where the cell's hosts hold some of it.
  share_boxes_.clear();
  const size_t nh = r.holder_hosts.size();
  if (cs.disjoint && nh > 1) even_parts(region, static_cast<int64_t>(nh), share_boxes_);
  const bool per_host = cs.disjoint && (nh == 1 || share_boxes_.size() == nh);
  if (!per_host || nh == 1) share_boxes_.assign(1, region);
  int32_t entries = 0;
  for (size_t s = 0; s < share_boxes_.size(); ++s) {
    const int32_t host = per_host ? r.holder_hosts[s] : -1;
    const double a = per_host ? cs.of(host) : 0.0;
    Box rest = share_boxes_[s];
    if (a > 0 && rest.rank > 0) {
      // The direct part: the first fraction `a` along the longest dimension.
      int dim = 0;
      for (int d = 1; d < rest.rank; ++d)
        if (rest.extent(d) > rest.extent(dim)) dim = d;
      const int64_t rows = std::min<int64_t>(
          rest.extent(dim), std::llround(static_cast<double>(rest.extent(dim)) * a));
      if (rows > 0) {
        Box direct = rest;
        direct.hi[dim] = rest.lo[dim] + rows;
        rest.lo[dim] += rows;
        r.parts.push_back(direct);
        r.part_host.push_back(host);
        r.part_entry.push_back(-1);
      }
    }
    if (rest.empty() && rest.rank > 0) continue;
    // Entry parts of at least split_min_bytes (one at least, one per
    // receiving host at most), cut along the first dimension with enough
    // extent.
    const int64_t bytes = rest.volume() * t.esize;
    int64_t m = static_cast<int64_t>(r.receiving);
    if (options_.split_min_bytes > 0) m = std::min<int64_t>(m, bytes / options_.split_min_bytes);
    even_parts(rest, m, entry_boxes_);
    for (const Box& b : entry_boxes_) {
      r.parts.push_back(b);
      r.part_host.push_back(host);
      r.part_entry.push_back(entries++);
    }
  }
  // Each entry part, largest first (then in order), enters the receiving
  // host that forwards the fewest bytes of this region so far, ties broken
  // in cyclic order from `start`: equal parts go to (q + start) % R,
  // unequal ones even out (cuts along a dimension of few rows differ by a
  // row). The hosts left above the least loaded are then a run of e hosts
  // from `start`; start = rot * e lets the regions of a cell, and the cells
  // (rot counts them), take turns at carrying them, e found by a first pass
  // from 0.
  const uint64_t R = r.receiving;
  order_.clear();
  for (size_t j = 0; j < r.parts.size(); ++j)
    if (r.part_entry[j] >= 0) order_.push_back(static_cast<uint32_t>(j));
  std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
    return r.parts[a].volume() > r.parts[b].volume();
  });
  auto place = [&](uint64_t start) {
    forwarding_.assign(R, 0);
    for (uint32_t j : order_) {
      size_t best = start;
      for (uint64_t k = 1; k < R; ++k) {
        const size_t i = static_cast<size_t>((start + k) % R);
        if (forwarding_[i] < forwarding_[best]) best = i;
      }
      forwarding_[best] += r.parts[j].volume();
      r.part_entry[j] = static_cast<int32_t>(best);
    }
  };
  place(0);
  const int64_t least = *std::min_element(forwarding_.begin(), forwarding_.end());
  uint64_t e = 0;
  for (int64_t v : forwarding_) e += v > least;
  place((e == 0 ? r.rot : r.rot * e) % R);
}

inline bool Enumerator::cell_volumes(const TensorCtx& t, size_t c, size_t cell_begin,
                                     size_t cell_end) {
  const Box B = cell_box(t, c);
  if (!share_en_) share_en_ = std::make_unique<Enumerator>(options_);
  const auto hb = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(cell_begin);
  const auto he = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(cell_end);
  bool disjoint = true;
  share_en_->cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
    if (!disjoint) return;
    region_hosts_.clear();
    for (size_t i = 0; i < n; ++i) region_hosts_.push_back(t.st->host[h[i]]);
    std::sort(region_hosts_.begin(), region_hosts_.end());
    region_hosts_.erase(std::unique(region_hosts_.begin(), region_hosts_.end()),
                        region_hosts_.end());
    for (int32_t host : region_hosts_)
      if (std::binary_search(hb, he, host)) disjoint = false;
    if (region_hosts_.empty()) disjoint = false;
    if (!disjoint) return;
    const double v =
        static_cast<double>(region.volume()) / static_cast<double>(region_hosts_.size());
    for (int32_t host : region_hosts_) volumes_.emplace_back(host, v);
  });
  return disjoint;
}

inline const CellShares& Enumerator::cell_shares(const TensorCtx& t, size_t c, size_t cell_begin,
                                                 size_t cell_end) {
  auto& per_cell = shares_[geo_key(t)];
  auto [it, fresh] = per_cell.try_emplace(c);
  CellShares& cs = it->second;
  if (!fresh) return cs;
  const Geometry& dg = *t.dg;
  const size_t cells = dg.cell_offsets.size() - 1;
  // Cells on the same hosts as this one (all of them, typically: a
  // destination replicated over hosts) send through the same receiving
  // hosts, whose forwarding adds up over the cells, while each holder host
  // sends what it holds of every cell: the fractions come from one
  // water-filling over all of those cells (computed once), not cell by
  // cell, which left holder hosts idle while the receiving hosts forwarded
  // more than their share. Otherwise, the cell's own.
  auto [git, gfresh] = uniform_shares_.try_emplace(geo_key(t));
  UniformShares& us = git->second;
  if (gfresh) {
    us.uniform = cells > 1;
    for (size_t k = 0; k < cells && us.uniform; ++k) {
      const size_t b = ch_->cell_offsets[k], e = ch_->cell_offsets[k + 1];
      us.uniform = e - b == cell_end - cell_begin &&
                   std::equal(ch_->hosts.begin() + static_cast<std::ptrdiff_t>(b),
                              ch_->hosts.begin() + static_cast<std::ptrdiff_t>(e),
                              ch_->hosts.begin() + static_cast<std::ptrdiff_t>(cell_begin));
    }
    if (us.uniform) {
      volumes_.clear();
      for (size_t k = 0; k < cells && us.uniform; ++k) {
        if (dg.cell_offsets[k] == dg.cell_offsets[k + 1] || cell_box(t, k).empty()) continue;
        us.uniform = cell_volumes(t, k, ch_->cell_offsets[k], ch_->cell_offsets[k + 1]);
      }
      if (us.uniform) {
        merge_volumes();
        water_fill(volumes_, cell_end - cell_begin, us.shares.direct);
        us.shares.disjoint = true;
      }
    }
  }
  if (us.uniform) {
    cs = us.shares;
    return cs;
  }
  volumes_.clear();
  if (!cell_volumes(t, c, cell_begin, cell_end)) return cs;
  merge_volumes();
  water_fill(volumes_, cell_end - cell_begin, cs.direct);
  cs.disjoint = true;
  return cs;
}

// The volumes a group's shared regions give each of their holder hosts (see
// CrossSlot): `classes` maps each set of holder hosts (sorted) to the
// elements of the group's regions held on exactly those hosts; for each set
// of two hosts or more, `cum` gets the cumulative targets (k + 1 integers
// from 0 to the class's volume), or stays empty where equal shares are the
// balanced allocation. Block coordinate descent on the sum of squared host
// volumes: each class in turn is water-filled over its hosts against the
// others' volumes; its fixed point is the allocation that minimises the
// largest host volume (and then the next largest). Deterministic: the same
// classes give the same targets on every process.
inline void share_targets(const std::map<std::vector<int32_t>, int64_t>& classes,
                          std::map<std::vector<int32_t>, std::vector<int64_t>>& cum) {
  cum.clear();
  std::map<int32_t, double> load;
  struct Shared {
    const std::vector<int32_t>* hosts;
    double volume;
    std::vector<double> t;
  };
  std::vector<Shared> shared;
  double total = 0;
  for (const auto& [hs, v] : classes) {
    total += static_cast<double>(v);
    if (hs.size() == 1) {
      load[hs[0]] += static_cast<double>(v);
      continue;
    }
    const double each = static_cast<double>(v) / static_cast<double>(hs.size());
    shared.push_back({&hs, static_cast<double>(v), std::vector<double>(hs.size(), each)});
    for (int32_t h : hs) load[h] += each;
  }
  if (shared.empty()) return;
  std::vector<std::pair<double, size_t>> others;
  for (int sweep = 0; sweep < 200; ++sweep) {
    double moved = 0;
    for (Shared& s : shared) {
      const size_t k = s.hosts->size();
      others.clear();
      for (size_t i = 0; i < k; ++i) others.emplace_back(load[(*s.hosts)[i]] - s.t[i], i);
      std::sort(others.begin(), others.end());
      // The level λ with Σ max(0, λ - other_i) = volume.
      double level = 0, below = 0;
      for (size_t i = 0; i < k; ++i) {
        below += others[i].first;
        const double l = (s.volume + below) / static_cast<double>(i + 1);
        if (i + 1 == k || l <= others[i + 1].first) {
          level = l;
          break;
        }
      }
      for (const auto& [o, i] : others) {
        const double v = std::max(0.0, level - o);
        moved = std::max(moved, std::abs(v - s.t[i]));
        load[(*s.hosts)[i]] += v - s.t[i];
        s.t[i] = v;
      }
    }
    if (moved <= 1e-9 * total) break;
  }
  for (const Shared& s : shared) {
    const size_t k = s.hosts->size();
    const auto v = static_cast<int64_t>(std::llround(s.volume));
    // Equal within half an element: the equal shares (s n / k) of before.
    bool equal = true;
    for (size_t i = 0; i < k; ++i)
      equal &= std::abs(s.t[i] - s.volume / static_cast<double>(k)) < 0.5;
    if (equal) continue;
    std::vector<int64_t>& c = cum[*s.hosts];
    c.assign(k + 1, 0);
    double acc = 0;
    for (size_t i = 0; i + 1 < k; ++i) {
      acc += s.t[i];
      c[i + 1] = std::clamp<int64_t>(std::llround(acc), c[i], v);
    }
    c[k] = v;
  }
}

inline const CrossLayout& Enumerator::cross_layout(const TensorCtx& t, size_t c, size_t cell_begin,
                                                   size_t cell_end) {
  const CellShares& cs = cell_shares(t, c, cell_begin, cell_end);
  const GeoKey gk = geo_key(t);
  const bool uniform = uniform_shares_[gk].uniform;
  auto [it, fresh] = layouts_.try_emplace(
      std::make_tuple(gk, t.esize, uniform ? SIZE_MAX : c, t.device_cross, t.joint_entry));
  CrossLayout& L = it->second;
  if (!fresh) return L;
  if (!cs.disjoint) return L;
  const Geometry& dg = *t.dg;
  const size_t cells = dg.cell_offsets.size() - 1;
  if (!share_en_) share_en_ = std::make_unique<Enumerator>(options_);
  L.disjoint = true;
  L.R = static_cast<int64_t>(cell_end - cell_begin);
  L.rot = uniform ? 0 : c;
  // Calls f(cell, region, hosts, small) for the group's regions in order,
  // `hosts` the region's holder hosts (sorted, unique), `small` whether its
  // shares give a receiving host less than split_min_bytes (the chunked
  // sequence).
  std::vector<int32_t> hosts;
  std::vector<std::pair<int32_t, int64_t>> devices;  // (holder host, device)
  uint32_t most_members = 0;
  double largest = 0;  // the largest cell: the most a receiving device takes in
  // Pass 0 only: (holder host, the most elements it may send each receiving
  // host in a single-hop plan), and the same per holder device.
  std::vector<std::pair<int32_t, double>>* single = nullptr;
  std::vector<std::pair<int64_t, double>> single_devices;
  const uint32_t* cur_h = nullptr;  // the region's holders, while f runs
  size_t cur_n = 0;
  auto walk = [&](auto&& f) {
    for (size_t k = uniform ? 0 : c; k < (uniform ? cells : c + 1); ++k) {
      if (dg.cell_offsets[k] == dg.cell_offsets[k + 1]) continue;
      const Box B = cell_box(t, k);
      if (B.empty()) continue;
      most_members = std::max(most_members, ch_->max_members[k]);
      largest = std::max(largest, static_cast<double>(B.volume()));
      share_en_->cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
        hosts.clear();
        for (size_t i = 0; i < n; ++i) hosts.push_back(t.st->host[h[i]]);
        std::sort(hosts.begin(), hosts.end());
        hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
        const auto k_hosts = static_cast<int64_t>(hosts.size());
        if (k_hosts == 0) return;
        // Crossing by the device rule, every region is cut into a run per
        // receiving host (each destination device then forwards its cell's
        // share once per other host; the chunked sequence hands whole cells
        // to one host, whose device forwards all of its cell).
        const bool small = !L.for_devices &&
                           (region.volume() / k_hosts) * t.esize < L.R * options_.split_min_bytes;
        for (size_t i = 0; i < n; ++i) devices.emplace_back(t.st->host[h[i]], t.sg->devices[h[i]]);
        if (single) {
          // Single-hop (assign, split): a region of at least split_min_bytes
          // is cut evenly over its n holders along the first dimension with
          // at least n elements, and each band of it again (a holder may get
          // a row more in each); a smaller one goes whole to one of them.
          const auto vol = static_cast<double>(region.volume());
          int dim = -1;
          for (int d = 0; d < region.rank && dim < 0; ++d)
            if (region.extent(d) >= static_cast<int64_t>(n)) dim = d;
          double per = vol;
          if (n > 1 && dim >= 0 && region.volume() * t.esize >= options_.split_min_bytes) {
            const auto ext = static_cast<double>(region.extent(dim));
            per = vol / static_cast<double>(n) +
                  std::min(static_cast<double>(kRelayBands), ext) * vol / ext;
          }
          for (int32_t host : hosts) {
            double on = 0;
            for (size_t i = 0; i < n; ++i) on += t.st->host[h[i]] == host ? per : 0.0;
            single->emplace_back(host, std::min(on, vol));
          }
          for (size_t i = 0; i < n; ++i)
            single_devices.emplace_back(t.sg->devices[h[i]], std::min(per, vol));
        }
        cur_h = h;
        cur_n = n;
        f(k, region, hosts, small);
      });
    }
  };
  // Pass 0: the volume held on each set of holder hosts, and the shares of
  // the sets of several hosts.
  std::map<std::vector<int32_t>, int64_t> classes;
  volumes_.clear();
  single = &volumes_;
  double V = 0;  // what each receiving host takes in
  walk([&](size_t, const Box& region, const std::vector<int32_t>& hs, bool) {
    classes[hs] += region.volume();
    V += static_cast<double>(region.volume());
  });
  single = nullptr;
  // No more receiving hosts than the source spans: cross only where
  // single-hop loads a holder host above kCrossGain V (see kCrossGain).
  if (L.R <= static_cast<int64_t>(t.st->num_hosts)) {
    merge_volumes();
    double most = 0;
    for (const auto& [h, v] : volumes_) most = std::max(most, v);
    const bool by_host = static_cast<double>(L.R) * most > kCrossGain * V;
    // The same per device: the busiest holder device against what each
    // receiving device takes in (TensorCtx::device_cross).
    bool by_device = false;
    std::sort(single_devices.begin(), single_devices.end());
    for (size_t i = 0; i < single_devices.size() && !by_device;) {
      double v = 0;
      size_t j = i;
      for (; j < single_devices.size() && single_devices[j].first == single_devices[i].first; ++j)
        v += single_devices[j].second;
      by_device = static_cast<double>(L.R) * v > kCrossGain * largest;
      i = j;
    }
    L.for_devices = by_device && t.device_cross;
    L.crosses = by_host || L.for_devices;
    if (!L.crosses) return L;
  } else {
    // More receiving hosts than the source spans: the cell crosses. Where
    // each receiving host has one device in the cell, the chunked sequence
    // hands a whole cell to one host, whose one device forwards all of it;
    // the device rule (where the estimate takes it) enters every region
    // into every receiving host, so that each destination device forwards
    // its cell's share once per other host. Cells of several devices per
    // host share the forwarding over their sub-runs already.
    L.for_devices = t.device_cross && most_members == 1;
  }
  std::map<std::vector<int32_t>, std::vector<int64_t>> cum;
  share_targets(classes, cum);
  // Share s of a region of n elements held on `hs`: [bound(s), bound(s + 1)).
  auto share_bounds = [&](const std::vector<int32_t>& hs, int64_t n, std::vector<int64_t>& out) {
    const auto k = static_cast<int64_t>(hs.size());
    out.resize(static_cast<size_t>(k) + 1);
    const auto cit = k > 1 ? cum.find(hs) : cum.end();
    for (int64_t s = 0; s <= k; ++s) {
      if (cit == cum.end()) {
        out[static_cast<size_t>(s)] = s * n / k;
      } else {
        const int64_t V = cit->second.back();
        out[static_cast<size_t>(s)] =
            V > 0 ? static_cast<int64_t>(static_cast<__int128>(n) *
                                         cit->second[static_cast<size_t>(s)] / V)
                  : s * n / k;
      }
    }
  };
  std::vector<int64_t> bounds;
  // Pass 1: the elements each holder host's shares hold, and each holder
  // device's part of them (a share goes out from the region's holders on
  // its host, split evenly: assign).
  volumes_.clear();
  std::vector<std::pair<int64_t, double>> on_device;  // (device, elements)
  std::vector<std::pair<int32_t, int64_t>> here;      // (host, device) of the region
  walk([&](size_t, const Box& region, const std::vector<int32_t>& hs, bool) {
    share_bounds(hs, region.volume(), bounds);
    here.clear();
    if (L.for_devices) {  // only the device rule reads what the devices hold
      for (size_t i = 0; i < cur_n; ++i)
        here.emplace_back(t.st->host[cur_h[i]], t.sg->devices[cur_h[i]]);
      std::sort(here.begin(), here.end());
      here.erase(std::unique(here.begin(), here.end()), here.end());
    }
    for (size_t s = 0; s < hs.size(); ++s) {
      const auto z = static_cast<double>(bounds[s + 1] - bounds[s]);
      volumes_.emplace_back(hs[s], z);
      if (!L.for_devices) continue;
      const auto lo = std::lower_bound(here.begin(), here.end(),
                                       std::make_pair(hs[s], std::numeric_limits<int64_t>::min()));
      auto hi = lo;
      while (hi != here.end() && hi->first == hs[s]) ++hi;
      const auto k = static_cast<double>(std::max<ptrdiff_t>(1, hi - lo));
      for (auto it = lo; it != hi; ++it) on_device.emplace_back(it->second, z / k);
    }
  });
  merge_volumes();
  // Under the device rule: a host's sends go out
  // from its devices in proportion to what they hold, so a host whose
  // volume w_h sits on few of its holder devices sends as fast as w_h /
  // (its most held) of them, not as all of them: counting every holder
  // device left a host's few loaded devices sending its direct parts
  // (rl_sync_uneven_replicas_4_to_2_hosts: 2 of host 0's 8 devices at
  // 1.33x their bound while the 6 others idled). Equal holdings count every
  // holder device, as before. The host rule keeps the host water-filling:
  // weighting it by devices sends more from the hosts than the host send
  // bound (PlanRelays.RandomFleetsKeepTheBusiestNicNearItsBound).
  std::vector<std::pair<int32_t, double>> frac;
  if (L.for_devices) {
    // Crossing by the device rule: the devices' sends balanced, each host's
    // spread over its holder devices and each receiving host's forwarding
    // over its entries (every region enters every receiving host, above).
    std::map<int64_t, double> dev_total;
    for (const auto& [d, v] : on_device) dev_total[d] += v;
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    // Per holder host: the elements its most loaded holder device sends,
    // and its holder devices.
    std::map<int32_t, std::pair<double, double>> held;
    for (const auto& [host, d] : devices) {
      auto& [most, count] = held[host];
      const auto it = dev_total.find(d);
      if (it != dev_total.end()) most = std::max(most, it->second);
      count += 1;
    }
    std::vector<double> sending;  // per holder host: the devices it sends as
    for (const std::pair<int32_t, double>& hv : volumes_) {
      const auto it = held.find(hv.first);
      const double most = it == held.end() ? 0 : it->second.first;
      const double count = it == held.end() ? 0 : it->second.second;
      sending.push_back(most > 0 && count > 1 ? std::clamp(hv.second / most, 1.0, count)
                                              : std::max(1.0, count));
    }
    double entries = 0;
    for (size_t k = uniform ? 0 : c; k < (uniform ? cells : c + 1); ++k)
      entries += static_cast<double>(dg.cell_offsets[k + 1] - dg.cell_offsets[k]);
    water_fill(volumes_, static_cast<size_t>(L.R), frac, &sending,
               std::max(1.0, entries / static_cast<double>(L.R)));
  } else {
    water_fill(volumes_, static_cast<size_t>(L.R), frac);
  }
  // Per holder host: (host, elements it sends direct, position in its
  // shares, elements), then per sequence (big, small) its elements and
  // direct elements.
  struct Held {
    int32_t host;
    int64_t direct, pos, elements;
    int64_t seq_elements[2], seq_direct[2];
  };
  std::vector<Held> held;
  for (size_t i = 0; i < volumes_.size(); ++i) {
    const auto w = static_cast<int64_t>(std::llround(volumes_[i].second));
    const double d = i < frac.size() ? frac[i].second : 0.0;
    held.push_back({volumes_[i].first,
                    std::clamp<int64_t>(std::llround(d * static_cast<double>(w)), 0, w),
                    0,
                    w,
                    {0, 0},
                    {0, 0}});
  }
  // Pass 2: the slots (all_small: every region in the chunked sequence).
  auto lay = [&](bool all_small) {
    L.index.clear();
    L.slot_end.clear();
    L.slots.clear();
    L.N = L.Ns = 0;
    for (Held& h : held)
      h.pos = h.seq_elements[0] = h.seq_elements[1] = h.seq_direct[0] = h.seq_direct[1] = 0;
    walk([&](size_t k, const Box& region, const std::vector<int32_t>& hs, bool small) {
      small |= all_small;
      const int64_t n = region.volume();
      share_bounds(hs, n, bounds);
      L.index.emplace_back(CrossLayout::key(k, region), static_cast<uint32_t>(L.slots.size()));
      for (size_t s = 0; s < hs.size(); ++s) {
        const int32_t host = hs[s];
        Held& h = *std::lower_bound(held.begin(), held.end(), host,
                                    [](const Held& x, int32_t v) { return x.host < v; });
        CrossSlot slot;
        slot.host = host;
        slot.small = small;
        slot.a = bounds[s];
        slot.b = bounds[s + 1];
        // Its share of h's direct elements, spread evenly over h's shares:
        // floor(P D / w) before position P.
        auto before = [&](int64_t pos) {
          return h.elements > 0
                     ? static_cast<int64_t>(static_cast<__int128>(pos) * h.direct / h.elements)
                     : 0;
        };
        slot.direct = before(h.pos + slot.b - slot.a) - before(h.pos);
        int64_t& seq = small ? L.Ns : L.N;
        slot.entry = seq;
        h.pos += slot.b - slot.a;
        h.seq_elements[small] += slot.b - slot.a;
        h.seq_direct[small] += slot.direct;
        seq += slot.b - slot.a - slot.direct;
        L.slots.push_back(slot);
      }
      L.slot_end.push_back(static_cast<uint32_t>(L.slots.size()));
    });
  };
  lay(false);
  // Entry runs of at least split_min_bytes, one per receiving host at most;
  // fewer: every region goes to the chunked sequence. Where the pieces stay
  // bounded (TensorCtx::joint_entry), the bytes of every like tensor count:
  // their runs between the same devices travel in the same messages.
  // Counting one tensor's, 48 bf16 [512, 2048] laid out by the device rule
  // (FSDP16 over 2 hosts -> 4 x tp8) went chunked, each cell's entry part
  // forwarded by one device.
  L.m = L.R;
  if (options_.split_min_bytes > 0) {
    const double runs = static_cast<double>(L.N * t.esize) * (t.joint_entry ? t.share : 1.0) /
                        static_cast<double>(options_.split_min_bytes);
    L.m = std::min<int64_t>(L.m, static_cast<int64_t>(std::min(runs, static_cast<double>(L.R))));
  }
  if (L.N > 0 && L.m < L.R) {
    lay(true);
    L.m = 0;
  }
  // Sorted for lookup (the keys are distinct: a cell's regions are disjoint).
  std::vector<uint32_t> order(L.index.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return L.index[a].first < L.index[b].first; });
  std::vector<std::pair<CrossLayout::Key, uint32_t>> index;
  std::vector<uint32_t> slot_end;
  for (uint32_t i : order) {
    index.push_back(L.index[i]);
    slot_end.push_back(L.slot_end[i]);
  }
  L.index = std::move(index);
  L.slot_end = std::move(slot_end);
  // Too few runs or chunks for every receiving host: the α–β model chooses
  // between the cross route and each receiving host fetching the sequence
  // itself (single-hop into the host, then inside it); the stages add up,
  // each one α and its busiest link (the estimate's model).
  const double a = options_.alpha_seconds, bx = 1.0 / options_.inter_host_bytes_per_second,
               bi = 1.0 / options_.intra_host_bytes_per_second;
  const auto R = static_cast<double>(L.R), M = static_cast<double>(most_members);
  // Bytes per element, over like tensors (TensorCtx::share): the messages,
  // and so the α terms, are theirs together.
  const double es = static_cast<double>(t.esize) * t.share;
  auto cross_faster = [&](int64_t seq_n, int64_t m) {
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    double V = 0, single = 0, stage0 = 0;
    for (const Held& h : held) {
      const auto nd = static_cast<double>(std::max<ptrdiff_t>(
          1,
          std::count_if(devices.begin(), devices.end(),
                        [&](const std::pair<int32_t, int64_t>& x) { return x.first == h.host; })));
      const auto w = static_cast<double>(h.seq_elements[1]),
                 dd = static_cast<double>(h.seq_direct[1]);
      V += w * es;
      single = std::max(single, bx * R * w * es / nd);
      stage0 = std::max(stage0, bx * (R * dd + w - dd) * es / nd);
    }
    // One α per stage, links side by side (as cross_slower).
    const double inside = M > 1 ? a + bi * (M - 1) * V : 0;
    single += a + inside;
    stage0 += a;
    const double most = static_cast<double>((seq_n + m - 1) / m) * es;
    const double stage1 = a + std::max(bx * (R - 1), bi * (M - 1)) * most;
    return stage0 + stage1 + inside <= single;
  };
  // The chunked sequence: a chunk for every receiving host where the
  // holders already open a stream to each of them, else chunks of at least
  // cross_min_bytes.
  // Chunks of like tensors (TensorCtx::share) travel together: their bytes
  // count towards the floor.
  bool streams = L.N > 0;
  for (const Held& h : held) streams |= h.direct > 0;
  L.ms = L.R;
  const int64_t floor_bytes = cross_min_bytes(options_);
  if (!streams && floor_bytes > 0) {
    const double together = static_cast<double>(L.Ns * t.esize) * t.share;
    L.ms = static_cast<int64_t>(
        std::clamp(together / static_cast<double>(floor_bytes), 1.0, static_cast<double>(L.R)));
  }
  if (L.Ns == 0) L.ms = 0;
  if (L.ms > 0 && L.ms < L.R) L.small_cross = cross_faster(L.Ns, L.ms);
  return L;
}

inline int Enumerator::layout_parts(const TensorCtx& t, size_t c, const Box& region, Route& r) {
  const CrossLayout& L = cross_layout(t, c, r.cell_begin, r.cell_end);
  if (!L.disjoint) return -1;
  if (!L.crosses) return 0;
  const CrossLayout::Key key = CrossLayout::key(c, region);
  const auto it = std::lower_bound(L.index.begin(), L.index.end(), key,
                                   [](const std::pair<CrossLayout::Key, uint32_t>& x,
                                      const CrossLayout::Key& k) { return x.first < k; });
  if (it == L.index.end() || it->first != key) return -1;
  const auto pos = static_cast<size_t>(it - L.index.begin());
  if (L.slots[it->second].small && !L.small_cross) return 0;
  // The region's runs (holder host, first element, elements, entry), then
  // their parts.
  runs_.clear();
  auto emit = [&](const CrossSlot& sl, int64_t from, int64_t count, int32_t entry) {
    if (count > 0) runs_.push_back({sl.host, from, count, entry});
  };
  for (uint32_t i = it->second; i < L.slot_end[pos]; ++i) {
    const CrossSlot& sl = L.slots[i];
    emit(sl, sl.a, sl.direct, -1);
    const int64_t len = sl.b - sl.a - sl.direct;
    int64_t from = sl.a + sl.direct;
    if (sl.small) {
      // Chunk j holds positions [j Ns / ms, (j + 1) Ns / ms).
      auto start = [&](int64_t j) {
        return static_cast<int64_t>(static_cast<__int128>(j) * L.Ns / L.ms);
      };
      int64_t x = sl.entry,
              j = std::min<int64_t>(L.ms - 1, sl.entry * L.ms / std::max<int64_t>(L.Ns, 1));
      while (j + 1 < L.ms && start(j + 1) <= x) ++j;
      while (j > 0 && start(j) > x) --j;
      for (int64_t left = len; left > 0; ++j) {
        const int64_t count = std::min(left, start(j + 1) - x);
        if (count <= 0) continue;
        emit(sl, from, count,
             static_cast<int32_t>((static_cast<uint64_t>(j) + L.rot) % static_cast<uint64_t>(L.R)));
        from += count;
        x += count;
        left -= count;
      }
      continue;
    }
    // The entry elements [entry, entry + len) of the sequence: the run of
    // index i takes those at positions x with x % m == i, as one box (or a
    // few) cut in order.
    for (int64_t i = 0; i < L.m && len > 0; ++i) {
      const int64_t count = (sl.entry + len + L.m - 1 - i) / L.m - (sl.entry + L.m - 1 - i) / L.m;
      if (count == 0) continue;
      emit(sl, from, count,
           static_cast<int32_t>((static_cast<uint64_t>(i) + L.rot) % static_cast<uint64_t>(L.R)));
      from += count;
    }
  }
  // Leaders rotate per run, not per box (run k of the region led by entry
  // (k + rot) mod M on a host of M entries). Where a cell's hosts have
  // several entries (M, the most on one host), each run is cut into M
  // sub-runs (equal element counts; fewer where one would hold less than
  // cross_min_bytes, whose α would outweigh the balance), each its own
  // run, so that every entry of a host leads as many: the host's entries
  // share the forwarding (to the other hosts and inside the host) as a
  // broadcast's scatter does, instead of one entry per run forwarding it
  // R - 1 + M - 1 times (planner version 17; 4x the busiest device's bound
  // with one holder into 2 hosts of 8). Cutting only where the cover's
  // runs are fewer than M (the rotation spreading the others) left the
  // busiest device up to 3.1x its bound: consecutive regions' rotations
  // overlap, and a run's entry host is the same in every region.
  const auto M = static_cast<int64_t>(ch_->max_members[c]);
  const int64_t q = relay_split_ && M >= 2 ? M : 1;
  const int64_t sub_elems = std::max<int64_t>(1, cross_min_bytes(options_) / t.esize);
  uint32_t lead = 0;
  if (r.want_runs && q == 1) {  // each run one sub-run, its own lead
    for (const RunSpan& run : runs_)
      r.runs.push_back({run.host, run.entry, lead++, run.from, run.count});
    r.as_runs = true;
    return 1;
  }
  for (const RunSpan& run : runs_) {
    const int64_t cut = std::clamp<int64_t>(
        static_cast<int64_t>(static_cast<double>(run.count) * (t.joint_entry ? t.share : 1.0) /
                             static_cast<double>(sub_elems)),
        1, q);
    split_runs_ += cut > 1;
    for (int64_t k = 0; k < cut; ++k) {
      const auto at = [&](int64_t i) {
        return run.from + static_cast<int64_t>(static_cast<__int128>(run.count) * i / cut);
      };
      // Appended to the parts where they are made (a copy of each through
      // a buffer was a twentieth of the routed statistics of the MoE sync).
      const size_t before = r.parts.size();
      linear_boxes(region, at(k), at(k + 1), r.parts);
      const size_t added = r.parts.size() - before;
      r.part_host.insert(r.part_host.end(), added, run.host);
      r.part_entry.insert(r.part_entry.end(), added, run.entry);
      r.part_lead.insert(r.part_lead.end(), added, lead);
      lead += added > 0;
    }
  }
  return 1;
}

inline void Enumerator::merge_volumes() {
  std::sort(volumes_.begin(), volumes_.end());
  size_t k = 0;
  for (size_t i = 0; i < volumes_.size(); ++i) {
    if (k > 0 && volumes_[k - 1].first == volumes_[i].first)
      volumes_[k - 1].second += volumes_[i].second;
    else
      volumes_[k++] = volumes_[i];
  }
  volumes_.resize(k);
}

}  // namespace reshard::planning
