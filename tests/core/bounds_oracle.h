// The lower bounds' definitions (core/src/plan/bounds.h) applied to every
// element of a case: the oracle plan_bounds_test.cc checks the planner's
// bounds against, exactly.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "reshard/plan.h"

namespace reshard::testing {

struct OracleBounds {
  int64_t network = 0, max_recv = 0, max_send = 0;
  int64_t cross_host = 0, max_host_recv = 0, max_host_send = 0;
  // Fan-outs (bounds.h): per device the fewest devices besides it that a
  // byte counted in its forced sends is needed on, per host the fewest
  // needer devices on other hosts of a byte it alone holds (egress) and
  // on it of a byte it takes in (ingress).
  std::map<int64_t, int64_t> forced_fan;
  std::map<int32_t, int64_t> egress_fan, ingress_fan;
  // Hosts holding copies together: per set of hosts holding an element
  // (every summand's holders), the bytes of the elements held on exactly
  // that set and needed on a host outside it, and the fewest needer
  // devices outside it of any of them; the same for the set of every host
  // holding anything (bytes, fan).
  std::map<std::set<int32_t>, std::pair<int64_t, int64_t>> holder_sets;
  std::pair<int64_t, int64_t> all_holders{0, 0};
};

// Calls f(index vector) for every element of `b`.
template <class F>
void for_each_element(const Box& b, F&& f) {
  if (b.empty()) return;
  std::vector<int64_t> i(static_cast<size_t>(b.rank));
  for (int d = 0; d < b.rank; ++d) i[static_cast<size_t>(d)] = b.lo[d];
  while (true) {
    f(i);
    int d = b.rank - 1;
    for (; d >= 0; --d) {
      if (++i[static_cast<size_t>(d)] < b.hi[d]) break;
      i[static_cast<size_t>(d)] = b.lo[d];
    }
    if (d < 0) break;
  }
}

inline int64_t flat(const std::vector<int64_t>& shape, const std::vector<int64_t>& i) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + i[d];
  return f;
}

// The bounds' definitions (core/src/plan/bounds.h) applied to every element.
inline OracleBounds oracle(const PlanInput& in) {
  std::map<int64_t, int64_t> missing, forced;
  std::map<int32_t, int64_t> ingress, egress, host_devices;
  std::set<int64_t> devices, holders;
  int64_t leave = 0, extra_messages = 0, extra_crossings = 0;
  std::set<int32_t> all_hosts;
  for (const DeviceInfo& d : in.topology.devices()) all_hosts.insert(d.host);
  OracleBounds o;
  auto least = [](auto& m, auto key, int64_t n) {
    auto [it, fresh] = m.emplace(key, n);
    if (!fresh) it->second = std::min(it->second, n);
  };
  for (const TensorSpec& t : in.tensors) {
    for (size_t e = 0; e < t.src.num_entries(); ++e) {
      devices.insert(t.src.device(e));
      if (!t.src.box(e).empty()) holders.insert(t.src.device(e));
    }
    for (size_t e = 0; e < t.dst.num_entries(); ++e) devices.insert(t.dst.device(e));
  }
  for (int64_t d : devices) ++host_devices[in.topology.info(d).host];
  std::set<int32_t> holder_hosts;
  for (int64_t d : holders) holder_hosts.insert(in.topology.info(d).host);
  auto count = [](std::pair<int64_t, int64_t>& e, int64_t bytes, int64_t fan) {
    e.first += bytes;
    e.second = e.second == 0 ? fan : std::min(e.second, fan);
  };
  for (const TensorSpec& t : in.tensors) {
    const int64_t es = dtype_size(t.dtype);
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    if (n == 0) continue;
    std::vector<std::vector<size_t>> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
    for (size_t e = 0; e < t.src.num_entries(); ++e)
      for_each_element(t.src.box(e), [&](const auto& i) {
        src[static_cast<size_t>(flat(t.shape, i))].push_back(e);
      });
    for (size_t e = 0; e < t.dst.num_entries(); ++e)
      for_each_element(t.dst.box(e), [&](const auto& i) {
        dst[static_cast<size_t>(flat(t.shape, i))].push_back(e);
      });
    const int32_t S = t.src.num_summands(), T = t.dst.num_summands();
    for (int64_t x = 0; x < n; ++x) {
      std::set<int32_t> groups;
      for (size_t e : dst[static_cast<size_t>(x)]) groups.insert(T > 1 ? t.dst.summand(e) : 0);
      for (int32_t u : groups) {
        std::set<int32_t> G;
        for (int32_t s = 0; s < S; ++s)
          if (T == 1 || s % T == u) G.insert(s);
        if (G.empty()) continue;
        std::set<int64_t> nd;
        std::set<int32_t> nh;
        for (size_t e : dst[static_cast<size_t>(x)])
          if (T == 1 || t.dst.summand(e) == u) {
            nd.insert(t.dst.device(e));
            nh.insert(in.topology.info(t.dst.device(e)).host);
          }
        std::map<int32_t, std::set<int64_t>> dev_of;  // summand -> holder devices
        for (size_t r : src[static_cast<size_t>(x)])
          if (G.count(t.src.summand(r))) dev_of[t.src.summand(r)].insert(t.src.device(r));
        auto holds_all_dev = [&](int64_t d) {
          for (int32_t s : G)
            if (!dev_of[s].count(d)) return false;
          return true;
        };
        auto holds_all_host = [&](int32_t h) {
          for (int32_t s : G) {
            bool any = false;
            for (int64_t d : dev_of[s]) any |= in.topology.info(d).host == h;
            if (!any) return false;
          }
          return true;
        };
        // The summands present, and for each the hosts holding it.
        std::map<int32_t, std::set<int32_t>> hosts_of;
        for (const auto& [s, ds] : dev_of)
          for (int64_t d : ds) hosts_of[s].insert(in.topology.info(d).host);
        const auto k = static_cast<int64_t>(hosts_of.size());
        std::set<int32_t> S;  // every host holding a summand of x
        for (const auto& [s, hs] : hosts_of) S.insert(hs.begin(), hs.end());
        int64_t out = 0, out_all = 0;  // needer devices outside S, outside every holder
        for (int64_t d : nd) {
          out += S.count(in.topology.info(d).host) == 0;
          out_all += holder_hosts.count(in.topology.info(d).host) == 0;
        }
        if (!S.empty() && out > 0) count(o.holder_sets[S], es, out);
        if (!S.empty() && out_all > 0) count(o.all_holders, es, out_all);
        bool leaves = false, needer_holds = false;
        for (int64_t d : nd) {
          if (!holds_all_dev(d)) {
            missing[d] += es;
            leaves = true;
          }
          for (const auto& [s, ds] : dev_of) needer_holds |= ds.count(d) > 0;
        }
        if (leaves) leave += es * (k >= 2 ? k - 1 : 1);
        // k >= 2: one-way gossip, k + |nd| - 1 - [a needer holds a summand]
        // messages; over hosts, the least over the first host u to know
        // the value (any host, or one with nothing) of the hosts other than
        // u alone holding a summand (F), the summands u lacks none of whose
        // hosts is in F over the most of them one host holds, and the
        // needer hosts but u.
        if (k >= 2) {
          extra_messages += es * (k - 1 - needer_holds);
          bool host_holds_all = false;
          for (int32_t h : all_hosts) {
            bool all = true;
            for (const auto& [s, hs] : hosts_of) all &= hs.count(h) > 0;
            host_holds_all |= all;
          }
          if (!host_holds_all) {
            std::set<int32_t> F;
            for (const auto& [s, hs] : hosts_of)
              if (hs.size() == 1) F.insert(*hs.begin());
            // Summands none of whose hosts is in F, and the most of them
            // one host holds.
            std::map<int32_t, int64_t> uncovered_on;
            int64_t most = 1;
            for (const auto& [s, hs] : hosts_of) {
              bool covered = false;
              for (int32_t h : hs) covered |= F.count(h) > 0;
              if (!covered)
                for (int32_t h : hs) most = std::max(most, ++uncovered_on[h]);
            }
            auto cost = [&](int32_t u, bool real) {
              int64_t c = static_cast<int64_t>(F.size()) - (real && F.count(u));
              int64_t lacked = 0;  // uncovered summands u lacks
              for (const auto& [s, hs] : hosts_of) {
                if (real && hs.count(u)) continue;
                bool covered = false;
                for (int32_t h : hs) covered |= F.count(h) > 0;
                lacked += !covered;
              }
              return c + (lacked + most - 1) / most + static_cast<int64_t>(nh.size()) -
                     (real && nh.count(u));
            };
            int64_t best = cost(-1, false);
            for (int32_t u : all_hosts) best = std::min(best, cost(u, true));
            extra_crossings += es * (best - static_cast<int64_t>(nh.size()));
          }
        }
        auto needers_on = [&](int32_t h) {
          int64_t c = 0;
          for (int64_t d : nd) c += in.topology.info(d).host == h;
          return c;
        };
        for (int32_t h : nh)
          if (!holds_all_host(h)) {
            ingress[h] += es;
            least(o.ingress_fan, h, needers_on(h));
          }
        std::set<int32_t> sending_hosts;
        std::set<int64_t> sending_devs;
        for (int32_t s : G) {
          std::set<int32_t> hs;
          for (int64_t d : dev_of[s]) hs.insert(in.topology.info(d).host);
          if (hs.size() == 1 && (nh.size() > 1 || *nh.begin() != *hs.begin()))
            sending_hosts.insert(*hs.begin());
          if (dev_of[s].size() == 1 && (nd.size() > 1 || *nd.begin() != *dev_of[s].begin()))
            sending_devs.insert(*dev_of[s].begin());
        }
        for (int32_t h : sending_hosts) {
          egress[h] += es;
          least(o.egress_fan, h, static_cast<int64_t>(nd.size()) - needers_on(h));
        }
        for (int64_t d : sending_devs) {
          forced[d] += es;
          least(o.forced_fan, d, static_cast<int64_t>(nd.size()) - (nd.count(d) ? 1 : 0));
        }
      }
    }
  }
  for (auto [d, v] : missing) {
    o.network += v;
    o.max_recv = std::max(o.max_recv, v);
  }
  o.network += extra_messages;
  for (auto [d, v] : forced) o.max_send = std::max(o.max_send, v);
  if (!devices.empty()) {
    const auto nd = static_cast<int64_t>(devices.size());
    o.max_send = std::max(o.max_send, (o.network + nd - 1) / nd);
    o.max_recv = std::max(o.max_recv, (o.network + nd - 1) / nd);
  }
  if (!holders.empty()) {
    const auto nh = static_cast<int64_t>(holders.size());
    o.max_send = std::max(o.max_send, (leave + nh - 1) / nh);
  }
  int64_t in_sum = 0, out_sum = 0;
  for (auto [h, v] : ingress) {
    in_sum += v;
    o.max_host_recv = std::max(o.max_host_recv, v);
  }
  for (auto [h, v] : egress) {
    out_sum += v;
    o.max_host_send = std::max(o.max_host_send, v);
  }
  o.cross_host = std::max({in_sum, out_sum, in_sum + extra_crossings});
  if (!host_devices.empty()) {
    const auto nh = static_cast<int64_t>(host_devices.size());
    o.max_host_send = std::max(o.max_host_send, (o.cross_host + nh - 1) / nh);
    o.max_host_recv = std::max(o.max_host_recv, (o.cross_host + nh - 1) / nh);
  }
  return o;
}

}  // namespace reshard::testing
