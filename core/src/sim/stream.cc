// The streaming simulator of reshard/simulate.h (simulate_plan): the plan's
// parts are planned one batch at a time and each is reduced, before the
// next, to compact records (varints, about 8 bytes a message) in its lanes'
// round order; the event loop then holds flow state only for the messages
// of the rounds its lanes are in. The loop is flows.cc's, step for step
// (message indices, link order, tie-breaks), so the results are equal.
#include <algorithm>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "plan/each_part.h"
#include "reshard/error.h"
#include "reshard/simulate.h"
#include "reshard/wait.h"
#include "sim/flow_core.h"
#include "sim/nic_groups.h"
#include "sim/part_messages.h"
#include "sim/stream_memory.h"

namespace reshard {
namespace {

using sim::advance_to_next_event;
using sim::Flow;
using sim::kNoLink;

void put(std::vector<uint8_t>& b, uint64_t v) {
  while (v >= 0x80) {
    b.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  b.push_back(static_cast<uint8_t>(v));
}

uint64_t get(const uint8_t*& p) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t c = *p++;
    v |= uint64_t{c & 0x7fu} << shift;
    if (c < 0x80) return v;
  }
}

uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t unzigzag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// A message by its ends (dense device indices), stage, round and sub
// (Message::sub): unique in a plan. Stage and sub share a word, so that a
// key stays 16 bytes (add_part refuses larger values).
constexpr uint32_t kMaxStages = 1u << 20;
constexpr uint32_t kMaxSubs = 1u << 12;
struct Key {
  uint32_t src = 0, dst = 0;
  uint32_t stage : 20 = 0;
  uint32_t sub : 12 = 0;
  uint32_t round = 0;
  friend bool operator==(const Key&, const Key&) = default;
};
static_assert(sizeof(Key) == 16);
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = (uint64_t{k.src} << 32 | k.dst) * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t{k.stage} << 44 | uint64_t{k.sub} << 32 | k.round) + 0x7f4a7c159e3779b9ull +
         (h << 6) + (h >> 2);
    return static_cast<size_t>(h * 0xbf58476d1ce4e5b9ull);
  }
};

// Per process and stage (a lane): its rounds with messages, how many it
// sends and receives in each, and the records of its sends in round order
// (blocks freed once read).
struct Lane {
  std::vector<uint32_t> pending;  // by round: messages sent or received
  std::vector<uint32_t> sends;    // by round: send records
  std::deque<std::vector<uint8_t>> blocks;
  int64_t last_index = 0;  // the index of the last record written (deltas)
  // Simulation: the current round (kDone past the last) and what is left of it.
  static constexpr uint32_t kDone = 0xffffffffu;
  static constexpr uint32_t kBefore = 0xfffffffeu;  // not entered yet
  uint32_t round = kBefore;
  size_t next = 0;   // position in `pending` to look for the next round from
  int64_t left = 0;  // messages of the current round not completed
  size_t block = 0;  // reading position in `blocks`
  size_t offset = 0;
  int64_t read_index = 0;
  std::map<uint32_t, std::vector<uint32_t>> waiting;  // round -> live messages sent to it
  // The most sends and the most dependencies of its sends in one round:
  // what the loop holds of this lane at once.
  uint32_t most_sends = 0, most_deps = 0;
};

constexpr size_t kBlockBytes = size_t{1} << 18;

template <class V>
int64_t vector_bytes(const std::vector<V>& v) {
  return sim::alloc_bytes(static_cast<int64_t>(v.capacity() * sizeof(V)));
}
constexpr uint32_t kNoProcess = 0xffffffffu;

// Everything the event loop reads, built part by part.
struct Store {
  const Topology* topo = nullptr;
  const ClusterTopology* cluster = nullptr;
  std::vector<int32_t> processes;                  // sorted
  std::vector<uint32_t> dev_proc;                  // dense device -> dense process
  std::vector<int32_t> dev_host;                   // dense device -> host
  std::vector<std::array<uint32_t, 4>> dev_links;  // intra out, intra in, NIC out, NIC in
  std::unordered_map<int32_t, std::array<uint32_t, 2>> host_links;  // host out, in
  sim::HostMap hosts;
  sim::Links links;
  bool identity = true;                  // dense index == device id
  std::vector<std::vector<Lane>> lanes;  // [dense process][stage]
  int64_t messages = 0, bytes = 0;
  sim::StreamBytes counted;  // what the structures above hold

  uint32_t dense(int64_t device) const {
    const std::vector<DeviceInfo>& d = topo->devices();
    if (identity) {
      if (device >= 0 && static_cast<uint64_t>(device) < d.size())
        return static_cast<uint32_t>(device);
    } else {
      auto it = std::lower_bound(d.begin(), d.end(), device,
                                 [](const DeviceInfo& a, int64_t v) { return a.device < v; });
      if (it != d.end() && it->device == device) return static_cast<uint32_t>(it - d.begin());
    }
    fail(ErrorCode::kInvalidArgument, "plan",
         "a message names device " + std::to_string(device) + ", not in the topology");
  }

  void init(const Topology& t, const ClusterTopology& c, const std::vector<int32_t>& procs) {
    topo = &t;
    cluster = &c;
    processes = procs;
    std::sort(processes.begin(), processes.end());
    const std::vector<DeviceInfo>& d = t.devices();
    for (size_t i = 0; i < d.size(); ++i) {
      identity = identity && d[i].device == static_cast<int64_t>(i);
      hosts.add(d[i].host, d[i].device);
    }
    hosts.finish();
    dev_proc.resize(d.size());
    dev_host.resize(d.size());
    dev_links.assign(d.size(), {kNoLink, kNoLink, kNoLink, kNoLink});
    for (size_t i = 0; i < d.size(); ++i) {
      // Devices of processes the plan does not name carry no message.
      const auto it = std::lower_bound(processes.begin(), processes.end(), d[i].process);
      dev_proc[i] = it == processes.end() || *it != d[i].process
                        ? kNoProcess
                        : static_cast<uint32_t>(it - processes.begin());
      dev_host[i] = d[i].host;
    }
    lanes.resize(processes.size());
  }

  Lane& lane(uint32_t proc, uint32_t stage) {
    std::vector<Lane>& v = lanes[proc];
    if (v.size() <= stage) v.resize(static_cast<size_t>(stage) + 1);
    return v[stage];
  }

  static void count(std::vector<uint32_t>& v, uint32_t round) {
    if (v.size() <= round) v.resize(static_cast<size_t>(round) + 1, 0);
    ++v[round];
  }

  // The links of a message, created in the order flows.cc creates them.
  void make_links(uint32_t s, uint32_t d) {
    const double intra = cluster->intra_host_bytes_per_second;
    const int64_t sd = topo->devices()[s].device, dd = topo->devices()[d].device;
    const int32_t sh = dev_host[s], dh = dev_host[d];
    if (sh == dh) {
      uint32_t& o = dev_links[s][0];
      if (o == kNoLink) o = links.get(LinkClass::kIntraOut, sh, sd, -1, intra);
      uint32_t& i = dev_links[d][1];
      if (i == kNoLink) i = links.get(LinkClass::kIntraIn, dh, dd, -1, intra);
      return;
    }
    const int32_t nics = cluster->nics_per_host;
    uint32_t& o = dev_links[s][2];
    if (o == kNoLink) {
      const auto [g, n] = hosts.nic_group(sh, sd, nics);
      o = links.get(LinkClass::kNicOut, sh, -1, g, n * cluster->nic_bytes_per_second);
    }
    uint32_t& i = dev_links[d][3];
    if (i == kNoLink) {
      const auto [g, n] = hosts.nic_group(dh, dd, nics);
      i = links.get(LinkClass::kNicIn, dh, -1, g, n * cluster->nic_bytes_per_second);
    }
    if (cluster->host_link_bytes_per_second > 0) {
      const double cap = cluster->host_link_bytes_per_second;
      auto [so, f1] = host_links.try_emplace(sh, std::array<uint32_t, 2>{kNoLink, kNoLink});
      if (so->second[0] == kNoLink) so->second[0] = links.get(LinkClass::kHostOut, sh, -1, -1, cap);
      auto [di, f2] = host_links.try_emplace(dh, std::array<uint32_t, 2>{kNoLink, kNoLink});
      if (di->second[1] == kNoLink) di->second[1] = links.get(LinkClass::kHostIn, dh, -1, -1, cap);
    }
  }

  std::array<uint32_t, 4> flow_links(uint32_t s, uint32_t d) const {
    if (dev_host[s] == dev_host[d]) return {dev_links[s][0], dev_links[d][1], kNoLink, kNoLink};
    if (cluster->host_link_bytes_per_second <= 0)
      return {dev_links[s][2], dev_links[d][3], kNoLink, kNoLink};
    return {dev_links[s][2], dev_links[d][3], host_links.at(dev_host[s])[0],
            host_links.at(dev_host[d])[1]};
  }

  // Adds the sends of `part` (of `plan`): message indices from `messages` on,
  // in the order of part.sends (plan_messages' order).
  void add_part(const Plan& plan, const ProcessPart& part) {
    const int64_t base = messages;
    struct Rec {
      uint32_t s, d, stage, round, sub;
      int64_t bytes;
      std::vector<Key> after;
    };
    std::vector<Rec> recs;
    recs.reserve(part.sends.size());
    std::vector<uint8_t> tmp;
    sim::part_sends(plan, part, [&](size_t, const Message& m, std::span<const uint32_t> found) {
      if (m.bytes < 0) fail(ErrorCode::kInvalidArgument, "plan", "a message of negative size");
      if (m.stage >= kMaxStages || m.sub >= kMaxSubs)
        fail(ErrorCode::kInvalidArgument, "plan",
             "a message of stage " + std::to_string(m.stage) + ", sub " + std::to_string(m.sub) +
                 ": the simulator takes stages below " + std::to_string(kMaxStages) +
                 " and subs below " + std::to_string(kMaxSubs));
      Rec r{dense(m.src_device), dense(m.dst_device), m.stage, m.round, m.sub, m.bytes, {}};
      if (dev_proc[r.s] == kNoProcess || dev_proc[r.d] == kNoProcess)
        fail(ErrorCode::kInvalidArgument, "plan",
             "a message between devices " + std::to_string(m.src_device) + " and " +
                 std::to_string(m.dst_device) + ", one of a process the plan does not name");
      if (r.s == r.d)
        fail(ErrorCode::kInvalidArgument, "plan",
             "a message from device " + std::to_string(m.src_device) + " to itself");
      for (uint32_t i : found) {
        const Message& a = part.recvs[i];
        if (a.sub >= kMaxSubs)  // its stage is below m's
          fail(ErrorCode::kInvalidArgument, "plan",
               "a message of sub " + std::to_string(a.sub) + ": the simulator takes subs below " +
                   std::to_string(kMaxSubs));
        Key k{dense(a.src_device), dense(a.dst_device)};
        k.stage = a.stage;
        k.sub = a.sub;
        k.round = a.round;
        r.after.push_back(k);
      }
      make_links(r.s, r.d);
      recs.push_back(std::move(r));
    });
    // Records in (stage, round) order per lane; the planner's sends are.
    std::vector<uint32_t> order(recs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
    auto before = [&](uint32_t a, uint32_t b) {
      return std::tie(recs[a].stage, recs[a].round) < std::tie(recs[b].stage, recs[b].round);
    };
    if (!std::is_sorted(order.begin(), order.end(), before))
      std::stable_sort(order.begin(), order.end(), before);
    // The busiest round of each lane this part writes: its sends and their
    // dependencies.
    // The run's lane by its indices: lane() may grow a process's lanes, so
    // a pointer kept across calls could dangle.
    uint32_t run_round = 0, run_sends = 0, run_deps = 0, run_proc = 0, run_stage = 0;
    bool in_run = false;
    auto close_run = [&] {
      if (!in_run) return;
      Lane& run = lanes[run_proc][run_stage];
      run.most_sends = std::max(run.most_sends, run_sends);
      run.most_deps = std::max(run.most_deps, run_deps);
    };
    for (uint32_t i : order) {
      const Rec& r = recs[i];
      const int64_t index = base + i;
      const uint32_t sp = dev_proc[r.s], dp = dev_proc[r.d];
      Lane& l = lane(sp, r.stage);
      if (!in_run || sp != run_proc || r.stage != run_stage || r.round != run_round) {
        close_run();
        in_run = true;
        run_proc = sp;
        run_stage = r.stage;
        run_round = r.round;
        run_sends = run_deps = 0;
      }
      ++run_sends;
      run_deps += static_cast<uint32_t>(r.after.size());
      count(l.pending, r.round);
      count(l.sends, r.round);
      if (dp != sp) count(lane(dp, r.stage).pending, r.round);
      tmp.clear();
      put(tmp, zigzag(index - l.last_index));
      l.last_index = index;
      put(tmp, r.s);
      put(tmp, r.d);
      put(tmp, r.sub);
      put(tmp, static_cast<uint64_t>(r.bytes));
      put(tmp, r.after.size());
      // A dependency relative to its message: the same device (what it
      // forwards arrived there), an earlier stage, a nearby round.
      for (const Key& k : r.after) {
        put(tmp, k.src);
        put(tmp, zigzag(int64_t{k.dst} - int64_t{r.s}));
        put(tmp, zigzag(int64_t{r.stage} - int64_t{k.stage}));
        put(tmp, zigzag(int64_t{k.round} - int64_t{r.round}));
        put(tmp, k.sub);
      }
      // Blocks never grow past what they reserved (no doubling slack): 1 KiB
      // first, each next twice the last up to kBlockBytes.
      if (l.blocks.empty() || l.blocks.back().size() + tmp.size() > l.blocks.back().capacity()) {
        const size_t last = l.blocks.empty() ? 512 : l.blocks.back().capacity();
        l.blocks.emplace_back();
        l.blocks.back().reserve(std::max(std::min(2 * last, kBlockBytes), tmp.size()));
        counted.records += sim::alloc_bytes(static_cast<int64_t>(l.blocks.back().capacity()));
      }
      l.blocks.back().insert(l.blocks.back().end(), tmp.begin(), tmp.end());
      bytes += r.bytes;
    }
    close_run();
    messages += static_cast<int64_t>(recs.size());
    count_lanes();
  }

  // The lanes' tables and the loop's bound, recounted; the peak so far.
  void count_lanes() {
    int64_t tables = 0, bound = 0;
    for (const std::vector<Lane>& v : lanes) {
      tables += sim::alloc_bytes(static_cast<int64_t>(v.capacity() * sizeof(Lane)));
      for (const Lane& l : v) {
        tables += vector_bytes(l.pending) + vector_bytes(l.sends);
        // The deque's map and its nodes (512 bytes each).
        tables +=
            sim::alloc_bytes(64 * 8) +
            sim::alloc_bytes(512) *
                static_cast<int64_t>((l.blocks.size() * sizeof(std::vector<uint8_t>)) / 512 + 1);
        bound += int64_t{l.most_sends} * sim::loop_bytes_per_send() +
                 int64_t{l.most_deps} * sim::loop_bytes_per_dependency();
      }
    }
    counted.lanes = tables;
    counted.loop_bound = bound + loop_fixed_bytes();
    held(0);
  }

  // The loop's state that does not grow with its messages: per link, lane
  // and device.
  int64_t loop_fixed_bytes() const {
    const int64_t nl = static_cast<int64_t>(links.cap.size());
    int64_t nlanes = 0;
    for (const std::vector<Lane>& v : lanes) nlanes += static_cast<int64_t>(v.size());
    // saturated, MaxMin's per-link arrays (remaining, unfrozen, on_link's
    // vectors), the bottlenecks; lane pointers, bases, the finished list,
    // the stages.
    return 8 * sim::alloc_bytes(nl * 32) + 4 * sim::alloc_bytes(nlanes * 8) +
           sim::alloc_bytes(static_cast<int64_t>(lanes.size() + 1) * 4) + 64 * 1024;
  }

  // Records what is held now (the structures above plus `loop`).
  void held(int64_t loop) {
    counted.peak = std::max(counted.peak, counted.records + counted.lanes + loop);
  }
};

// A message whose round some lane entered, until it completes.
struct Live {
  Flow flow;
  int64_t bytes = 0;
  int64_t index = 0;
  Key key;
  uint32_t lane[2] = {0, 0};
  uint32_t deps_left = 0;
  uint8_t ready = 0, need = 0;
};

// A uint32 by message key (the live messages' slots; the lists of
// messages waiting for one): open addressing with linear probing, at most
// three quarters full, deletion by backward shift (no tombstones).
class LiveIndex {
 public:
  static constexpr uint32_t kFree = 0xffffffffu;
  struct Cell {
    Key key;
    uint32_t slot = kFree;
  };

  void insert(const Key& k, uint32_t slot) {
    if (4 * (size_ + 1) > 3 * cells_.size()) grow();
    size_t i = home(k);
    while (cells_[i].slot != kFree) i = (i + 1) & mask_;
    cells_[i] = {k, slot};
    ++size_;
  }
  // The value of `k`, kFree without one.
  uint32_t find(const Key& k) const {
    if (cells_.empty()) return kFree;
    for (size_t i = home(k);; i = (i + 1) & mask_) {
      if (cells_[i].slot == kFree || cells_[i].key == k) return cells_[i].slot;
    }
  }
  bool contains(const Key& k) const { return find(k) != kFree; }
  void erase(const Key& k) {
    if (cells_.empty()) return;
    size_t i = home(k);
    for (;; i = (i + 1) & mask_) {
      if (cells_[i].slot == kFree) return;
      if (cells_[i].key == k) break;
    }
    // Later cells of the run move back unless their home lies in (i, j].
    for (size_t j = (i + 1) & mask_; cells_[j].slot != kFree; j = (j + 1) & mask_) {
      const size_t h = home(cells_[j].key);
      if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
      cells_[i] = cells_[j];
      i = j;
    }
    cells_[i].slot = kFree;
    --size_;
  }
  size_t capacity() const { return cells_.size(); }
  size_t size() const { return size_; }

 private:
  size_t home(const Key& k) const { return KeyHash{}(k) >> shift_; }  // the hash's high bits
  void grow() {
    std::vector<Cell> old;
    old.swap(cells_);
    const size_t n = std::max<size_t>(64, 2 * old.size());
    cells_.assign(n, Cell{});
    mask_ = n - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(n));
    size_ = 0;
    for (const Cell& c : old)
      if (c.slot != kFree) insert(c.key, c.slot);
  }
  std::vector<Cell> cells_;
  size_t mask_ = 0, size_ = 0;
  unsigned shift_ = 64;
};

using Act = std::tuple<double, int64_t, uint32_t>;  // (time, message index, slot)
// The messages due to start, earliest first; its vector's capacity counted.
struct Starts : std::priority_queue<Act, std::vector<Act>, std::greater<>> {
  size_t capacity() const { return c.capacity(); }
};

// Allocations of the loop's hash and tree nodes: a next pointer (and a
// cached hash) with the key and value; a tree node's three pointers and
// colour.
constexpr int64_t kRoundNodeBytes =
    sim::alloc_bytes(32 + sizeof(uint32_t) + sizeof(std::vector<uint32_t>));
// MaxMin's per active flow: its place on up to 4 links' lists, doubled,
// and its frozen flag.
constexpr int64_t kMaxMinBytesPerFlow = 2 * 4 * 4 + 2;

SimResult run(Store& st) {
  // Lanes in (process, stage) order, flows.cc's lane order.
  std::vector<Lane*> lanes;
  std::vector<uint32_t> lane_base(st.lanes.size() + 1, 0);
  for (size_t p = 0; p < st.lanes.size(); ++p) {
    lane_base[p] = static_cast<uint32_t>(lanes.size());
    for (Lane& l : st.lanes[p]) lanes.push_back(&l);
  }
  lane_base[st.lanes.size()] = static_cast<uint32_t>(lanes.size());
  st.counted.records_planned = st.counted.records;
  auto lane_id = [&](uint32_t proc, uint32_t stage) { return lane_base[proc] + stage; };
  const size_t nl = st.links.cap.size();

  std::vector<Live> live;
  std::vector<uint32_t> free_slots;
  LiveIndex live_by_key;
  // The messages waiting for a message not completed: its list in
  // `waiter_lists` (free ones reused).
  LiveIndex waiters;
  std::vector<std::vector<uint32_t>> waiter_lists;
  std::vector<uint32_t> free_lists;
  Starts starts;
  const double alpha = st.cluster->alpha_seconds;
  double now = 0;
  std::map<uint32_t, SimStage> stages;
  // The vectors of `waiters` and of the lanes' `waiting` (with its nodes).
  int64_t waiter_bytes = 0, waiting_bytes = 0;

  auto maybe_ready = [&](uint32_t slot) {
    Live& m = live[slot];
    if (m.ready != m.need || m.deps_left != 0) return;
    auto [it, fresh] = stages.try_emplace(m.key.stage);
    if (fresh) {
      it->second.stage = m.key.stage;
      it->second.start_seconds = now;
    }
    it->second.start_seconds = std::min(it->second.start_seconds, now);
    starts.emplace(now + alpha, m.index, slot);
  };
  // Whether the message `k` completed: its sender's lane passed its round,
  // or is in it and the message is no longer live.
  auto done = [&](const Key& k) {
    const uint32_t p = st.dev_proc[k.src];
    if (p == kNoProcess || k.stage >= lane_base[p + 1] - lane_base[p]) return true;  // none
    const Lane& s = *lanes[lane_id(p, k.stage)];
    if (s.round == Lane::kBefore) return false;
    if (s.round == Lane::kDone || s.round > k.round) return true;
    return s.round == k.round && !live_by_key.contains(k);
  };
  std::vector<uint32_t> finished;
  // Lane `li` enters its next round with messages (if any): its sends become
  // live; messages sent to it in that round are now ready on its side.
  auto enter = [&](uint32_t li) {
    Lane& l = *lanes[li];
    while (l.next < l.pending.size() && l.pending[l.next] == 0) ++l.next;
    if (l.next >= l.pending.size()) {
      l.round = Lane::kDone;
      for (const std::vector<uint8_t>& b : l.blocks)
        st.counted.records -= sim::alloc_bytes(static_cast<int64_t>(b.capacity()));
      l.blocks.clear();
      return;
    }
    l.round = static_cast<uint32_t>(l.next);
    l.left = l.pending[l.next];
    const uint32_t nsend = l.next < l.sends.size() ? l.sends[l.next] : 0;
    ++l.next;
    for (uint32_t j = 0; j < nsend; ++j) {
      if (l.offset >= l.blocks[l.block].size()) {
        st.counted.records -= sim::alloc_bytes(static_cast<int64_t>(l.blocks[l.block].capacity()));
        std::vector<uint8_t>().swap(l.blocks[l.block]);
        ++l.block;
        l.offset = 0;
      }
      const std::vector<uint8_t>& b = l.blocks[l.block];
      const uint8_t* p = b.data() + l.offset;
      l.read_index += unzigzag(get(p));
      uint32_t slot;
      if (free_slots.empty()) {
        slot = static_cast<uint32_t>(live.size());
        live.emplace_back();
      } else {
        slot = free_slots.back();
        free_slots.pop_back();
      }
      Live& m = live[slot];
      m = Live{};
      m.index = l.read_index;
      m.key.src = static_cast<uint32_t>(get(p));
      m.key.dst = static_cast<uint32_t>(get(p));
      m.key.stage = static_cast<uint32_t>(li - lane_base[st.dev_proc[m.key.src]]);
      m.key.round = l.round;
      m.key.sub = static_cast<uint32_t>(get(p));
      m.bytes = static_cast<int64_t>(get(p));
      m.flow.remaining = static_cast<double>(m.bytes);
      m.flow.links = st.flow_links(m.key.src, m.key.dst);
      const uint64_t na = get(p);
      for (uint64_t a = 0; a < na; ++a) {
        Key k;
        k.src = static_cast<uint32_t>(get(p));
        k.dst = static_cast<uint32_t>(int64_t{m.key.src} + unzigzag(get(p)));
        k.stage = static_cast<uint32_t>(int64_t{m.key.stage} - unzigzag(get(p)));
        k.round = static_cast<uint32_t>(int64_t{l.round} + unzigzag(get(p)));
        k.sub = static_cast<uint32_t>(get(p));
        if (done(k)) continue;
        uint32_t id = waiters.find(k);
        if (id == LiveIndex::kFree) {
          if (free_lists.empty()) {
            id = static_cast<uint32_t>(waiter_lists.size());
            waiter_lists.emplace_back();
          } else {
            id = free_lists.back();
            free_lists.pop_back();
          }
          waiters.insert(k, id);
        }
        std::vector<uint32_t>& w = waiter_lists[id];
        if (std::find(w.begin(), w.end(), slot) != w.end()) continue;
        waiter_bytes -= vector_bytes(w);
        w.push_back(slot);
        waiter_bytes += vector_bytes(w);
        ++m.deps_left;
      }
      l.offset = static_cast<size_t>(p - b.data());
      m.lane[0] = li;
      m.lane[1] = lane_id(st.dev_proc[m.key.dst], m.key.stage);
      m.need = m.lane[0] == m.lane[1] ? 1 : 2;
      live_by_key.insert(m.key, slot);
      m.ready = 1;
      if (m.need == 2) {
        Lane& r = *lanes[m.lane[1]];
        if (r.round == l.round)
          m.ready = 2;
        else {
          std::vector<uint32_t>& w = r.waiting[l.round];
          waiting_bytes -= vector_bytes(w) + (w.empty() ? 0 : kRoundNodeBytes);
          w.push_back(slot);
          waiting_bytes += vector_bytes(w) + kRoundNodeBytes;
        }
      }
      maybe_ready(slot);
    }
    auto w = l.waiting.find(l.round);
    if (w != l.waiting.end()) {
      for (uint32_t slot : w->second) {
        ++live[slot].ready;
        maybe_ready(slot);
      }
      waiting_bytes -= vector_bytes(w->second) + kRoundNodeBytes;
      l.waiting.erase(w);
    }
  };

  std::vector<uint32_t> active, merge_scratch;  // live slots, by message index
  std::vector<double> saturated(nl, 0);
  std::vector<uint32_t> bottlenecks;
  sim::MaxMin maxmin(nl);
  int64_t events = 0;
  SimResult r;
  r.messages = st.messages;
  r.bytes = st.bytes;
  int64_t completed = 0;

  auto complete = [&](uint32_t slot) {
    Live& m = live[slot];
    ++completed;
    SimStage& s = stages[m.key.stage];
    s.end_seconds = std::max(s.end_seconds, now);
    ++s.messages;
    s.bytes += m.bytes;
    for (int k = 0; k < m.need; ++k)
      if (--lanes[m.lane[k]]->left == 0) finished.push_back(m.lane[k]);
    live_by_key.erase(m.key);
    if (waiters.size() > 0) {
      const uint32_t id = waiters.find(m.key);
      if (id != LiveIndex::kFree) {
        std::vector<uint32_t>& w = waiter_lists[id];
        for (uint32_t d : w) {
          --live[d].deps_left;
          maybe_ready(d);
        }
        waiter_bytes -= vector_bytes(w);
        std::vector<uint32_t>().swap(w);
        free_lists.push_back(id);
        waiters.erase(m.key);
      }
    }
    free_slots.push_back(slot);
  };
  auto start_due = [&] {
    while (!starts.empty() && std::get<0>(starts.top()) <= now) {
      const uint32_t slot = std::get<2>(starts.top());
      starts.pop();
      if (live[slot].bytes == 0)
        complete(slot);
      else
        active.push_back(slot);
    }
  };

  const int64_t fixed = st.loop_fixed_bytes();
  for (uint32_t li = 0; li < lanes.size(); ++li) enter(li);
  // Flows started this event: slots are reused, so order by message index.
  auto by_index = [&](uint32_t a, uint32_t b) { return live[a].index < live[b].index; };
  while (!starts.empty() || !active.empty()) {
    const double t_start =
        starts.empty() ? std::numeric_limits<double>::infinity() : std::get<0>(starts.top());
    advance_to_next_event(
        now, t_start, active, bottlenecks, saturated,
        [&](uint32_t m) -> Flow& { return live[m].flow; },
        [&](uint32_t m) { return live[m].bytes; }, complete);
    const size_t kept = active.size();
    start_due();
    while (!finished.empty()) {
      std::vector<uint32_t> batch;
      batch.swap(finished);
      std::sort(batch.begin(), batch.end());
      for (uint32_t li : batch) enter(li);
      start_due();
    }
    sim::merge_started(active, kept, merge_scratch, by_index);
    ++events;
    const int64_t loop =
        static_cast<int64_t>(
            live.capacity() * sizeof(Live) + free_slots.capacity() * 4 + active.capacity() * 4 +
            merge_scratch.capacity() * 4 + starts.capacity() * sizeof(Act) +
            live_by_key.capacity() * sizeof(LiveIndex::Cell) +
            waiters.capacity() * sizeof(LiveIndex::Cell) +
            waiter_lists.capacity() * sizeof(std::vector<uint32_t>) + free_lists.capacity() * 4) +
        static_cast<int64_t>(active.capacity()) * kMaxMinBytesPerFlow + waiter_bytes +
        waiting_bytes;
    st.counted.loop = std::max(st.counted.loop, loop);
    st.held(loop + fixed);
    maxmin.allocate(
        st.links.cap, active.size(), [&](size_t a) -> Flow& { return live[active[a]].flow; },
        bottlenecks);
  }
  if (completed != st.messages)
    fail(ErrorCode::kInvalidArgument, "messages",
         std::to_string(st.messages - completed) +
             " message(s) never start: their dependencies (after) and rounds wait on each other");
  r.seconds = now;
  r.events = events;
  for (auto& [k, s] : stages) r.per_stage.push_back(s);
  for (size_t l = 0; l < nl; ++l)
    if (saturated[l] > r.binding_saturated_seconds) {
      r.binding_saturated_seconds = saturated[l];
      r.binding = st.links.info[l];
    }
  return r;
}

// Its slot in `live`, `free_slots`, `active`, `merge_scratch` and `starts`
// (vectors: up to twice their largest size), its place in MaxMin, a node and buckets of
// `live_by_key` (at least a quarter full, and the old table while it
// grows), its place and node in its receiver's `waiting`.
constexpr int64_t kLoopBytesPerSend =
    2 * static_cast<int64_t>(sizeof(Live) + 4 + 4 + 4 + sizeof(Act)) + kMaxMinBytesPerFlow +
    4 * static_cast<int64_t>(sizeof(LiveIndex::Cell)) + kRoundNodeBytes + sim::alloc_bytes(4);
// At worst a key of `waiters` each (four cells, as `live_by_key`), a list
// and a free-list entry (vectors: doubled) and the list's allocation.
constexpr int64_t kLoopBytesPerDependency =
    4 * static_cast<int64_t>(sizeof(LiveIndex::Cell)) +
    2 * static_cast<int64_t>(sizeof(std::vector<uint32_t>) + 4) + sim::alloc_bytes(4);
static_assert(kLoopBytesPerSend + kLoopBytesPerDependency <= kSimLiveBytesPerMessage,
              "the estimate's bytes per stream bound the loop's");

}  // namespace

namespace sim {
int64_t loop_bytes_per_send() { return kLoopBytesPerSend; }
int64_t loop_bytes_per_dependency() { return kLoopBytesPerDependency; }
}  // namespace sim

namespace {

double saturated(double v) {
  return v >= 9e18 ? static_cast<double>(std::numeric_limits<int64_t>::max()) : v;
}

// The estimate's records and lanes terms (the guard counts them instead).
double records_estimate(const PlanStats& stats) {
  const double m = static_cast<double>(std::max<int64_t>(stats.messages, 0));
  // Lanes: at most one per device and stage, each with its counts by round,
  // its first record block, its deque.
  const double devices = static_cast<double>(std::max<size_t>(stats.per_device.size(), 1));
  const double lanes = devices * std::max(stats.stages, 1);
  const double lane = static_cast<double>(
      sizeof(Lane) + 2 * sim::alloc_bytes(4 * (int64_t{std::max(stats.rounds, 0)} + 1)) +
      sim::alloc_bytes(1024) + 2 * sim::alloc_bytes(512));
  return m * kSimStreamBytesPerMessage + lanes * lane;
}

// Its other terms: the loop, which holds one round of each lane, at most
// one message of each (source, destination, stage) stream at once, and
// its per-link and per-device state.
double loop_estimate(const PlanStats& stats) {
  double streams = 0;
  for (const DeviceTraffic& d : stats.per_device) streams += static_cast<double>(d.send_messages);
  const double devices = static_cast<double>(std::max<size_t>(stats.per_device.size(), 1));
  return streams * static_cast<double>(kSimLiveBytesPerMessage) + devices * 6 * 8 * 32 + 64 * 1024;
}

}  // namespace

int64_t sim_stream_memory_estimate(const PlanStats& stats) {
  return static_cast<int64_t>(saturated(records_estimate(stats) + loop_estimate(stats)));
}

namespace {

int64_t add_sat(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

struct Estimated {};  // stops plan_each_part after the statistics

// simulate_plan, or (`estimate` not null) only its memory estimate;
// `counted` (not null) receives what its structures held.
SimResult stream_plan(const PlanInput& input, const ClusterTopology& cluster,
                      const SimPlanOptions& options, int64_t* estimate,
                      sim::StreamBytes* counted = nullptr) {
  validate(cluster);
  if (options.max_bytes < kUnlimitedPlanBytes)
    fail(ErrorCode::kInvalidArgument, "max_bytes",
         "must be >= 0 or kUnlimitedPlanBytes (-1), got " + std::to_string(options.max_bytes));
  Store st;
  PlanRequest req{PlanScope::kAll, 0, true};
  req.threads = options.threads;
  req.max_stats_pieces = options.max_stats_pieces;
  // The parts' estimate is wanted even without a limit.
  req.max_plan_bytes = 0;
  req.progress = options.parts_planned;
  planning::PartSink sink;
  // The estimate, and its terms other than the records' and lanes'.
  int64_t limit = kUnlimitedPlanBytes, planned_estimate = 0, estimate_rest = 0;
  double estimate_seconds = 0;
  sink.stats = [&](const Plan& plan, int64_t batch_bytes) {
    const PlanStats& s = plan.stats();
    estimate_seconds = s.cost_seconds;
    const int64_t records = sim_stream_memory_estimate(s);
    const int64_t need = add_sat(records, batch_bytes);
    if (estimate) {
      *estimate = need;
      throw Estimated{};
    }
    planned_estimate = need;
    estimate_rest = add_sat(static_cast<int64_t>(saturated(loop_estimate(s))), batch_bytes);
    if (options.max_bytes != kUnlimitedPlanBytes) {
      limit = options.max_bytes == 0 ? default_max_plan_bytes() : options.max_bytes;
      if (need > limit)
        fail(ErrorCode::kResourceExhausted, "max_bytes",
             "simulating the plan's " + std::to_string(s.messages) + " messages in " +
                 std::to_string(s.rounds) + " rounds needs about " + std::to_string(need) +
                 " bytes of memory (" + std::to_string(records) +
                 " for the messages' records, the lanes and the event loop, " +
                 std::to_string(batch_bytes) + " to plan one batch of parts), above the limit of " +
                 std::to_string(limit) + " bytes" +
                 (options.max_bytes == 0 ? " (the default, half the memory available)" : ""));
    }
    st.init(input.topology, cluster, plan.processes());
  };
  int64_t parts = 0;
  int64_t nparts = 0;
  sink.each = [&](const Plan& plan) {
    for (const auto& [p, part] : plan.parts()) st.add_part(plan, part);
    ++nparts;
    // The guard: the estimate with the records and lanes as counted so far
    // in place of their terms, against the limit, after every part.
    const int64_t held = add_sat(st.counted.records + st.counted.lanes, estimate_rest);
    if (limit != kUnlimitedPlanBytes && held > limit)
      fail(ErrorCode::kResourceExhausted, "max_bytes",
           "simulating the plan's " + std::to_string(plan.stats().messages) + " messages: after " +
               std::to_string(nparts) + " of " + std::to_string(plan.processes().size()) +
               " parts its records hold " + std::to_string(st.counted.records + st.counted.lanes) +
               " bytes, with the event loop and a batch of parts " + std::to_string(held) +
               ", above the limit of " + std::to_string(limit) + " bytes (estimated " +
               std::to_string(planned_estimate) +
               "); raise the limit, or simulate fewer messages (--budget 0, or a larger budget)");
#if defined(__GLIBC__)
    // The parts' freed buffers lie between the records' blocks: hand their
    // pages back now and then, or the peak is the records plus every part.
    if (++parts % 16 == 0) malloc_trim(0);
#else
    (void)parts;
#endif
  };
  const auto t0 = WaitClock::now();
  try {
    planning::plan_each_part(input, req, sink);
  } catch (const Estimated&) {
    return {};
  }
  const double planned = seconds_since(t0);
  SimResult r = run(st);
  r.plan_seconds = planned;
  r.estimate_seconds = estimate_seconds;
  if (counted) *counted = st.counted;
  return r;
}

}  // namespace

SimResult simulate_plan(const PlanInput& input, const ClusterTopology& cluster,
                        const SimPlanOptions& options) {
  return stream_plan(input, cluster, options, nullptr);
}

int64_t simulate_plan_memory(const PlanInput& input, const ClusterTopology& cluster,
                             const SimPlanOptions& options) {
  int64_t need = 0;
  stream_plan(input, cluster, options, &need);
  return need;
}

SimResult sim::simulate_plan_counted(const PlanInput& input, const ClusterTopology& cluster,
                                     const SimPlanOptions& options, StreamBytes& counted) {
  return stream_plan(input, cluster, options, nullptr, &counted);
}

SimResult simulate_plan(const Plan& plan, const ClusterTopology& cluster) {
  validate(cluster);
  Store st;
  st.init(plan.topology(), cluster, plan.processes());
  for (const auto& [p, part] : plan.parts()) st.add_part(plan, part);
  SimResult r = run(st);
  r.estimate_seconds = plan.stats().cost_seconds;
  return r;
}

}  // namespace reshard
