// When to cross (plan/enumerate.h; docs/planner.md §5.3): the host rule
// (cross_gate, gate_may_cross) and the device rule (device_crosses).
#pragma once

#include "plan/enumerate/cells.h"

namespace reshard::planning {

inline bool Enumerator::cross_gate(const TensorCtx& t, size_t c, size_t cell_begin,
                                   size_t cell_end) {
  if (t.cross_off) return false;
  if (gate_spec_ == t.spec && gate_geo_ == t.dg && gate_device_ == t.device_cross &&
      (gate_cell_ == SIZE_MAX || gate_cell_ == c))
    return gate_;
  // Per (geometries, element size, shape, cell): tensors of one shape and
  // layouts share the answer (1,137 tensors of 405B, a few shapes).
  gate_key_.assign({reinterpret_cast<intptr_t>(t.sg), reinterpret_cast<intptr_t>(t.dg),
                    reinterpret_cast<intptr_t>(t.st), reinterpret_cast<intptr_t>(t.dt),
                    static_cast<intptr_t>(t.esize), static_cast<intptr_t>(c)});
  for (int64_t x : t.src->shape()) gate_key_.push_back(static_cast<intptr_t>(x));
  gate_key_.push_back(t.device_cross);
  auto it = gates_.find(gate_key_);
  if (it == gates_.end() && !gate_may_cross(t, c, cell_begin, cell_end)) {
    // Every cell on the same hosts answers the same (its group is them all,
    // or, should a host of theirs hold some of them, none crosses unless
    // the device rule's gate above let it).
    it = gates_.emplace(gate_key_, std::make_pair(same_hosts_, false)).first;
    if (same_hosts_) {
      for (size_t k = 0; k + 1 < t.dg->cell_offsets.size(); ++k) {
        gate_key_[5] = static_cast<intptr_t>(k);
        gates_.emplace(gate_key_, it->second);
      }
    }
  }
  if (it == gates_.end()) {
    const CrossLayout& L = cross_layout(t, c, cell_begin, cell_end);
    const bool uniform = uniform_shares_[geo_key(t)].uniform;
    // A cell a host of its holds part of crosses by cross_parts (route),
    // under the device rule alone: its holder devices overloaded.
    it = gates_.emplace(gate_key_, std::make_pair(uniform, L.disjoint ? L.crosses : t.device_cross))
             .first;
    if (uniform) {  // every cell of the group answers the same
      for (size_t k = 0; k + 1 < t.dg->cell_offsets.size(); ++k) {
        gate_key_[5] = static_cast<intptr_t>(k);
        gates_.emplace(gate_key_, it->second);
      }
    }
  }
  gate_spec_ = t.spec;
  gate_geo_ = t.dg;
  gate_device_ = t.device_cross;
  gate_cell_ = it->second.first ? SIZE_MAX : c;
  gate_ = it->second.second;
  return gate_;
}

inline bool Enumerator::gate_may_cross(const TensorCtx& t, size_t c, size_t cell_begin,
                                       size_t cell_end) {
  const Geometry& dg = *t.dg;
  const size_t cells = dg.cell_offsets.size() - 1;
  same_hosts_ = cells > 1;
  for (size_t k = 0; k < cells && same_hosts_; ++k) {
    const size_t b = ch_->cell_offsets[k], e = ch_->cell_offsets[k + 1];
    same_hosts_ = e - b == cell_end - cell_begin &&
                  std::equal(ch_->hosts.begin() + static_cast<std::ptrdiff_t>(b),
                             ch_->hosts.begin() + static_cast<std::ptrdiff_t>(e),
                             ch_->hosts.begin() + static_cast<std::ptrdiff_t>(cell_begin));
  }
  const size_t k0 = same_hosts_ ? 0 : c, k1 = same_hosts_ ? cells : c + 1;
  // What a host may send each receiving host single-hop is at most the
  // group's elements its entries hold (cross_layout's estimate counts each
  // region at most once per host holding it).
  volumes_.clear();
  share_boxes_.clear();
  double V = 0, largest = 0;  // largest: the most a receiving device takes in
  for (size_t k = k0; k < k1; ++k) {
    if (dg.cell_offsets[k] == dg.cell_offsets[k + 1]) continue;
    const Box B = cell_box(t, k);
    if (B.empty()) continue;
    V += static_cast<double>(B.volume());
    largest = std::max(largest, device_intake(k, B));
    share_boxes_.push_back(B);
  }
  const auto R = static_cast<double>(cell_end - cell_begin);
  if (t.sg->tiled) {
    // Cheaper first: a host holds at most its entries times the largest
    // source cell (FSDP over many hosts: 8 shards of 1,024 on each), a
    // device one source cell.
    double cell = 1;
    const std::vector<int64_t>& shape = t.src->shape();
    for (int d = 0; d < t.sg->rank; ++d)
      cell *= static_cast<double>(ceil_div(shape[static_cast<size_t>(d)], t.sg->counts[d]));
    if (R * std::min(V, static_cast<double>(t.st->max_host_entries) * cell) <= kCrossGain * V &&
        !(t.device_cross && R * std::min(V, cell) > kCrossGain * largest))
      return false;
  }
  const size_t entries = t.src->num_entries();
  if (t.device_cross && !same_hosts_ && device_overloaded(t)) return true;
  if (share_boxes_.size() * entries > (size_t{1} << 16)) return true;  // the cover's walk decides
  for (size_t e = 0; e < entries; ++e) {
    const Box S = t.src->box(e);
    if (S.empty()) continue;
    double v = 0;
    for (const Box& B : share_boxes_) v += static_cast<double>(intersect(S, B).volume());
    if (t.device_cross && R * v > kCrossGain * largest) return true;
    if (v > 0) volumes_.emplace_back(t.st->host[e], v);
  }
  merge_volumes();
  double most = 0;
  for (const auto& [h, v] : volumes_) most = std::max(most, v);
  return R * most > kCrossGain * V;
}

inline bool Enumerator::device_overloaded(const TensorCtx& t) {
  // Memoised with the gates, under the cell index -2 (the answer is the
  // tensor's, not a cell's).
  const intptr_t cell = gate_key_[5];
  gate_key_[5] = -2;
  auto it = gates_.find(gate_key_);
  if (it == gates_.end()) {
    const Geometry& dg = *t.dg;
    const size_t cells = dg.cell_offsets.size() - 1, entries = t.src->num_entries();
    bool over = false;
    if (cells * entries <= (size_t{1} << 16)) {
      // What each receiving device takes in at most, and each cell's box
      // and hosts.
      double largest = 0;
      std::vector<std::pair<Box, double>> boxes;
      for (size_t k = 0; k < cells; ++k) {
        const uint32_t b = ch_->cell_offsets[k], e = ch_->cell_offsets[k + 1];
        if (e - b < 2 || dg.cell_offsets[k] == dg.cell_offsets[k + 1]) continue;
        const Box B = cell_box(t, k);
        if (B.empty()) continue;
        largest = std::max(largest, device_intake(k, B));
        boxes.emplace_back(B, static_cast<double>(e - b));
      }
      for (size_t i = 0; i < entries && !over; ++i) {
        const Box S = t.src->box(i);
        double sent = 0;
        for (const auto& [B, R] : boxes) sent += R * static_cast<double>(intersect(S, B).volume());
        over = sent > kCrossGain * largest;
      }
    }
    it = gates_.emplace(gate_key_, std::make_pair(false, over)).first;
  }
  gate_key_[5] = cell;
  return it->second.second;
}

template <class F>
inline bool Enumerator::any_few_cell(const TensorCtx& t, F&& f) {
  const CellHosts& ch = cell_hosts(t);
  const size_t cells = ch.cell_offsets.size() - 1;
  for (size_t c = 0; c < cells; ++c) {
    const size_t b = ch.cell_offsets[c], e = ch.cell_offsets[c + 1];
    if (e - b < 2 || e - b > static_cast<size_t>(t.st->num_hosts)) continue;
    if (t.dg->cell_offsets[c] == t.dg->cell_offsets[c + 1] || cell_box(t, c).empty()) continue;
    if (f(c, b, e)) return true;
  }
  return false;
}

inline bool Enumerator::crosses_few(const TensorCtx& t) {
  return any_few_cell(t, [&](size_t c, size_t b, size_t e) { return cross_gate(t, c, b, e); });
}

inline bool Enumerator::device_crosses(const TensorCtx& t) {
  TensorCtx on = t;
  on.device_cross = true;
  // Every cell needed on several hosts: on more receiving hosts than the
  // source spans a cell always crosses, and the rule chooses its layout.
  const CellHosts& ch = cell_hosts(t);
  for (size_t c = 0; c + 1 < ch.cell_offsets.size(); ++c) {
    const size_t b = ch.cell_offsets[c], e = ch.cell_offsets[c + 1];
    if (e - b < 2) continue;
    if (t.dg->cell_offsets[c] == t.dg->cell_offsets[c + 1] || cell_box(t, c).empty()) continue;
    if (!cross_gate(on, c, b, e)) continue;
    // The rule's layout, or (a host of the cell holding part of it)
    // cross_parts.
    const CrossLayout& L = cross_layout(on, c, b, e);
    if (L.for_devices || !L.disjoint) return true;
  }
  return false;
}

}  // namespace reshard::planning
