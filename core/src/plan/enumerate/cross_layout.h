// Relays across hosts, the data (plan/enumerate.h): how the holder hosts
// of a cell share the forwarding (CellShares, water_fill) and the layout
// of a group's regions at element granularity (CrossLayout, linear_boxes).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "plan/enumerate/types.h"

namespace reshard::planning {

// How the holders' hosts of one destination cell share the forwarding of
// a cross route (Route::cross), so that the busiest NIC, holders' included,
// approaches the host send bound. Only for a cell none of whose hosts holds
// any of it (every region crosses to all of its hosts). Each region is cut
// into one share per holder host (its holders send it); host h sends the
// fraction `direct` of its share straight to every receiving host (R
// copies) and the rest once, cut into entry parts that the receiving hosts
// forward to each other (R - 1 copies each, spread over them). With w_h
// the volume host h holds (a region held on k hosts counts 1/k on each), h
// sends w_h ((R - 1) direct_h + 1) and each receiving host (R - 1) / R
// (V - Σ w_h direct_h): `direct` is chosen per host so the largest of those
// is least (water-filling). One holder host: direct 0, the plain scatter
// then all-gather.
struct CellShares {
  bool disjoint = false;
  std::vector<std::pair<int32_t, double>> direct;  // (holder host, fraction), by host
  double of(int32_t host) const {
    auto it = std::lower_bound(direct.begin(), direct.end(), std::make_pair(host, -1.0));
    return it != direct.end() && it->first == host ? it->second : 0.0;
  }
};

// The `direct` fractions minimising the busiest of the hosts' sends (see
// CellShares): w = (host, volume held) sorted by host, R receiving hosts.
// With `devices` (per entry of w, the holder devices of that host) and
// `recv_devices` (the devices of each receiving host), the busiest
// *device's* send instead, each host's sends spread over its devices, and
// no host sending above V (CrossLayout::for_devices).
inline void water_fill(const std::vector<std::pair<int32_t, double>>& w, size_t R,
                       std::vector<std::pair<int32_t, double>>& direct,
                       const std::vector<double>* devices = nullptr, double recv_devices = 1) {
  direct.clear();
  // Per entry: what one of its devices holds.
  auto per = [&](size_t i) { return devices ? w[i].second / (*devices)[i] : w[i].second; };
  double V = 0, top = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    V += w[i].second;
    top = std::max(top, per(i));
  }
  if (R < 2 || V <= 0) return;
  const double r1 = static_cast<double>(R - 1);
  // Balancing devices, no host sends above V, what each receiving host
  // takes in (so the busiest NIC stays at its bound): w ((R - 1) d + 1) <= V.
  auto cap = [&](size_t i) {
    return devices ? std::clamp((V / w[i].second - 1) / r1, 0.0, 1.0) : 1.0;
  };
  auto frac = [&](double tau, size_t i) {
    return std::min(std::clamp((tau / per(i) - 1) / r1, 0.0, 1.0), cap(i));
  };
  auto receivers = [&](double tau) {
    double sent = 0;
    for (size_t i = 0; i < w.size(); ++i)
      if (w[i].second > 0) sent += w[i].second * frac(tau, i);
    return r1 / static_cast<double>(R) * (V - sent) / recv_devices;
  };
  // The busiest holder host (device) sends at least its volume; above that,
  // raising the target lowers what the receiving hosts forward.
  double lo = top, hi = top * static_cast<double>(R);
  if (receivers(lo) > lo) {
    for (int i = 0; i < 64; ++i) {
      const double mid = (lo + hi) / 2;
      (receivers(mid) > mid ? lo : hi) = mid;
    }
    lo = hi;
  }
  for (size_t i = 0; i < w.size(); ++i)
    direct.emplace_back(w[i].first, w[i].second > 0 ? frac(lo, i) : 0.0);
}

// f(box) for the boxes covering elements [s, e) of `B` in row-major order
// (at most 2 rank - 1 boxes; none when s >= e): while [s, e) lies in one
// row of a dimension, that row; then the rest of the first partial row
// (deepest rows first), the whole rows between, and the start of the last
// partial row (outermost rows first), each box B's outside the rows fixed.
template <class F>
inline void each_linear_box(const Box& B, int64_t s, int64_t e, F&& f) {
  if (s >= e) return;
  if (B.rank == 0) {
    f(B);
    return;
  }
  const int rank = B.rank;
  std::array<int64_t, kMaxRank> inner;  // elements of one row of dimension d
  inner[static_cast<size_t>(rank - 1)] = 1;
  for (int d = rank - 2; d >= 0; --d) inner[d] = inner[d + 1] * B.extent(d + 1);
  const auto fix = [&](Box& w, int d, int64_t from, int64_t to) {
    w.lo[d] = B.lo[d] + from;
    w.hi[d] = B.lo[d] + to;
  };
  Box P = B;
  int d = 0;
  while (s / inner[d] == e / inner[d]) {  // one row (s < e: never the last dimension)
    fix(P, d, s / inner[d], s / inner[d] + 1);
    s %= inner[d];
    e %= inner[d];
    ++d;
  }
  const int64_t r0 = s / inner[d], r1 = e / inner[d];
  int64_t a = s % inner[d], b = e % inner[d];
  if (a != 0) {  // the rest of row r0: rows from `start[k]` of each deeper dimension k
    std::array<int64_t, kMaxRank> start;
    Box W = P;
    fix(W, d, r0, r0 + 1);
    int k = d + 1;
    for (;; ++k) {
      const int64_t row = a / inner[k];
      a %= inner[k];
      start[k] = row + (a != 0);
      if (a == 0) break;
      fix(W, k, row, row + 1);
    }
    for (; k > d; --k) {
      if (start[k] < B.extent(k)) {
        fix(W, k, start[k], B.extent(k));
        f(static_cast<const Box&>(W));
      }
      W.lo[k] = B.lo[k];
      W.hi[k] = B.hi[k];
    }
  }
  const int64_t m0 = r0 + (s % inner[d] != 0);
  if (m0 < r1) {
    Box mid = P;
    fix(mid, d, m0, r1);
    f(static_cast<const Box&>(mid));
  }
  if (b != 0) {  // the start of row r1: rows [0, row) of each deeper dimension
    Box W = P;
    fix(W, d, r1, r1 + 1);
    for (int k = d + 1;; ++k) {
      const int64_t row = b / inner[k];
      b %= inner[k];
      if (row > 0) {
        Box x = W;
        fix(x, k, 0, row);
        f(static_cast<const Box&>(x));
      }
      if (b == 0) break;
      fix(W, k, row, row + 1);
    }
  }
}

// The same boxes appended to `out`.
inline void linear_boxes(const Box& B, int64_t s, int64_t e, std::vector<Box>& out) {
  each_linear_box(B, s, e, [&](const Box& b) { out.push_back(b); });
}

// Relays across hosts, at element granularity, for the cells none of whose
// hosts holds any of them (CellShares::disjoint): one layout per *group* —
// every cell of the tensor when all are on the same hosts (CellShares), else
// the cell alone. The group's regions (its cells ascending, each cell's
// cover in order) are read as one sequence; those with at least
// split_min_bytes per receiving host in each share are laid out here, the
// others keep the per-region rule (cross_parts, cross_slower). Each region's
// elements, in row-major order, are cut into one share per holder host
// (equal runs); host h's shares, concatenated, hold w_h elements, of which
// D_h = round(d_h w_h) go direct (d_h from water_fill), spread over the
// shares: floor(P D_h / w_h) of them before position P, each share's first
// elements. The other (entry) elements of every share, concatenated over the
// group, are numbered 0 .. N - 1; those numbered i mod m enter receiving
// host (i + rot) % R, m = R (where N × element size < R × split_min_bytes,
// every region of the group goes to the chunked sequence below instead).
// In a share, each host's entry elements are one contiguous stretch, at
// most 2 rank - 1 boxes (linear_boxes), whose leaders rotate by stretch. So
// holder host h sends R D_h + w_h - D_h elements and each receiving host
// forwards R - 1 times floor(N / R) or one more: every NIC within R
// elements of what water_fill asks, however the regions are cut, and every
// share spread over all receiving hosts. Cutting every region along one
// dimension and placing the parts region by region (planner version 6) left
// some hosts a row more in every region, the busiest NIC up to 3.6x its
// bound on random fleets.
//
// Regions below that size (planner version 10) are laid out too, in a second
// sequence: their entry elements, concatenated over the group, are numbered
// 0 .. Ns - 1 and cut into ms contiguous chunks, chunk j (elements
// [j Ns / ms, (j + 1) Ns / ms)) entering receiving host (j + rot) % R, so a
// share is cut only where a chunk ends (pieces: at most the shares plus ms
// boxes of each chunk). ms = R where the group's other relays already open
// a stream from the holders to every receiving host (runs for every host,
// or direct parts: more chunks add no message), else the most chunks of at
// least cross_min_bytes (the lesser of split_min_bytes and a quarter of
// what one α buys between hosts, at least 4 KiB: the reduce-scatter
// floor), and below R the α–β model chooses between that and single-hop.
// A region held on several holder hosts is cut into shares in proportion
// to the volumes `share_targets` assigns them: the shared volume goes
// preferably to the hosts with less volume of their own (the allocation
// that minimises the largest host volume), equal shares where that is
// balanced.
// Relays across hosts where the receiving hosts are no more than the hosts
// the source spans (planner version 11): a group crosses only where
// single-hop would load a holder host above kCrossGain times the volume V
// each receiving host must take in anyway (every plan's busiest NIC carries
// at least V; the cross route's is at most V: host h sends at most
// max(w_h, the receiving hosts' forwarding), both at most V). Single-hop
// loads holder host h with R times its part of the group (each region split
// evenly over its holders), so with balanced holdings (R w_h <= V, e.g. the
// 405B FSDP dp=1024 source feeding 32 hosts: V / 4) nothing changes.
inline constexpr double kCrossGain = 1.02;

struct CrossSlot {
  int32_t host = 0;      // the holder host of this share
  bool small = false;    // in the chunked sequence (below the size above)
  int64_t a = 0, b = 0;  // the share: elements [a, b) of the region, row-major
  int64_t direct = 0;    // its first `direct` elements go direct
  int64_t entry = 0;     // position of element a + direct in its entry sequence
};
struct CrossLayout {
  bool disjoint = false;  // false: not applicable (a cell's host holds some of it)
  // false: no more receiving hosts than the source spans, and single-hop
  // already loads the busiest NIC within kCrossGain of what each receiving
  // host takes in anyway (cross_gate): the group goes single-hop.
  bool crosses = true;
  // Laid out by the device rule (TensorCtx::device_cross): on no more
  // receiving hosts than the source spans, where single-hop would load a
  // holder device above kCrossGain times the largest cell of the group (the
  // group then crosses whatever the host rule says); on more, wherever the
  // estimate takes the rule. Every region is cut into a run per receiving
  // host and the direct parts water-filled over devices.
  bool for_devices = false;
  bool small_cross = true;  // false: the chunked sequence goes single-hop (α–β)
  int64_t Ns = 0, ms = 0;   // the chunked sequence: elements, chunks
  int64_t N = 0, m = 0, R = 0;
  uint64_t rot = 0;
  using Key = std::array<int64_t, kMaxRank + 1>;  // cell, then the region's lower corner
  std::vector<std::pair<Key, uint32_t>> index;    // sorted; -> first slot
  std::vector<uint32_t> slot_end;                 // per index entry
  std::vector<CrossSlot> slots;
  static Key key(size_t cell, const Box& region) {
    Key k{};
    k[0] = static_cast<int64_t>(cell);
    for (int d = 0; d < region.rank; ++d) k[static_cast<size_t>(d) + 1] = region.lo[d];
    return k;
  }
};

}  // namespace reshard::planning
