// Lower bounds over all plans (see bounds.h for the facts they rest on).
//
// Work is proportional to the intersection of each destination cell with
// the source cells (the regions the enumerator cuts it into), times the
// holders of each region, plus each cell's entries: tensors that share a
// shape and both geometries are visited once and scaled by their bytes per
// element, like the statistics.
#include "plan/bounds.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "plan/checked.h"
#include "util/nic_groups.h"

namespace reshard::planning {

namespace {

// Per-index sums that remember which indices they touched, so one
// destination cell's contribution can be folded into a running maximum in
// time proportional to what it touched.
struct SparseSums {
  std::vector<int64_t> val;
  std::vector<uint32_t> touched;
  explicit SparseSums(size_t n) : val(n, 0) {}
  void add(uint32_t i, int64_t v) {
    if (val[i] == 0) touched.push_back(i);
    add_to(val[i], v, "lower_bound_max_send_bytes");
  }
  void fold_max(std::vector<int64_t>& into) {
    for (uint32_t i : touched) {
      into[i] = std::max(into[i], val[i]);
      val[i] = 0;
    }
    touched.clear();
  }
};

// Where one destination cell's send-side contributions go: straight into
// the totals for a cell that overlaps no other (distinct) destination box,
// into per-cell sums folded by maximum otherwise.
struct Sinks {
  std::vector<int64_t>* ingress;
  std::vector<int64_t>* egress;
  std::vector<int64_t>* forced;
  SparseSums* s_ingress = nullptr;
  SparseSums* s_egress = nullptr;
  SparseSums* s_forced = nullptr;
  void add_ingress(uint32_t h, int64_t v) {
    if (s_ingress)
      s_ingress->add(h, v);
    else
      add_to((*ingress)[h], v, "lower_bound_max_host_recv_bytes");
  }
  void add_egress(uint32_t h, int64_t v) {
    if (s_egress)
      s_egress->add(h, v);
    else
      add_to((*egress)[h], v, "lower_bound_max_host_send_bytes");
  }
  void add_forced(uint32_t d, int64_t v) {
    if (s_forced)
      s_forced->add(d, v);
    else
      add_to((*forced)[d], v, "lower_bound_max_send_bytes");
  }
};

class BoundsWalker {
 public:
  BoundsWalker(const Context& ctx, Bounds& b)
      : b_(b),
        en_(ctx.input.options),
        dev_mark_(ctx.devices.size(), 0),
        host_mark_(b.hosts.size(), 0),
        host_seen_(b.hosts.size(), 0),
        dev_seen_(ctx.devices.size(), 0),
        egress_seen_(b.hosts.size(), 0),
        host_count_(b.hosts.size(), 0),
        last_summand_host_(b.hosts.size(), -1),
        host_needers_(b.hosts.size(), 0),
        sole_mark_(b.hosts.size(), 0),
        unc_seen_(b.hosts.size(), 0),
        unc_count_(b.hosts.size(), 0),
        key1_(b.hosts.size()),
        key2_(b.hosts.size()),
        in_all_(b.hosts.size(), 0) {
    // Two independent 64-bit keys a host, summed and xor-ed over a set: a
    // set's key (with its size) is the same in any order.
    for (size_t h = 0; h < b.hosts.size(); ++h) {
      key1_[h] = mix(2 * h + 1);
      key2_[h] = mix(2 * h + 2);
    }
    for (uint32_t h : b.all_holders.hosts) in_all_[h] = 1;
  }

  // One destination cell: box B held (needed) by `entries` of `t`. Returns
  // the bytes of it that must leave their holders.
  // With `extras`, adds the messages reductions take beyond one per needer
  // (Bounds::extra_messages, extra_crossings) into the totals.
  int64_t cell(const TensorCtx& t, const Box& B, const uint32_t* entries, size_t n, int64_t esum,
               Sinks& sink, bool extras) {
    leave_ = 0;
    extras_ = extras;
    if (B.empty() || n == 0) return 0;
    // Summand groups present among the entries, ascending.
    groups_.clear();
    for (size_t i = 0; i < n; ++i) groups_.push_back(t.T > 1 ? t.dg->summands[entries[i]] : 0);
    std::sort(groups_.begin(), groups_.end());
    groups_.erase(std::unique(groups_.begin(), groups_.end()), groups_.end());
    for (int32_t u : groups_) group(t, B, entries, n, u, esum, sink);
    return leave_;
  }

 private:
  void group(const TensorCtx& t, const Box& B, const uint32_t* entries, size_t n, int32_t u,
             int64_t esum, Sinks& sink) {
    // Summands combined into group u's value.
    int32_t g = 0;
    for (int32_t s = 0; s < t.S; ++s) g += (t.T == 1 || s % t.T == u);
    if (g == 0) return;  // a destination summand no source summand maps to: zeros, no traffic
    const uint64_t stamp = ++stamp_;
    needer_hosts_.clear();
    int64_t first_dev = -1;
    bool many_devs = false;
    size_t needers = 0;  // distinct needer devices
    const int64_t bvol = mul_of(B.volume(), esum, "lower_bound_network_bytes");
    for (size_t i = 0; i < n; ++i) {
      const uint32_t e = entries[i];
      if (t.T > 1 && t.dg->summands[e] != u) continue;
      const uint32_t dd = t.dt->dense[e];
      const uint32_t h = b_.host_of_device[dd];
      if (host_mark_[h] != stamp) {
        host_mark_[h] = stamp;
        host_needers_[h] = 0;
        needer_hosts_.push_back(h);
        sink.add_ingress(h, bvol);
      }
      if (dev_mark_[dd] != stamp) {
        ++needers;
        ++host_needers_[h];
      }
      dev_mark_[dd] = stamp;
      add_to(b_.missing[dd], bvol, "lower_bound_max_recv_bytes");
      if (first_dev < 0)
        first_dev = dd;
      else if (static_cast<int64_t>(dd) != first_dev)
        many_devs = true;
    }
    // Each host's ingress counted here is needed on its needer devices.
    int64_t out_all = 0;  // needer devices on hosts that hold nothing
    for (uint32_t h : needer_hosts_) {
      least(b_.ingress_fan[h], host_needers_[h]);
      if (!in_all_[h]) out_all += host_needers_[h];
    }
    const bool many_hosts = needer_hosts_.size() > 1;
    en_.cover(t, B, [&](const Box& R, const uint32_t* holders, size_t nh, bool) {
      const int64_t v = R.volume() * esum;
      const uint64_t atom = ++stamp_;
      // Holders of this group's summands, by summand.
      by_summand_.clear();
      for (size_t i = 0; i < nh; ++i) {
        const uint32_t r = holders[i];
        const int32_t s = t.sg->summands[r];
        if (t.T > 1 && s % t.T != u) continue;
        by_summand_.emplace_back(s, r);
      }
      std::sort(by_summand_.begin(), by_summand_.end());
      // R leaves its holders at least once unless every needer holds it.
      size_t needers_holding = 0;
      int64_t k = 0;              // distinct summands holding R
      bool needer_holds = false;  // a needer holds one of them
      replicated_.clear();        // [i, j) of summands on two or more hosts
      int64_t sole_hosts = 0;     // hosts alone holding some summand
      const uint64_t sole = ++stamp_;
      // Needers that hold every summand of the group need none of R.
      for (size_t i = 0; i < by_summand_.size();) {
        size_t j = i;
        while (j < by_summand_.size() && by_summand_[j].first == by_summand_[i].first) ++j;
        // Summand by_summand_[i].first, held by entries [i, j).
        const uint32_t r0 = by_summand_[i].second;
        const uint32_t h0 = b_.host_of_device[t.st->dense[r0]];
        bool one_host = true;
        for (size_t k = i; k < j; ++k) {
          const uint32_t dd = t.st->dense[by_summand_[k].second];
          const uint32_t h = b_.host_of_device[dd];
          if (h != h0) one_host = false;
          if (dev_mark_[dd] == stamp) {
            needer_holds = true;
            if (g == 1) {
              b_.missing[dd] -= v;
              ++needers_holding;
            }
          }
          // Count, per host, the distinct summands it holds.
          if (host_seen_[h] != atom) {
            host_seen_[h] = atom;
            host_count_[h] = 0;
            count_hosts_.push_back(h);
          }
          if (last_summand_host_[h] != by_summand_[i].first) {
            last_summand_host_[h] = by_summand_[i].first;
            ++host_count_[h];
          }
        }
        // The only host holding this summand sends it out once if it is
        // needed on another host; the only device holding it likewise.
        if (one_host && (many_hosts || (needer_hosts_.size() == 1 && needer_hosts_[0] != h0)) &&
            first_egress(h0, atom)) {
          sink.add_egress(h0, v);
          // Needed on the needer devices of other hosts.
          least(b_.egress_fan[h0],
                static_cast<int64_t>(needers) - (host_mark_[h0] == stamp ? host_needers_[h0] : 0));
        }
        ++k;
        if (one_host) {
          if (sole_mark_[h0] != sole) {
            sole_mark_[h0] = sole;
            ++sole_hosts;
          }
        } else {
          replicated_.emplace_back(i, j);
        }
        if (j - i == 1) {
          const uint32_t d0 = t.st->dense[r0];
          if ((many_devs || (first_dev >= 0 && static_cast<int64_t>(d0) != first_dev)) &&
              dev_seen_[d0] != atom) {
            dev_seen_[d0] = atom;
            sink.add_forced(d0, v);
            // Needed on the needer devices other than d0.
            least(b_.forced_fan[d0], static_cast<int64_t>(needers) - (dev_mark_[d0] == stamp));
          }
        }
        i = j;
      }
      // k >= 2 summands: holders send at least k - 1 first messages, and
      // the devices k + needers - 1 - [a needer holds one] messages, one per
      // needer counted in `missing` (bounds.h).
      if (needers_holding < needers)
        add_to(leave_, k >= 2 ? mul_of(k - 1, v, "lower_bound_max_send_bytes") : v,
               "lower_bound_max_send_bytes");
      if (k >= 2 && extras_) {
        add_to(b_.extra_messages, mul_of(k - 1 - needer_holds, v, "lower_bound_network_bytes"),
               "lower_bound_network_bytes");
        const int64_t more = extra_host_messages(t, k, sole, sole_hosts, stamp, atom);
        if (more > 0)
          add_to(b_.extra_crossings, mul_of(more, v, "lower_bound_cross_host_bytes"),
                 "lower_bound_cross_host_bytes");
      }
      if (extras_ && !count_hosts_.empty())
        holder_hosts(v, static_cast<int64_t>(needers), stamp, out_all);
      for (uint32_t h : count_hosts_) {
        if (host_count_[h] == g && host_mark_[h] == stamp) sink.add_ingress(h, -v);
        last_summand_host_[h] = -1;
      }
      count_hosts_.clear();
    });
  }

  // Messages between hosts that element R of k >= 2 summands takes beyond
  // one per needer host (bounds.h, the gossip fact over hosts): 0 when a
  // host holds all k. Else the least over the first host u to know the
  // value of: the hosts other than u alone holding a summand (marked
  // `sole`, `sole_hosts` of them), the hosts it takes to hold the summands
  // u lacks on several hosts none of them marked (at least their number
  // over the most of them one host holds), and the needer hosts other than
  // u. Needers are marked `stamp`, holder hosts `atom` (count_hosts_, with
  // their distinct summands in host_count_); by_summand_ and replicated_
  // describe R's holders.
  int64_t extra_host_messages(const TensorCtx& t, int64_t k, uint64_t sole, int64_t sole_hosts,
                              uint64_t stamp, uint64_t atom) {
    for (uint32_t h : count_hosts_)
      if (host_count_[h] == k) return 0;
    // Summands on several hosts none of which alone holds a summand, and
    // how many of them each host holds.
    int64_t uncovered = 0;
    for (uint32_t h : count_hosts_) unc_count_[h] = 0;
    for (const auto& [i, j] : replicated_) {
      bool covered = false;
      for (size_t x = i; x < j && !covered; ++x)
        covered = sole_mark_[b_.host_of_device[t.st->dense[by_summand_[x].second]]] == sole;
      if (covered) continue;
      ++uncovered;
      const uint64_t seen = ++stamp_;
      for (size_t x = i; x < j; ++x) {
        const uint32_t h = b_.host_of_device[t.st->dense[by_summand_[x].second]];
        if (unc_seen_[h] == seen) continue;
        unc_seen_[h] = seen;
        ++unc_count_[h];
      }
    }
    // A host holds at most `most` of them: covering c takes c / most hosts.
    int64_t most = 1;
    for (uint32_t h : count_hosts_) most = std::max(most, unc_count_[h]);
    const auto nd = static_cast<int64_t>(needer_hosts_.size());
    // u a host holding nothing: a needer host if one holds nothing.
    bool bare_needer = false;
    for (uint32_t h : needer_hosts_) bare_needer |= host_seen_[h] != atom;
    int64_t best = sole_hosts + ceil_div_checked(uncovered, most) + nd - bare_needer;
    for (uint32_t h : count_hosts_) {
      const int64_t cost = sole_hosts - (sole_mark_[h] == sole) +
                           ceil_div_checked(uncovered - unc_count_[h], most) + nd -
                           (host_mark_[h] == stamp);
      best = std::min(best, cost);
    }
    return best - nd;
  }

  // Element R (v bytes) of a group whose needer devices (`needers` of them,
  // marked `stamp`) include `out_all` on hosts holding nothing: where a
  // needer is on a host outside R's holder hosts (count_hosts_), R leaves
  // them at least once (Bounds::holder_sets), and leaves every holder host
  // where a needer's host holds nothing (Bounds::all_holders).
  void holder_hosts(int64_t v, int64_t needers, uint64_t stamp, int64_t out_all) {
    uint64_t k1 = 0, k2 = 0;
    int64_t inside = 0;
    for (uint32_t h : count_hosts_) {
      k1 += key1_[h];
      k2 ^= key2_[h];
      if (host_mark_[h] == stamp) inside += host_needers_[h];
    }
    if (needers > inside) {
      // Consecutive regions mostly share their holders: the last set first.
      const SetKey key{k1, k2, count_hosts_.size()};
      if (!(last_set_ < b_.holder_sets.size() && key == last_key_)) {
        auto it = set_index_.find(key);
        if (it == set_index_.end() && b_.holder_sets.size() < Bounds::kMaxHolderSets) {
          it = set_index_.emplace(key, b_.holder_sets.size()).first;
          Bounds::HolderSet set;
          set.hosts = count_hosts_;
          std::sort(set.hosts.begin(), set.hosts.end());
          b_.holder_sets.push_back(std::move(set));
        }
        last_key_ = key;
        last_set_ = it == set_index_.end() ? SIZE_MAX : it->second;
      }
      if (last_set_ < b_.holder_sets.size()) {
        Bounds::HolderSet& set = b_.holder_sets[last_set_];
        add_to(set.bytes, v, "lower_bound_cross_host_bytes");
        least(set.fan, needers - inside);
      }
    }
    if (out_all > 0) {
      add_to(b_.all_holders.bytes, v, "lower_bound_cross_host_bytes");
      least(b_.all_holders.fan, out_all);
    }
  }

  static uint64_t mix(uint64_t x) {  // splitmix64's finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  struct SetKey {
    uint64_t k1, k2;
    size_t n;
    bool operator==(const SetKey& o) const { return k1 == o.k1 && k2 == o.k2 && n == o.n; }
  };
  struct SetKeyHash {
    size_t operator()(const SetKey& k) const { return static_cast<size_t>(k.k1 ^ (k.k2 >> 1)); }
  };

  // True the first time host h sends for `atom` (one send covers every
  // summand of the group it holds alone: it can reduce them first).
  bool first_egress(uint32_t h, uint64_t atom) {
    if (egress_seen_[h] == atom) return false;
    egress_seen_[h] = atom;
    return true;
  }

  // m = the least of m and n (m = 0: none yet).
  static void least(int64_t& m, int64_t n) { m = m == 0 ? n : std::min(m, n); }

  Bounds& b_;
  Enumerator en_;
  uint64_t stamp_ = 0;
  int64_t leave_ = 0;
  bool extras_ = true;
  std::vector<uint64_t> dev_mark_, host_mark_, host_seen_, dev_seen_, egress_seen_;
  std::vector<int32_t> host_count_, last_summand_host_;
  std::vector<int64_t> host_needers_;  // per needer host of a group: its needer devices
  std::vector<int32_t> groups_;
  std::vector<uint32_t> needer_hosts_, count_hosts_;
  std::vector<std::pair<int32_t, uint32_t>> by_summand_;
  // Per host: marked alone holding a summand; summands on several hosts,
  // none marked, it holds. Per summand on several hosts: [i, j) in
  // by_summand_.
  std::vector<uint64_t> sole_mark_, unc_seen_;
  std::vector<int64_t> unc_count_;
  std::vector<std::pair<size_t, size_t>> replicated_;
  // Holder host sets (holder_hosts): each host's keys, whether it holds
  // anything, and each set's index in Bounds::holder_sets.
  std::vector<uint64_t> key1_, key2_;
  std::vector<uint8_t> in_all_;
  std::unordered_map<SetKey, size_t, SetKeyHash> set_index_;
  SetKey last_key_{0, 0, 0};
  size_t last_set_ = SIZE_MAX;  // index of last_key_'s set; SIZE_MAX: none
};

}  // namespace

Bounds compute_bounds(const Context& ctx) {
  Bounds b;
  const size_t ndev = ctx.devices.size();
  std::vector<int32_t> host_id(ndev);
  for (size_t d = 0; d < ndev; ++d) host_id[d] = ctx.input.topology.info(ctx.devices[d]).host;
  b.hosts = host_id;
  std::sort(b.hosts.begin(), b.hosts.end());
  b.hosts.erase(std::unique(b.hosts.begin(), b.hosts.end()), b.hosts.end());
  const size_t nh = b.hosts.size();
  b.host_of_device.resize(ndev);
  b.host_devices.assign(nh, 0);
  for (size_t d = 0; d < ndev; ++d) {
    const uint32_t h = static_cast<uint32_t>(
        std::lower_bound(b.hosts.begin(), b.hosts.end(), host_id[d]) - b.hosts.begin());
    b.host_of_device[d] = h;
    ++b.host_devices[h];
  }
  // NIC groups: a device's position on its host picks its group.
  {
    const int32_t nics = ctx.input.options.nics_per_host;
    std::vector<uint32_t> first_group(nh, 0), seen(nh, 0);
    uint32_t groups = 0;
    for (size_t h = 0; h < nh; ++h) {
      first_group[h] = groups;
      groups += static_cast<uint32_t>(
          std::min<int64_t>(nics == 0 ? b.host_devices[h] : nics, b.host_devices[h]));
    }
    b.group_of_device.resize(ndev);
    b.group_nics.assign(groups, 0);
    for (size_t d = 0; d < ndev; ++d) {
      const uint32_t h = b.host_of_device[d];
      const auto [g, n] = nic_group(seen[h]++, b.host_devices[h], nics);
      b.group_of_device[d] = first_group[h] + static_cast<uint32_t>(g);
      b.group_nics[b.group_of_device[d]] = n;
    }
  }
  b.missing.assign(ndev, 0);
  b.forced.assign(ndev, 0);
  b.ingress.assign(nh, 0);
  b.egress.assign(nh, 0);
  b.forced_fan.assign(ndev, 0);
  b.ingress_fan.assign(nh, 0);
  b.egress_fan.assign(nh, 0);

  // Contributions of overlapping destination boxes, folded by maximum.
  int64_t over_leave = 0;
  std::vector<int64_t> over_ingress(nh, 0), over_egress(nh, 0), over_forced(ndev, 0);
  SparseSums s_ingress(nh), s_egress(nh), s_forced(ndev);
  Sinks direct{&b.ingress, &b.egress, &b.forced};
  Sinks folded{&b.ingress, &b.egress, &b.forced, &s_ingress, &s_egress, &s_forced};

  std::map<std::tuple<std::vector<int64_t>, const Geometry*, const Geometry*>, int64_t> groups;
  std::map<std::tuple<std::vector<int64_t>, const Geometry*, const Geometry*>, size_t> first;
  for (size_t i = 0; i < ctx.tensors.size(); ++i) {
    const TensorCtx& t = ctx.tensors[i];
    const auto key = std::make_tuple(t.spec->shape, t.sg, t.dg);
    groups[key] += t.esize;
    first.emplace(key, i);
  }
  // Devices holding anything (tensors of a group share their empty boxes),
  // and their hosts.
  std::vector<int64_t> holds(ndev, 0);
  for (const auto& [key, esum] : groups) {
    const TensorCtx& t = ctx.tensors[first.at(key)];
    for (uint32_t r = 0; r < t.src->num_entries(); ++r)
      if (!t.src->box(r).empty()) holds[t.st->dense[r]] = 1;
  }
  {
    std::vector<uint8_t> host_holds(nh, 0);
    for (size_t d = 0; d < ndev; ++d) {
      b.holders += holds[d];
      if (holds[d]) host_holds[b.host_of_device[d]] = 1;
    }
    for (size_t h = 0; h < nh; ++h)
      if (host_holds[h]) b.all_holders.hosts.push_back(static_cast<uint32_t>(h));
  }
  BoundsWalker walk(ctx, b);
  for (const auto& [key, esum] : groups) {
    const TensorCtx& t = ctx.tensors[first.at(key)];
    const Geometry& dg = *t.dg;
    if (dg.tiled) {
      // Cells of a tiled layout are disjoint; every entry of one shares its box.
      for (int64_t c = 0; c < dg.num_cells(); ++c) {
        const uint32_t b0 = dg.cell_offsets[static_cast<size_t>(c)],
                       b1 = dg.cell_offsets[static_cast<size_t>(c) + 1];
        if (b0 == b1) continue;
        add_to(b.leave,
               walk.cell(t, t.dst->box(dg.cell_entries[b0]), dg.cell_entries.data() + b0, b1 - b0,
                         esum, direct, true),
               "lower_bound_max_send_bytes");
      }
      continue;
    }
    // Explicit: cells are the distinct boxes that overlap no other and the
    // disjoint fragments of those that do (Geometry), each needed by every
    // entry containing it, so each element needed on a device or host is
    // counted there once (the union of its boxes). Cells of a group left
    // unrefined (above Geometry's caps) overlap: they contribute their
    // maximum.
    bool any_overlap = false;
    for (size_t c = 0; c + 1 < dg.cell_offsets.size(); ++c) {
      const uint32_t b0 = dg.cell_offsets[c], b1 = dg.cell_offsets[c + 1];
      if (b0 == b1) continue;
      const Box& B = dg.cell_boxes[c];
      if (dg.cell_overlaps[c]) {
        any_overlap = true;
        over_leave = std::max(
            over_leave, walk.cell(t, B, dg.cell_entries.data() + b0, b1 - b0, esum, folded, false));
        s_ingress.fold_max(over_ingress);
        s_egress.fold_max(over_egress);
        s_forced.fold_max(over_forced);
      } else {
        add_to(b.leave, walk.cell(t, B, dg.cell_entries.data() + b0, b1 - b0, esum, direct, true),
               "lower_bound_max_send_bytes");
      }
    }
    if (!any_overlap) continue;
    add_to(b.leave, std::exchange(over_leave, 0), "lower_bound_max_send_bytes");
    for (size_t h = 0; h < nh; ++h) {
      add_to(b.ingress[h], std::exchange(over_ingress[h], 0), "lower_bound_max_host_recv_bytes");
      add_to(b.egress[h], std::exchange(over_egress[h], 0), "lower_bound_max_host_send_bytes");
    }
    for (size_t d = 0; d < ndev; ++d)
      add_to(b.forced[d], std::exchange(over_forced[d], 0), "lower_bound_max_send_bytes");
  }
  return b;
}

// The plan-independent bounds of `lb` into `st`, and the α–β cost bound
// with the term that gives it. Under the cost model a device moves bytes
// over its intra-host port and its NIC group side by side at best (the sum
// of their bandwidths, as the fleet simulator's bound), and a host's
// NICs (options.nics_per_host, 0: one per device; each at
// options.inter_host_bytes_per_second) carry what it takes in or sends out;
// the all-devices and all-hosts averages never exceed these maxima, so they
// bound bytes but never bind the cost.
void apply_bounds(const Context& ctx, const Bounds& lb, const PlanOptions& o, PlanStats& st) {
  const double a = o.alpha_seconds, bi = 1.0 / o.intra_host_bytes_per_second,
               bx = 1.0 / o.inter_host_bytes_per_second;
  const size_t ndev = ctx.devices.size();
  int64_t total = 0;
  st.lower_bound_cost_seconds = 0;
  st.lower_bound_binding = BoundKind::kNone;
  st.lower_bound_binding_id = -1;
  auto consider = [&](double seconds, BoundKind kind, int64_t id) {
    if (seconds > st.lower_bound_cost_seconds) {
      st.lower_bound_cost_seconds = seconds;
      st.lower_bound_binding = kind;
      st.lower_bound_binding_id = id;
    }
  };
  for (size_t d = 0; d < ndev; ++d) {
    const int64_t miss = lb.missing[d], forced = lb.forced[d];
    // Its port and its NIC group run side by side: seconds per byte at best.
    const double bxg = bx / lb.group_nics[lb.group_of_device[d]];
    const double bmin = bi * bxg / (bi + bxg);
    add_to(total, miss, "lower_bound_network_bytes");
    st.lower_bound_max_recv_bytes = std::max(st.lower_bound_max_recv_bytes, miss);
    st.lower_bound_max_send_bytes = std::max(st.lower_bound_max_send_bytes, forced);
    if (miss > 0)
      consider(a + bmin * static_cast<double>(miss), BoundKind::kDeviceRecv, ctx.devices[d]);
    if (forced > 0)
      consider(a + bmin * static_cast<double>(forced), BoundKind::kDeviceSend, ctx.devices[d]);
  }
  // Every message is sent by a device and received by one: the busiest
  // sends and receives at least the total over the devices, and all of them
  // together move it at their summed rates at best.
  add_to(total, lb.extra_messages, "lower_bound_network_bytes");
  st.lower_bound_network_bytes = total;
  if (lb.holders > 0)
    st.lower_bound_max_send_bytes =
        std::max(st.lower_bound_max_send_bytes, ceil_div_checked(lb.leave, lb.holders));
  if (ndev > 0) {
    const int64_t share = ceil_div_checked(total, static_cast<int64_t>(ndev));
    st.lower_bound_max_send_bytes = std::max(st.lower_bound_max_send_bytes, share);
    st.lower_bound_max_recv_bytes = std::max(st.lower_bound_max_recv_bytes, share);
    double rate = 0;  // bytes per second of every device together
    size_t busiest = 0;
    for (size_t d = 0; d < ndev; ++d) {
      const double bxg = bx / lb.group_nics[lb.group_of_device[d]];
      rate += 1.0 / bi + 1.0 / bxg;
      if (lb.missing[d] > lb.missing[busiest]) busiest = d;
    }
    if (total > 0)
      consider(a + static_cast<double>(total) / rate, BoundKind::kDeviceRecv, ctx.devices[busiest]);
  }
  int64_t in = 0, out = 0;
  for (size_t h = 0; h < lb.hosts.size(); ++h) {
    add_to(in, lb.ingress[h], "lower_bound_cross_host_bytes");
    add_to(out, lb.egress[h], "lower_bound_cross_host_bytes");
    st.lower_bound_max_host_recv_bytes =
        std::max(st.lower_bound_max_host_recv_bytes, lb.ingress[h]);
    st.lower_bound_max_host_send_bytes = std::max(st.lower_bound_max_host_send_bytes, lb.egress[h]);
    const double nics =
        static_cast<double>(o.nics_per_host != 0 ? o.nics_per_host : lb.host_devices[h]);
    if (lb.ingress[h] > 0)
      consider(a + bx * static_cast<double>(lb.ingress[h]) / nics, BoundKind::kHostRecv,
               lb.hosts[h]);
    if (lb.egress[h] > 0)
      consider(a + bx * static_cast<double>(lb.egress[h]) / nics, BoundKind::kHostSend,
               lb.hosts[h]);
  }
  // The hosts holding copies together send out what they alone hold and
  // another host needs, over their NICs together (bounds.h); named by the
  // set's first host.
  auto holder_set = [&](const Bounds::HolderSet& set) {
    if (set.bytes <= 0 || set.hosts.empty()) return;
    double nics = 0;
    for (uint32_t h : set.hosts)
      nics += static_cast<double>(o.nics_per_host != 0 ? o.nics_per_host : lb.host_devices[h]);
    consider(a + bx * static_cast<double>(set.bytes) / nics, BoundKind::kHostSend,
             lb.hosts[set.hosts.front()]);
  };
  for (const Bounds::HolderSet& set : lb.holder_sets) holder_set(set);
  holder_set(lb.all_holders);
  // Every byte taken in is sent out: crossings are at least the larger sum,
  // and at least one per needer host plus the reductions' extra crossings.
  int64_t crossings = in;
  add_to(crossings, lb.extra_crossings, "lower_bound_cross_host_bytes");
  st.lower_bound_cross_host_bytes = std::max({in, out, crossings});
  if (!lb.hosts.empty()) {
    const auto nh = static_cast<int64_t>(lb.hosts.size());
    const int64_t share = ceil_div_checked(st.lower_bound_cross_host_bytes, nh);
    st.lower_bound_max_host_send_bytes = std::max(st.lower_bound_max_host_send_bytes, share);
    st.lower_bound_max_host_recv_bytes = std::max(st.lower_bound_max_host_recv_bytes, share);
    // Every host's NICs together, at best; named by the host with the most
    // to take in.
    double rate = 0;
    size_t busiest = 0;
    for (size_t h = 0; h < lb.hosts.size(); ++h) {
      rate += static_cast<double>(o.nics_per_host != 0 ? o.nics_per_host : lb.host_devices[h]) / bx;
      if (lb.ingress[h] > lb.ingress[busiest]) busiest = h;
    }
    if (st.lower_bound_cross_host_bytes > 0)
      consider(a + static_cast<double>(st.lower_bound_cross_host_bytes) / rate,
               BoundKind::kHostRecv, lb.hosts[busiest]);
  }
}

}  // namespace reshard::planning
