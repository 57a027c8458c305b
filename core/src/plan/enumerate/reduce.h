// Reduce routes (plan/enumerate.h; docs/planner.md §6): the
// reduce-scatter rule (reduce_route, one_part), the gather's fan-out,
// pre-reduction and chains on the holders' hosts (reduce_part) and the
// stage a cell's gather starts in (cell_shift).
#pragma once

#include "plan/enumerate/cells.h"

namespace reshard::planning {

inline bool Enumerator::reduce_route(const TensorCtx& t, size_t c, const Box& region,
                                     const uint32_t* holders, size_t n, Route& r) {
  if (!reduces(t) || t.S < 2 || t.T > 1 || n == 0) return false;
  const Geometry& dg = *t.dg;
  const uint32_t first = dg.cell_offsets[c], count = dg.cell_offsets[c + 1] - first;
  if (count < 2) {
    // One entry: it reduces the region itself (one part, no gather), its
    // summands pre-reduced on their holders' hosts where they can be.
    if (!pre_reduces(t) || !options_.relays || count == 0 || dg.fragmented) return false;
    r.reduce = true;
    r.pre_reduce = true;
    r.cross = false;
    r.cell_first = first;
    r.cell_count = count;
    // Owners rotate over the cells (planner version 16: a host's devices
    // then own the cells of each other host in turn, where a hash of the
    // region placed them at random: 2.4x the reduce-scatter's volume on the
    // busiest device of a psum in place over 2 hosts of 8), and over the
    // regions of one cell by a hash of the region's offset in it.
    r.rot = c + offset_hash(t, c, region);
    r.parts.assign(1, region);
    return true;
  }
  // Parts no smaller than a quarter of what one α buys between hosts (at
  // least 4 KiB), at most one per entry.
  const double bytes = static_cast<double>(region.volume() * t.esize);
  const double min_part =
      std::max(4096.0, options_.alpha_seconds * options_.inter_host_bytes_per_second / 4);
  auto m = static_cast<int64_t>(std::min(static_cast<double>(count), std::floor(bytes / min_part)));
  // At least as many parts as the cell's hosts (the star gather): a whole
  // number of parts per host (planner version 19). Each host forwards the
  // parts it reduces to every other host, so with m = q nh + e parts (0 < e
  // < nh) e hosts forwarded q + 1 parts of 1/m each, (q + 1)(nh - 1)/m of
  // the region against the bound's (nh - 1)/nh: 5 parts over 4 hosts put
  // 1.2x on the busiest NIC. Fewer, larger parts stay above min_part.
  const auto nh = static_cast<int64_t>(r.cell_end - r.cell_begin);
  if (nh >= 2 && m >= nh) m -= m % nh;
  // The parts rotate over the cells, each cell's m parts after the last
  // cell's (planner version 39), and over the regions of one cell by a hash
  // of the region's offset in it, as one-entry cells do. A hash of the
  // region's corner placed them at random: a psum over the 8 devices of one
  // host into 2 replicas of tp8 gave its 8 pre-reduction owners 0 to 4 of
  // the 16 parts (the busiest device received 4.67x its bound).
  const uint64_t rot =
      c * static_cast<uint64_t>(std::max<int64_t>(m, 1)) + offset_hash(t, c, region);
  r.fanout = 0;
  if (m < 2) {
    // Below two parts: the whole region as one part where the α–β model
    // says so (few_parts), gathered along a chain or tree of hosts.
    if (!options_.relays || !one_part(t, c, region, holders, n, rot, r)) return false;
  } else {
    // Worth it when the entries lack summands: single-hop moves every lacking
    // (entry, summand) pair's region; reduce-scatter at most each summand's
    // region once plus the reduced region to every other entry.
    int64_t local = 0;
    for (uint32_t i = first; i < first + count; ++i)
      for (size_t h = 0; h < n; ++h)
        local += t.sg->devices[holders[h]] == dg.devices[dg.cell_entries[i]];
    const int64_t single = int64_t{count} * t.S - local;
    const int64_t staged = t.S + int64_t{count} - 1;
    if (staged >= single) return false;
    if (options_.relays)
      r.fanout = gather_fanout(c, bytes / static_cast<double>(m), static_cast<size_t>(m));
  }
  r.reduce = true;
  r.pre_reduce = pre_reduces(t) && !dg.fragmented;  // see cell_shift
  r.cross = false;
  r.cell_first = first;
  r.cell_count = count;
  r.rot = rot;
  if (m < 2)
    r.parts.assign(1, region);
  else
    even_parts(region, m, r.parts);
  return true;
}

inline uint32_t Enumerator::gather_fanout(size_t c, double part_bytes, size_t parts) const {
  const size_t nh = ch_->cell_offsets[c + 1] - ch_->cell_offsets[c];
  if (parts >= nh || nh < 3) return 0;  // the star: no host forwards more than its share
  // The least fan-out whose tree has at most `levels` levels (levels fall
  // as the fan-out grows).
  auto fewest = [&](uint32_t levels) {
    size_t lo = 1, hi = nh - 1;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (gather_levels(nh, mid) <= levels)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  };
  // At most kMaxGatherLevels levels: a plan's stages, and the statistics'
  // per-stage figures, stay bounded.
  const size_t least = fewest(kMaxGatherLevels);
  if (choice_override().fanout >= 0) {
    const auto k = std::max(least, static_cast<size_t>(choice_override().fanout));
    return choice_override().fanout == 0 || k + 1 >= nh ? 0 : static_cast<uint32_t>(k);
  }
  // α = 0: a chain, each host forwarding each part at most once (the busiest
  // NIC at its bound; pipelining costs nothing), up to kMaxGatherLevels hops.
  const double a = options_.alpha_seconds;
  if (a <= 0) return least + 1 >= nh ? 0 : static_cast<uint32_t>(least);
  // Else the tree whose stages take least time: in each of its D(k) levels
  // a host sends a part to k hosts and to the other entries of its host,
  // side by side (its NIC and its intra-host port), one α a level.
  const double cx = part_bytes / options_.inter_host_bytes_per_second;
  const double f = static_cast<double>(ch_->max_members[c] - 1) * part_bytes /
                   options_.intra_host_bytes_per_second;
  double best = 0;
  uint32_t fan = 0;
  // For each number of levels its least fan-out, levels down (fan-outs up).
  for (uint32_t levels = kMaxGatherLevels; levels >= 1; --levels) {
    const size_t k = fewest(levels);
    const double time =
        static_cast<double>(gather_levels(nh, k)) * (a + std::max(static_cast<double>(k) * cx, f));
    if (fan == 0 || time < best * (1 - 1e-9)) {
      best = time;
      fan = static_cast<uint32_t>(k);
    }
  }
  return fan + 1 >= nh ? 0 : fan;
}

inline int64_t Enumerator::reach(const TensorCtx& t, uint32_t src) {
  if (reach_tensor_ != t.spec) {
    reach_.clear();
    reach_tensor_ = t.spec;
  }
  const auto found = reach_.find(src);
  if (found != reach_.end()) return found->second;
  int64_t count = 0;
  const Box b = t.src->box(src);
  if (!b.empty()) dst_overlapping(t, b, [&](uint32_t) { ++count; });
  reach_.emplace(src, count);
  return count;
}

inline bool Enumerator::one_part(const TensorCtx& t, size_t c, const Box& region,
                                 const uint32_t* holders, size_t n, uint64_t rot, Route& r) {
  const Geometry& dg = *t.dg;
  const uint32_t first = dg.cell_offsets[c], count = dg.cell_offsets[c + 1] - first;
  const size_t hb = ch_->cell_offsets[c], nh = ch_->cell_offsets[c + 1] - hb;
  const double V = static_cast<double>(region.volume() * t.esize);
  const double a = options_.alpha_seconds, bx = 1.0 / options_.inter_host_bytes_per_second,
               bi = 1.0 / options_.intra_host_bytes_per_second;
  // Per summand: its holders' host when they are all on one (else -1), and
  // its holder devices.
  struct Sum {
    int32_t host = -2;
    int64_t devices = 0;
  };
  std::vector<Sum> sums(static_cast<size_t>(t.S));
  // The destination entries a holder serves (this cell's and others'): its
  // messages single-hop, and the cells it feeds a reducer of.
  int64_t served = count;
  for (size_t i = 0; i < n; ++i) served = std::max(served, reach(t, holders[i]));
  const double cells = std::ceil(static_cast<double>(served) / count);
  for (size_t i = 0; i < n; ++i) {
    Sum& s = sums[static_cast<size_t>(t.sg->summands[holders[i]])];
    const int32_t h = t.st->host[holders[i]];
    s.host = s.host == -2 || s.host == h ? h : -1;
    ++s.devices;
  }
  auto on_cell_host = [&](int32_t h, size_t* hi) {
    const auto b = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(hb);
    const auto e = b + static_cast<std::ptrdiff_t>(nh);
    const auto it = std::lower_bound(b, e, h);
    if (it == e || *it != h) return false;
    *hi = static_cast<size_t>(it - ch_->hosts.begin());
    return true;
  };
  auto members = [&](size_t hi) {
    return static_cast<double>(ch_->member_offsets[hi + 1] - ch_->member_offsets[hi]);
  };
  // The estimate's model (PlanStats::cost_seconds): a stage's messages run
  // side by side, one α and its busiest link's bytes; a device's NIC and
  // its intra-host port are separate links.
  // Single-hop: every entry fetches every summand (from another host unless
  // one is held on its own); a summand's holder devices share its entries.
  double single_nic = 0, single_time = 0;
  for (size_t hi = hb; hi < hb + nh; ++hi) {
    double remote = 0, near = 0;
    for (const Sum& s : sums) (s.host == ch_->hosts[hi] ? near : remote) += 1;
    single_nic = std::max(single_nic, members(hi) * remote * V);
    single_time = std::max(single_time, a + std::max(remote * bx, near * bi) * V);
  }
  std::map<int32_t, double> holder_sums;  // holder host -> summands held there alone
  for (const Sum& s : sums) {
    if (s.host < 0) continue;
    holder_sums[s.host] += 1;
    size_t hi = 0;
    const double here = on_cell_host(s.host, &hi) ? members(hi) : 0;
    const double away = static_cast<double>(count) - here;
    single_nic = std::max(single_nic, holder_sums[s.host] * away * V);
    const double per = cells / static_cast<double>(s.devices);
    single_time = std::max(single_time, a + per * std::max(away * bx, here * bi) * V);
  }
  // One part: its reducer (on the cell's host (rot mod hosts)) takes in each
  // holder host's summands, once per host where 2 or more pre-reduce; the
  // gather then reaches every other host once.
  const int32_t rhost = ch_->hosts[hb + rot % nh];
  const bool pre = pre_reduces(t);
  // Seconds each link carries: stage 0 into the reducer over its port
  // (near) and its NIC (far), the pooling hosts' ports, every unpooled
  // holder's NIC (its summand once per cell it feeds); stage 1 the pooled
  // sums into the reducer and out of each pooling host. Pooling (2 or more
  // summands on a host pre-reduced there) is up to the emission
  // (reduce_part): the model takes the faster of the two.
  double red_time = 0, nic = V;
  for (const bool pool : {false, true}) {
    if (pool && !pre) break;
    double red_in = 0, near0 = 0, far0 = 0, pool0 = 0, out0 = 0, in1 = 0, out1 = 0, nic_here = V;
    for (const auto& [h, k] : holder_sums) {
      if (h == rhost) {
        near0 += k * bi * V;
        continue;
      }
      const bool pooled = pool && k >= 2;
      const double w = pooled ? 1 : k;
      red_in += w;
      nic_here = std::max(nic_here, w * V);
      if (pooled) {
        pool0 = std::max(pool0, (k - 1) * std::ceil(cells / k) * bi * V);
        in1 += bx * V;
        out1 = std::max(out1, std::ceil(cells / k) * bx * V);
      } else {
        far0 += k * bx * V;
        out0 = std::max(out0, cells * bx * V);
      }
    }
    for (const Sum& s : sums)
      if (s.host == -1) {  // replicas on several hosts: one crosses
        red_in += 1;
        far0 += bx * V;
        out0 = std::max(out0, cells * bx * V);
      }
    const double t =
        a + std::max({near0, far0, pool0, out0}) + (in1 > 0 ? a + std::max(in1, out1) : 0);
    if (!pool || t < red_time) {
      red_time = t;
      nic = std::max(nic_here, red_in * V);
    }
  }
  const uint32_t fan = gather_fanout(c, V, 1);
  const double k = fan == 0 ? static_cast<double>(nh - 1) : fan;
  nic = std::max(nic, k * V);
  // The gather: each level one α, a host's NIC to k hosts beside its port
  // to its other entries; then the last hosts' entries.
  const double members_rest = static_cast<double>(ch_->max_members[c] - 1);
  const double f = members_rest > 0 ? a + members_rest * bi * V : 0;
  const double level = a + std::max(k * bx * V, members_rest * bi * V);
  const double gather =
      nh < 2 ? f : static_cast<double>(gather_levels(nh, fan == 0 ? nh - 1 : fan)) * level + f;
  r.fanout = fan;
  if (choice_override().one_part > 0) return true;
  if (a <= 0) return nic < single_nic;
  return red_time + gather < single_time;
}

inline uint32_t Enumerator::reduce_part(const TensorCtx& t, const Route& r, size_t j,
                                        const uint32_t* holders, size_t n, bool cut) {
  pre_.clear();
  const uint32_t red = reducer(t, r, j);
  const Box& part = r.parts[j];
  assign(t, red, part, holders, n, cut, [&](const Emitted& x) { pre_.push_back(x); });
  if (!options_.relays || !r.pre_reduce || pre_.size() < 2) return 0;
  // Whole summands of the part sent from each host but the reducer's.
  const int32_t rhost = t.dt->host[red];
  pre_hosts_.clear();
  for (size_t i = 0; i < pre_.size(); ++i) {
    const Emitted& x = pre_[i];
    if (x.local || !(x.region == part)) continue;
    const int32_t h = t.st->host[x.src_entry];
    if (h != rhost) pre_hosts_.emplace_back(h, static_cast<uint32_t>(i));
  }
  if (pre_hosts_.size() < 2) return 0;
  std::sort(pre_hosts_.begin(), pre_hosts_.end());
  // The hosts' groups in pre_hosts_: [chain_[i], chain_[i + 1]).
  chain_.clear();
  for (size_t b = 0; b < pre_hosts_.size();) {
    size_t end = b + 1;
    while (end < pre_hosts_.size() && pre_hosts_[end].first == pre_hosts_[b].first) ++end;
    chain_.push_back(b);
    b = end;
  }
  chain_.push_back(pre_hosts_.size());
  const size_t H = chain_.size() - 1;
  // The groups that may chain: hosts with no entry of the cell, whose
  // ingress the cell leaves idle (a chain moves H - 1 copies of the part
  // from the reducer's host's ingress to theirs; on a host of the cell,
  // which takes in the gather and reduces parts of its own, that would
  // balance nothing: a psum in place keeps the star).
  links_.clear();
  bool link_multi = false;
  {
    const CellHosts& ch = cell_hosts(t);
    const auto hb = ch.hosts.begin() + static_cast<std::ptrdiff_t>(ch.cell_offsets[r.cell]);
    const auto he = ch.hosts.begin() + static_cast<std::ptrdiff_t>(ch.cell_offsets[r.cell + 1]);
    for (size_t g = 0; g < H; ++g) {
      if (std::binary_search(hb, he, pre_hosts_[chain_[g]].first)) continue;
      links_.push_back(g);
      link_multi |= chain_[g + 1] - chain_[g] >= 2;
    }
  }
  const size_t L = links_.size();
  // The owner of host group g: its ((j + rot) / div mod k)-th holder (div
  // 1 for the star; L for a chain, whose hosts take each place in the
  // chain every L parts: so each host's owners rotate over the parts where
  // it has the same place, and each link's sends spread over its holders).
  auto owner_of = [&](size_t g, size_t div) {
    const size_t b = chain_[g], k = chain_[g + 1] - b;
    uint64_t q = (j + r.rot) / div;
    if (div == 1) {  // the star: by the part's rank among those the host sends away
      const int32_t h = pre_hosts_[b].first;
      const auto hb = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_begin);
      const auto he = ch_->hosts.begin() + static_cast<std::ptrdiff_t>(r.cell_end);
      const auto it = std::lower_bound(hb, he, h);
      if (it != he && *it == h) q = away_rank(r, static_cast<size_t>(it - ch_->hosts.begin()), j);
    }
    return pre_[pre_hosts_[b + q % k].second].src_entry;
  };
  // Every summand of group g into its owner's scratch (stage 0).
  auto into_owner = [&](size_t g, uint32_t owner) {
    const int64_t odev = t.sg->devices[owner];
    for (size_t i = chain_[g]; i < chain_[g + 1]; ++i) {
      Emitted& x = pre_[pre_hosts_[i].second];
      x.dst_entry = owner;
      x.own_region = true;
      x.local = t.sg->devices[x.src_entry] == odev;
      x.scratch = 1;
    }
  };
  // Chain or star, once per route: by its smallest part.
  if (r.chain < 0) {
    int64_t least = INT64_MAX;
    for (const Box& p : r.parts) least = std::min(least, p.volume());
    r.chain = static_cast<double>(least) * static_cast<double>(t.esize) >
                      options_.alpha_seconds * options_.inter_host_bytes_per_second
                  ? 1
                  : 0;
  }
  // Groups that do not chain: the star (k >= 2: their scratch to the
  // reducer in stage 1; one summand: sent in stage 0). Returns 1 when any
  // pre-reduces, else 0.
  // Under a budget (t.reduce_bands > 1), band k of the part (reduce_band_cut)
  // is written in stage k and sent on in stage k + 1: every summand piece
  // of the group becomes one per band (local ones, the owner's own, have no
  // stage: the engine reduces them with the band's first message).
  // Group g's summand pieces in band k (region `sub`), written in `stage`:
  // band 0 rewrites them, later bands copy them.
  auto band_summands = [&](size_t g, const Box& sub, uint32_t k, uint32_t stage) {
    for (size_t i = chain_[g]; i < chain_[g + 1]; ++i) {
      const size_t at = pre_hosts_[i].second;
      if (k == 0) {
        pre_[at].region = sub;
        pre_[at].stage = stage;
        continue;
      }
      Emitted x = pre_[at];
      x.region = sub;
      x.stage = stage;
      pre_.push_back(x);
    }
  };
  auto star = [&](bool chained) -> uint32_t {
    uint32_t last = 0;
    for (size_t g = 0, l = 0; g < H; ++g) {
      if (chained && l < L && links_[l] == g) {
        ++l;
        continue;
      }
      if (chain_[g + 1] - chain_[g] < 2) continue;
      const uint32_t owner = owner_of(g, 1);
      into_owner(g, owner);
      if (t.reduce_bands < 2) {
        Emitted y{owner, red, part, true, false, false};
        y.stage = 1;
        y.scratch = 2;
        pre_.push_back(y);
        last = std::max(last, 1u);
        continue;
      }
      reduce_band_cut(part, t.reduce_bands, [&](const Box& sub, uint32_t k) {
        band_summands(g, sub, k, k);
        Emitted y{owner, red, sub, true, false, false};
        y.stage = k + 1;
        y.scratch = 2;
        pre_.push_back(y);
        last = std::max(last, k + 1);
      });
    }
    return last;
  };
  if (L >= 2 && r.chain == 1) {
    // Link i (from 0) from the i-th chain host after `first` to the next,
    // in stage i + base, base = 1 when some chain host has 2 or more
    // summands, else 0; a first host with one summand sends it into the
    // next host's scratch in stage 0 instead. The last link, into the
    // reducer, in L - 1 + base (>= 1, so after the star's stage-1 scratch).
    size_t first = (j + r.rot) % L;
    // A cell of one entry (one part, rot its cell c: reduce_route): a host's
    // owners take the cells it chains in turn (c mod k), and the chain
    // starts at the G + (c mod k)-th link host (mod L), G the link hosts
    // below the reducer's: the host after the reducer's in the cyclic order
    // of hosts, shifted by the cell's place. Where the cells lie in blocks
    // of k per host (a psum in place into a sharded destination), each
    // owner then starts the chain of exactly one of its cells, so every
    // device takes in the same (the cell / L and (c mod L) of version 15
    // left half the devices idle and the others owning twice).
    size_t div = L;
    if (r.cell_count < 2) {
      div = 1;
      size_t below = 0, k = 1;
      for (size_t g : links_) {
        below += pre_hosts_[chain_[g]].first < rhost;
        k = std::max(k, chain_[g + 1] - chain_[g]);
      }
      first = (below + (j + r.rot) % k) % L;
    }
    const bool single_first = chain_[links_[first] + 1] - chain_[links_[first]] == 1;
    const uint32_t base = link_multi ? 1 : 0;
    if (t.reduce_bands >= 2) {
      // In bands (a staging budget, planner version 20): band k moves one
      // host along the chain per stage. Host i's summands (and a single
      // first host's summand, into host 1) enter its scratch in the stage of
      // the link into it, k + i - 1 + base (host 0: k), and the link out
      // leaves a stage later, so each band's scratch lives two stages.
      owners_.assign(L, 0);
      for (size_t i = 0; i < L; ++i) {
        const size_t g = links_[(first + i) % L];
        owners_[i] = owner_of(g, div);
        if (!(i == 0 && single_first)) into_owner(g, owners_[i]);
      }
      if (single_first) {
        Emitted& x = pre_[pre_hosts_[chain_[links_[first]]].second];
        x.dst_entry = owners_[1];
        x.own_region = true;
        x.local = false;
        x.scratch = 1;
      }
      uint32_t last = 0;
      reduce_band_cut(part, t.reduce_bands, [&](const Box& sub, uint32_t k) {
        for (size_t i = 0; i < L; ++i) {
          const size_t g = links_[(first + i) % L];
          const auto into = static_cast<uint32_t>(i) + base;  // k + into - 1: the link into host i
          band_summands(g, sub, k, i == 0 ? (single_first ? k + base : k) : k + into - 1);
          if (i > 0 && !(i == 1 && single_first)) {
            Emitted y{owners_[i - 1], owners_[i], sub, true, false, false};
            y.stage = k + into - 1;
            y.scratch = 3;
            pre_.push_back(y);
          }
        }
        Emitted y{owners_[L - 1], red, sub, true, false, false};
        y.stage = k + static_cast<uint32_t>(L) - 1 + base;
        y.scratch = 2;
        pre_.push_back(y);
        last = std::max(last, y.stage);
      });
      return std::max(last, star(true));
    }
    uint32_t from = 0;
    for (size_t i = 0; i < L; ++i) {
      const size_t g = links_[(first + i) % L];
      const uint32_t owner = owner_of(g, div);
      if (i == 0 && single_first) {
        from = pre_hosts_[chain_[g]].second;  // its summand, sent in stage 0
        continue;
      }
      into_owner(g, owner);
      if (i == 1 && single_first) {
        Emitted& x = pre_[from];
        x.dst_entry = owner;
        x.own_region = true;
        x.local = false;
        x.scratch = 1;
      } else if (i > 0) {
        Emitted y{pre_[from].dst_entry, owner, part, true, false, false};
        y.stage = static_cast<uint32_t>(i - 1) + base;
        y.scratch = 3;
        pre_.push_back(y);
      }
      // `from` names a piece into this owner's scratch (its dst_entry).
      from = pre_hosts_[chain_[g]].second;
    }
    Emitted y{pre_[from].dst_entry, red, part, true, false, false};
    y.stage = static_cast<uint32_t>(L - 1) + base;
    y.scratch = 2;
    pre_.push_back(y);
    star(true);
    return y.stage;
  }
  return star(false);
}

inline uint32_t Enumerator::cell_shift(const TensorCtx& t, size_t c, const Box& B) {
  if (!pre_reduces(t) || !options_.relays || t.S < 2 || t.T > 1 || t.dg->fragmented) return 0;
  uint32_t shift = 0;
  cover(t, B, [&](const Box& region, const uint32_t* h, size_t n, bool) {
    Route& r = shift_route_;
    if (!route(t, c, region, h, n, r) || !r.reduce) return;
    for (size_t j = 0; j < r.parts.size(); ++j) shift = std::max(shift, part_shift(t, r, j, h, n));
  });
  return shift;
}

}  // namespace reshard::planning
