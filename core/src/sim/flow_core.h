// Internal: what the simulator's two event loops share (flows.cc over a
// vector of messages, stream.cc over a plan's parts): the cluster's links
// and the max-min fair rates of the flows on them (progressive filling).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <queue>
#include <utility>
#include <vector>

#include "reshard/error.h"
#include "reshard/simulate.h"

namespace reshard::sim {

inline constexpr uint32_t kNoLink = 0xffffffffu;

// Links of the cluster, created in the order messages first use them (that
// order breaks ties: deterministic).
struct Links {
  std::vector<SimLink> info;
  std::vector<double> cap;
  std::map<std::pair<int32_t, int64_t>, uint32_t> index;  // (kind key, id) -> link

  uint32_t get(LinkClass cls, int32_t host, int64_t device, int32_t nic, double cap_bps) {
    const int64_t id = device >= 0 ? device : (int64_t{host} << 24 | (nic < 0 ? 0xffffff : nic));
    const auto key = std::make_pair(static_cast<int32_t>(cls) | (device >= 0 ? 0x100 : 0), id);
    auto [it, fresh] = index.emplace(key, static_cast<uint32_t>(info.size()));
    if (fresh) {
      info.push_back({cls, host, device, nic, cap_bps});
      cap.push_back(cap_bps);
    }
    return it->second;
  }
};

struct Flow {
  std::array<uint32_t, 4> links{kNoLink, kNoLink, kNoLink, kNoLink};
  double remaining = 0;
  double rate = 0;
};

// Max-min fair rates of the active flows (progressive filling): repeatedly
// take the link with the smallest fair share of what remains, give that
// share to its unfrozen flows, remove them from their other links.
// `flow(a)` is the a-th of `n` active flows; `bottlenecks` receives the links
// that fixed a share (saturated until the next event).
class MaxMin {
 public:
  explicit MaxMin(size_t links) : rem_(links), unfrozen_(links), on_link_(links) {}

  template <class FlowAt>
  void allocate(const std::vector<double>& cap, size_t n, FlowAt&& flow,
                std::vector<uint32_t>& bottlenecks) {
    const size_t nl = cap.size();
    bottlenecks.clear();
    for (size_t l = 0; l < nl; ++l) {
      on_link_[l].clear();
      unfrozen_[l] = 0;
      rem_[l] = cap[l];
    }
    for (size_t a = 0; a < n; ++a)
      for (uint32_t l : flow(a).links)
        if (l != kNoLink) {
          on_link_[l].push_back(static_cast<uint32_t>(a));
          ++unfrozen_[l];
        }
    frozen_.assign(n, 0);
    // A link's fair share only grows as flows freeze elsewhere (a flow
    // leaving it took at most its share), so heap entries are lower bounds
    // and are refreshed lazily: a popped entry below its link's current
    // share goes back with the current one; the first current entry popped
    // is the smallest share.
    using Share = std::pair<double, uint32_t>;  // (share, link)
    std::priority_queue<Share, std::vector<Share>, std::greater<>> heap;
    for (uint32_t l = 0; l < nl; ++l)
      if (unfrozen_[l] > 0) heap.emplace(rem_[l] / static_cast<double>(unfrozen_[l]), l);
    while (!heap.empty()) {
      const auto [low, l] = heap.top();
      heap.pop();
      if (unfrozen_[l] == 0) continue;
      const double share = rem_[l] / static_cast<double>(unfrozen_[l]);
      if (share > low) {
        heap.emplace(share, l);
        continue;
      }
      bottlenecks.push_back(l);
      for (uint32_t a : on_link_[l]) {
        if (frozen_[a]) continue;
        frozen_[a] = 1;
        Flow& f = flow(a);
        f.rate = share;
        for (uint32_t l2 : f.links) {
          if (l2 == kNoLink) continue;
          --unfrozen_[l2];
          if (l2 != l) rem_[l2] = std::max(0.0, rem_[l2] - share);
        }
      }
      unfrozen_[l] = 0;
      rem_[l] = 0;
    }
  }

 private:
  std::vector<double> rem_;
  std::vector<int64_t> unfrozen_;
  std::vector<std::vector<uint32_t>> on_link_;
  std::vector<uint8_t> frozen_;
};

// One step of an event loop: the next event is a start at `t_start` or the
// first completion at the flows' current rates (flow_of(m): message m's
// Flow). Advances every active flow to it, charges the interval to the
// saturated links, and calls complete(m) for each flow at its end or within
// a millionth of its bytes (bytes_of(m)) of it: equal-sized flows that
// differ by a byte of a remainder, or by rounding, complete in one event,
// not one each. Keeps the rest in `active`, in order. `now` becomes the
// event's time before the first complete(m).
template <class FlowOf, class BytesOf, class Complete>
void advance_to_next_event(double& now, double t_start, std::vector<uint32_t>& active,
                           const std::vector<uint32_t>& bottlenecks, std::vector<double>& saturated,
                           FlowOf&& flow_of, BytesOf&& bytes_of, Complete&& complete) {
  double t_done = std::numeric_limits<double>::infinity();
  for (uint32_t m : active) {
    const Flow& f = flow_of(m);
    if (f.rate > 0) t_done = std::min(t_done, now + f.remaining / f.rate);
  }
  const double t_next = std::min(t_done, t_start);
  if (!std::isfinite(t_next))
    fail(ErrorCode::kInternal, "simulate: active flows with no rate and nothing to start");
  const double dt = t_next - now;
  for (uint32_t l : bottlenecks) saturated[l] += dt;
  for (uint32_t m : active) {
    Flow& f = flow_of(m);
    f.remaining -= f.rate * dt;
  }
  now = t_next;
  size_t kept = 0;
  for (uint32_t m : active) {
    const Flow& f = flow_of(m);
    const double slack = 1e-6 * static_cast<double>(std::max<int64_t>(bytes_of(m), 1));
    if (f.remaining <= slack)
      complete(m);
    else
      active[kept++] = m;
  }
  active.resize(kept);
}

// Keeps the active flows ordered by `less` (distinct keys) after an event:
// the first `kept` of `active` are the flows advance_to_next_event kept, in
// order, and the rest were started since. Sorts only those and merges
// (through `scratch`): the order of a full sort, in time linear in the
// flows kept.
template <class Less>
void merge_started(std::vector<uint32_t>& active, size_t kept, std::vector<uint32_t>& scratch,
                   Less&& less) {
  if (kept >= active.size()) return;
  const auto mid = active.begin() + static_cast<std::ptrdiff_t>(kept);
  std::sort(mid, active.end(), less);
  if (kept == 0 || !less(*mid, *(mid - 1))) return;
  scratch.clear();
  std::merge(active.begin(), mid, mid, active.end(), std::back_inserter(scratch), less);
  active.swap(scratch);
}

}  // namespace reshard::sim
