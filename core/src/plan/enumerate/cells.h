// Cells and the cover (plan/enumerate.h; docs/planner.md §2-§3): shard
// ranges of tiled layouts, the cover of a destination box (cover,
// refine), source choice and splits across replicas (assign, split), the
// hosts of each cell (cell_hosts), the even cuts of a region and the
// destination entries overlapping a box (dst_overlapping).
#pragma once

#include <vector>

#include "plan/enumerate/enumerator.h"

namespace reshard::planning {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Range of shard indices of split (n, k) overlapping [lo, hi), clipped.
inline void shard_range(int64_t n, int64_t k, int64_t lo, int64_t hi, int64_t& a, int64_t& b) {
  const int64_t c = n == 0 ? 0 : ceil_div(n, k);
  if (c == 0 || hi <= lo) {
    a = b = 0;
    return;
  }
  a = lo / c;
  b = std::min(k, ceil_div(hi, c));
}

// The source-cell block index of `region` in the cover of destination box
// `B` (tiled source): sets r.idx and r.n.
inline void cover_position(const TensorCtx& t, const Box& B, const Box& region, Route& r) {
  const std::vector<int64_t>& shape = t.src->shape();
  uint64_t idx = 0, n = 1;
  for (int d = 0; d < region.rank; ++d) {
    const int64_t count = t.sg->counts[d];
    const int64_t chunk = ceil_div(shape[static_cast<size_t>(d)], count);
    int64_t a = 0, b = 0;
    shard_range(shape[static_cast<size_t>(d)], count, B.lo[d], B.hi[d], a, b);
    const int64_t s = chunk > 0 ? region.lo[d] / chunk : 0;
    idx = idx * static_cast<uint64_t>(b - a) + static_cast<uint64_t>(s - a);
    n *= static_cast<uint64_t>(b - a);
  }
  r.idx = idx;
  r.n = n;
}

// Calls f(cell, region) for every cell of a tiled layout (per-dim splits of
// `shape` into `counts`) whose box overlaps `q`, in row-major cell order;
// `region` is the cell's box clipped to `q` (never empty).
template <class F>
void for_each_tile(const std::vector<int64_t>& shape, const std::array<int64_t, kMaxRank>& counts,
                   int rank, const Box& q, F&& f) {
  int64_t a[kMaxRank], b[kMaxRank], idx[kMaxRank], chunk[kMaxRank];
  for (int d = 0; d < rank; ++d) {
    shard_range(shape[d], counts[d], q.lo[d], q.hi[d], a[d], b[d]);
    if (a[d] >= b[d]) return;
    idx[d] = a[d];
    chunk[d] = ceil_div(shape[d], counts[d]);
  }
  Box region;
  region.rank = rank;
  while (true) {
    int64_t cell = 0;
    bool empty = false;
    for (int d = 0; d < rank; ++d) {
      cell = cell * counts[d] + idx[d];
      region.lo[d] = std::max(q.lo[d], std::min(shape[d], idx[d] * chunk[d]));
      region.hi[d] = std::min(q.hi[d], std::min(shape[d], (idx[d] + 1) * chunk[d]));
      if (region.hi[d] <= region.lo[d]) empty = true;
    }
    if (!empty) f(cell, region);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < b[d]) break;
      idx[d] = a[d];
    }
    if (d < 0) break;
  }
}

template <class F>
void Enumerator::assign(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* holders,
                        size_t n, bool own_region, F&& f) {
  if (t.transit == nullptr) {
    assign_one(t, e, region, holders, n, own_region, f);
    return;
  }
  const std::vector<TransitShare>* shares = t.transit->shares_of(e);
  assign_one(t, e, region, holders, n, own_region, [&](const Emitted& x) {
    if (x.local || t.st->host[x.src_entry] == t.dt->host[e]) {
      f(x);
      return;
    }
    const std::vector<TransitShare>* out = t.transit->send_shares_of(x.src_entry);
    if (shares == nullptr && out == nullptr)
      f(x);
    else
      transit_cut(t, e, shares, out, x, f);
  });
}

template <class F>
void Enumerator::transit_cut(const TensorCtx& t, uint32_t e,
                             const std::vector<TransitShare>* in_shares,
                             const std::vector<TransitShare>* out, const Emitted& x, F&& f) {
  static const std::vector<TransitShare> kNone;
  const std::vector<TransitShare>& shares = in_shares ? *in_shares : kNone;
  // The sending side's shares take the bottom of the piece, the receiving
  // side's the top; where they would overlap, both shrink in proportion
  // to fill the piece between them (scale): each side's NIC keeps the
  // other side's part. Taking the receiving side's alone left a donor's
  // NIC every byte it sends: an elastic grow from FSDP16 on 2 hosts to
  // FSDP24 on 3, where the receiving host's NICs are uneven too.
  if (out == nullptr && shares.empty()) {
    f(x);
    return;
  }
  const double want_top = shares.empty() ? 1.0 : shares.front().lo;
  const double want_low = out == nullptr ? 0.0 : out->back().hi;
  const double scale = want_low > want_top ? 1.0 / (want_low + (1.0 - want_top)) : 1.0;
  // A sending share's bound, and a receiving one's (as they are unscaled).
  const auto bottom = [&](double v) { return v * scale; };
  const auto upper = [&](double v) { return scale == 1.0 ? v : 1.0 - (1.0 - v) * scale; };
  const double top = upper(want_top), low = bottom(want_low);
  const Box& region = x.region;
  const double moved = 1.0 - top + low;
  const int64_t k = static_cast<int64_t>(shares.size() + (out == nullptr ? 0 : out->size())) + 1;
  int dim = -1;
  for (int d = 0; d < region.rank && dim < 0; ++d)
    if (region.extent(d) >= k) dim = d;
  if (dim < 0 || static_cast<double>(region.volume() * t.esize) * moved <
                     static_cast<double>(cross_min_bytes(options_))) {
    f(x);
    return;
  }
  const int64_t lo = region.lo[dim], ext = region.extent(dim);
  const auto cut = [&](double fr) {
    return lo + std::clamp<int64_t>(std::llround(static_cast<double>(ext) * fr), 0, ext);
  };
  // Part `part` of the piece through transit entry `via`, in relay bands:
  // stage 0 from the piece's holder into via's scratch (`into`: 4, the
  // receiving side's, or 6, the sending side's, whose pieces name the entry
  // they are for in `via`; a transit of the other layout's entry swaps
  // them, TransitShare::cross), stage 1 from that scratch to entry e
  // (into + 1).
  const auto through = [&](const Box& part, uint32_t via, uint8_t into) {
    relay_bands(part, t, options_).each(part, [&](const Box& sub, uint32_t band) {
      Emitted in{x.src_entry, via, sub, true, false, x.forced};
      in.scratch = into;
      in.band = band;
      if (into == 6) in.via = e;
      f(in);
      Emitted leave{via, e, sub, true, false, false};
      leave.stage = 1;
      leave.scratch = static_cast<uint8_t>(into + 1);
      leave.band = band;
      f(leave);
    });
  };
  if (out != nullptr) {
    for (size_t i = 0; i < out->size(); ++i) {
      Box part = region;
      part.lo[dim] = i == 0 ? region.lo[dim] : cut(bottom((*out)[i].lo));
      part.hi[dim] = cut(bottom((*out)[i].hi));
      if (part.empty()) continue;
      through(part, (*out)[i].via, (*out)[i].cross ? 4 : 6);
    }
  }
  Box direct = region;
  direct.lo[dim] = cut(low);
  direct.hi[dim] = shares.empty() ? region.hi[dim] : cut(top);
  if (!direct.empty()) {
    Emitted y = x;
    y.region = direct;
    y.own_region = true;
    f(y);
  }
  for (size_t i = 0; i < shares.size(); ++i) {
    Box part = region;
    part.lo[dim] = cut(upper(shares[i].lo));
    part.hi[dim] = i + 1 == shares.size() ? region.hi[dim] : cut(upper(shares[i].hi));
    if (part.empty()) continue;
    through(part, shares[i].via, shares[i].cross ? 6 : 4);
  }
}

template <class F>
void Enumerator::assign_one(const TensorCtx& t, uint32_t e, const Box& region,
                            const uint32_t* holders, size_t n, bool own_region, F&& f) {
  const Geometry& sg = *t.sg;
  const int64_t dev = t.dg->devices[e];
  const int32_t dsum = t.dg->summands[e];
  // One summand at a time, ascending.
  for (int32_t s = 0; s < t.S; ++s) {
    if (t.T > 1 && s % t.T != dsum) continue;
    const uint32_t* R = holders;
    size_t nr = n;
    if (t.S > 1) {
      sel_.clear();
      for (size_t i = 0; i < n; ++i)
        if (sg.summands[holders[i]] == s) sel_.push_back(holders[i]);
      R = sel_.data();
      nr = sel_.size();
    }
    if (nr == 0) uncovered(t, e, region, s);
    if (nr == 1) {
      f(Emitted{R[0], e, region, own_region, sg.devices[R[0]] == dev, true});
      continue;
    }
    bool done = false;
    for (size_t i = 0; i < nr && !done; ++i)
      if (sg.devices[R[i]] == dev) {
        f(Emitted{R[i], e, region, own_region, true, false});
        done = true;
      }
    if (done) continue;
    // Same process, then same host, then anywhere: the replicas at the
    // nearest level share the piece. A large piece is split evenly across
    // them (so replicas on one host share the load as well as replicas on
    // different hosts), a small one goes whole to one chosen by rotation.
    const int32_t dproc = t.dt->process[e];
    const int32_t dhost = t.dt->host[e];
    const uint32_t* N = R;
    size_t nn = nr;
    for (int level = 0; level < 2; ++level) {
      near_.clear();
      for (size_t i = 0; i < nr; ++i)
        if (level == 0 ? t.st->process[R[i]] == dproc : t.st->host[R[i]] == dhost)
          near_.push_back(R[i]);
      if (!near_.empty()) {
        N = near_.data();
        nn = near_.size();
        break;
      }
    }
    if (nn > 1 && split(t, e, region, N, nn, f)) continue;
    f(Emitted{N[e % nn], e, region, own_region, false, false});
  }
}

// The dimension a split of `region` (rank > 0) over n replicas cuts: its
// first with at least n elements, else its longest.
inline int split_dim(const Box& region, size_t n) {
  for (int d = 0; d < region.rank; ++d)
    if (region.extent(d) >= static_cast<int64_t>(n)) return d;
  int dim = 0;
  for (int d = 1; d < region.rank; ++d)
    if (region.extent(d) > region.extent(dim)) dim = d;
  return dim;
}

// Splits `region` evenly across the replicas R[0..nr) along its first
// dimension with at least nr elements (else its longest), part j from
// replica (j + e) % nr. Returns false (nothing emitted) when the piece is
// below options.split_min_bytes or cannot be cut.
template <class F>
bool Enumerator::split(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* R,
                       size_t nr, F&& f) {
  const int64_t bytes = region.volume() * t.esize;
  if (bytes < options_.split_min_bytes || region.rank == 0) return false;
  const int dim = split_dim(region, nr);
  const int64_t ext = region.extent(dim);
  const int64_t m = std::min<int64_t>(ext, static_cast<int64_t>(nr));
  if (m <= 1) return false;
  for (int64_t j = 0; j < m; ++j) {
    Box part = region;
    part.lo[dim] = region.lo[dim] + ext * j / m;
    part.hi[dim] = region.lo[dim] + ext * (j + 1) / m;
    f(Emitted{R[(static_cast<size_t>(j) + e) % nr], e, part, true, false, false});
  }
  return true;
}

template <class F>
void Enumerator::refine(const TensorCtx& t, const Box& B, const std::vector<uint32_t>& cands,
                        F&& f) {
  const Geometry& sg = *t.sg;
  const int rank = sg.rank;
  if (rank == 0) {
    f(B, cands.data(), cands.size(), false);
    return;
  }
  for (int d = 0; d < rank; ++d) {
    auto& v = bounds_[d];
    v.clear();
    v.push_back(B.lo[d]);
    v.push_back(B.hi[d]);
    for (uint32_t c : cands) {
      const Box& cb = sg.boxes[c];
      if (cb.lo[d] > B.lo[d] && cb.lo[d] < B.hi[d]) v.push_back(cb.lo[d]);
      if (cb.hi[d] > B.lo[d] && cb.hi[d] < B.hi[d]) v.push_back(cb.hi[d]);
    }
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  // Per slab of the dimension cut into the most slabs, the candidates that
  // cover it (ascending): a cell's holders are found among its slab's, not
  // among every candidate (which made many small boxes quadratic).
  int key = 0;
  for (int d = 1; d < rank; ++d)
    if (bounds_[d].size() > bounds_[key].size()) key = d;
  const std::vector<int64_t>& kb = bounds_[key];
  const size_t slabs = kb.size() - 1;
  if (active_.size() < slabs) active_.resize(slabs);
  for (size_t i = 0; i < slabs; ++i) active_[i].clear();
  for (uint32_t c : cands) {
    const Box& cb = sg.boxes[c];
    auto first = std::upper_bound(kb.begin(), kb.end(), cb.lo[key]) - kb.begin() - 1;
    for (size_t i = static_cast<size_t>(std::max<ptrdiff_t>(first, 0));
         i < slabs && kb[i] < cb.hi[key]; ++i)
      if (kb[i] >= cb.lo[key]) active_[i].push_back(c);
  }
  size_t idx[kMaxRank] = {};
  Box cell;
  cell.rank = rank;
  std::vector<uint32_t>& holders = refined_;
  while (true) {
    for (int d = 0; d < rank; ++d) {
      cell.lo[d] = bounds_[d][idx[d]];
      cell.hi[d] = bounds_[d][idx[d] + 1];
    }
    holders.clear();
    for (uint32_t c : active_[idx[key]])
      if (sg.boxes[c].contains(cell)) holders.push_back(c);
    f(cell, holders.data(), holders.size(), true);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] + 1 < bounds_[d].size()) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

template <class F>
void Enumerator::cover(const TensorCtx& t, const Box& B, F&& f) {
  if (B.empty()) return;
  const Geometry& sg = *t.sg;
  if (sg.tiled) {
    for_each_tile(t.src->shape(), sg.counts, sg.rank, B, [&](int64_t c, const Box& cell) {
      const uint32_t* h = sg.cell_entries.data() + sg.cell_offsets[static_cast<size_t>(c)];
      const size_t n =
          sg.cell_offsets[static_cast<size_t>(c) + 1] - sg.cell_offsets[static_cast<size_t>(c)];
      f(cell, h, n, false);
    });
    return;
  }
  // Explicit source: candidates from the sweep index, then refinement.
  auto& cands = cands_;
  cands.clear();
  if (sg.rank == 0) {
    for (uint32_t c = 0; c < sg.boxes.size(); ++c) cands.push_back(c);
  } else {
    const int sd = sg.sweep_dim;
    const int64_t from = B.lo[sd] - sg.max_sweep_extent;
    auto lo_it = std::upper_bound(sg.by_lo.begin(), sg.by_lo.end(), from,
                                  [&](int64_t v, uint32_t c) { return v < sg.boxes[c].lo[sd]; });
    for (auto it = lo_it; it != sg.by_lo.end() && sg.boxes[*it].lo[sd] < B.hi[sd]; ++it)
      if (!intersect(sg.boxes[*it], B).empty()) cands.push_back(*it);
    std::sort(cands.begin(), cands.end());
  }
  refine(t, B, cands, f);
}

inline const CellHosts& Enumerator::cell_hosts(const TensorCtx& t) {
  if (t.dg == last_geo_) return *ch_;
  auto [it, fresh] = cell_hosts_.try_emplace(t.dg);
  last_geo_ = t.dg;
  ch_ = &it->second;
  CellHosts& ch = it->second;
  if (!fresh) return ch;
  const Geometry& dg = *t.dg;
  const size_t cells = dg.cell_offsets.empty() ? 0 : dg.cell_offsets.size() - 1;
  ch.cell_offsets.push_back(0);
  ch.member_offsets.push_back(0);
  std::vector<uint32_t> order;
  for (size_t c = 0; c < cells; ++c) {
    order.assign(dg.cell_entries.begin() + dg.cell_offsets[c],
                 dg.cell_entries.begin() + dg.cell_offsets[c + 1]);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return t.dt->host[a] < t.dt->host[b]; });
    for (size_t i = 0; i < order.size(); ++i) {
      const int32_t h = t.dt->host[order[i]];
      if (i == 0 || h != t.dt->host[order[i - 1]]) {
        if (i > 0) ch.member_offsets.push_back(static_cast<uint32_t>(ch.members.size()));
        ch.hosts.push_back(h);
      }
      ch.members.push_back(order[i]);
    }
    if (!order.empty()) ch.member_offsets.push_back(static_cast<uint32_t>(ch.members.size()));
    uint32_t most = 0, fewest = order.empty() ? 0 : UINT32_MAX;
    for (size_t hi = ch.cell_offsets.back(); hi < ch.hosts.size(); ++hi) {
      most = std::max(most, ch.member_offsets[hi + 1] - ch.member_offsets[hi]);
      fewest = std::min(fewest, ch.member_offsets[hi + 1] - ch.member_offsets[hi]);
    }
    ch.max_members.push_back(most);
    ch.min_members.push_back(fewest);
    ch.cell_offsets.push_back(static_cast<uint32_t>(ch.hosts.size()));
  }
  return ch;
}

// Appends the m parts of `region` cut evenly (within one element) along
// dimension `dim`, which has at least m elements.
inline void cut_along(const Box& region, int dim, int64_t m, std::vector<Box>& parts) {
  const int64_t ext = region.extent(dim);
  for (int64_t j = 0; j < m; ++j) {
    Box part = region;
    part.lo[dim] = region.lo[dim] + ext * j / m;
    part.hi[dim] = region.lo[dim] + ext * (j + 1) / m;
    parts.push_back(part);
  }
}

// Splits `region` into at most m parts along its first dimension with at
// least m elements (else its longest).
inline void split_parts(const Box& region, int64_t m, std::vector<Box>& parts) {
  parts.clear();
  int dim = -1;
  for (int d = 0; d < region.rank && dim < 0; ++d)
    if (region.extent(d) >= m) dim = d;
  if (dim < 0) {
    dim = 0;
    for (int d = 1; d < region.rank; ++d)
      if (region.extent(d) > region.extent(dim)) dim = d;
  }
  if (region.rank > 0) m = std::min(m, region.extent(dim));
  if (m <= 1 || region.rank == 0) {
    parts.push_back(region);
    return;
  }
  cut_along(region, dim, m, parts);
}

// Splits `region` into m parts along the outermost dimension where they come
// out within 2% of equal (the largest part less the smallest, over the
// mean: m / extent unless m divides the extent), else the one where they
// come closest — the longest dimension m does not divide, when none it
// divides; fewer when no dimension has m elements (as split_parts). Relay
// loads follow part sizes: 6 rows cut 5 ways give one receiving host twice
// the others' forwarding, and 27 rows cut 7 ways (3 or 4 rows) leave the
// hosts that took 4 a third more than those that took 3, which the
// rotation across regions cannot even out; 71 columns (10 or 11) can.
inline void even_parts(const Box& region, int64_t m, std::vector<Box>& parts) {
  int dim = -1;
  double best = 0;
  for (int d = 0; d < region.rank; ++d) {
    const int64_t ext = region.extent(d);
    if (ext < m || m < 2) continue;
    // The largest part over the smallest, less 1, relative to the mean.
    const double excess =
        1.0 + (ext % m == 0 ? 0.0 : static_cast<double>(m) / static_cast<double>(ext));
    if (dim < 0 || excess < best) {
      dim = d;
      best = excess;
    }
    if (excess <= 1.02) break;
  }
  if (dim < 0) {
    split_parts(region, m, parts);
    return;
  }
  parts.clear();
  cut_along(region, dim, m, parts);
}

template <class F>
void Enumerator::dst_overlapping(const TensorCtx& t, const Box& q, F&& f) {
  const Geometry& dg = *t.dg;
  const int rank = dg.rank;
  if (dg.tiled) {
    for_each_tile(t.dst->shape(), dg.counts, rank, q, [&](int64_t c, const Box&) {
      for (uint32_t i = dg.cell_offsets[static_cast<size_t>(c)];
           i < dg.cell_offsets[static_cast<size_t>(c) + 1]; ++i)
        f(dg.cell_entries[i]);
    });
    return;
  }
  if (rank == 0) {
    for (uint32_t c = 0; c < dg.boxes.size(); ++c) f(c);
    return;
  }
  const int sd = dg.sweep_dim;
  const int64_t from = q.lo[sd] - dg.max_sweep_extent;
  auto lo_it = std::upper_bound(dg.by_lo.begin(), dg.by_lo.end(), from,
                                [&](int64_t v, uint32_t c) { return v < dg.boxes[c].lo[sd]; });
  for (auto it = lo_it; it != dg.by_lo.end() && dg.boxes[*it].lo[sd] < q.hi[sd]; ++it)
    if (!intersect(dg.boxes[*it], q).empty()) f(*it);
}

}  // namespace reshard::planning
