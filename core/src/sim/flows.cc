// The flow-level simulation of reshard/simulate.h: an event loop over
// message starts and completions; between two events every active flow has
// the max-min fair rate that progressive filling gives over its links.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>

#include "reshard/error.h"
#include "reshard/simulate.h"
#include "sim/flow_core.h"
#include "sim/nic_groups.h"

namespace reshard {

using sim::advance_to_next_event;
using sim::Flow;
using sim::kNoLink;
using sim::Links;

SimResult simulate(const Topology& topo, const ClusterTopology& cluster,
                   std::vector<SimMessage> messages) {
  validate(cluster);
  const size_t nm = messages.size();
  for (size_t i = 0; i < nm; ++i) {
    const SimMessage& m = messages[i];
    if (m.bytes < 0)
      fail(ErrorCode::kInvalidArgument, "messages[" + std::to_string(i) + "].bytes",
           "must be non-negative, got " + std::to_string(m.bytes));
    if (m.src_device == m.dst_device)
      fail(ErrorCode::kInvalidArgument, "messages[" + std::to_string(i) + "]",
           "sends from device " + std::to_string(m.src_device) + " to itself");
    for (uint32_t a : m.after)
      if (a >= nm || a == i)
        fail(ErrorCode::kInvalidArgument, "messages[" + std::to_string(i) + "].after",
             "names message " + std::to_string(a) + " (" + std::to_string(nm) +
                 " messages; not itself)");
  }
  // Every device of the topology counts for its host's NIC groups, plus any
  // device a message names that the topology lacks (host 0).
  sim::HostMap hosts;
  for (const DeviceInfo& d : topo.devices()) hosts.add(d.host, d.device);
  for (const SimMessage& m : messages) {
    hosts.add(topo.info(m.src_device).host, m.src_device);
    hosts.add(topo.info(m.dst_device).host, m.dst_device);
  }
  hosts.finish();

  // Flows and their links.
  Links links;
  std::vector<Flow> flows(nm);
  std::vector<int32_t> src_proc(nm), dst_proc(nm);
  for (size_t i = 0; i < nm; ++i) {
    const SimMessage& m = messages[i];
    const DeviceInfo s = topo.info(m.src_device), d = topo.info(m.dst_device);
    src_proc[i] = s.process;
    dst_proc[i] = d.process;
    Flow& f = flows[i];
    f.remaining = static_cast<double>(m.bytes);
    if (s.host == d.host) {
      f.links[0] = links.get(LinkClass::kIntraOut, s.host, m.src_device, -1,
                             cluster.intra_host_bytes_per_second);
      f.links[1] = links.get(LinkClass::kIntraIn, d.host, m.dst_device, -1,
                             cluster.intra_host_bytes_per_second);
    } else {
      const auto [sg, sn] = hosts.nic_group(s.host, m.src_device, cluster.nics_per_host);
      const auto [dg, dn] = hosts.nic_group(d.host, m.dst_device, cluster.nics_per_host);
      f.links[0] = links.get(LinkClass::kNicOut, s.host, -1, sg, sn * cluster.nic_bytes_per_second);
      f.links[1] = links.get(LinkClass::kNicIn, d.host, -1, dg, dn * cluster.nic_bytes_per_second);
      if (cluster.host_link_bytes_per_second > 0) {
        f.links[2] =
            links.get(LinkClass::kHostOut, s.host, -1, -1, cluster.host_link_bytes_per_second);
        f.links[3] =
            links.get(LinkClass::kHostIn, d.host, -1, -1, cluster.host_link_bytes_per_second);
      }
    }
  }
  const size_t nl = links.cap.size();

  // Per process and stage (a lane): its messages (sent or received) sorted
  // by round, and the rounds it works through. Stages of a process run side
  // by side; what a message of a later stage forwards is in its `after`.
  std::map<std::pair<int32_t, uint32_t>, std::vector<uint32_t>> by_lane_map;
  for (size_t i = 0; i < nm; ++i) {
    by_lane_map[{src_proc[i], messages[i].stage}].push_back(static_cast<uint32_t>(i));
    if (dst_proc[i] != src_proc[i])
      by_lane_map[{dst_proc[i], messages[i].stage}].push_back(static_cast<uint32_t>(i));
  }
  struct Lane {
    std::vector<uint32_t> msgs;  // sorted by round, then index
    size_t pos = 0;              // first message of the current round
    size_t end = 0;              // one past the current round's messages
    int64_t pending = 0;         // of the current round, not yet completed
  };
  std::vector<Lane> lanes;
  std::map<std::pair<int32_t, uint32_t>, uint32_t> lane_index;
  for (auto& [key, v] : by_lane_map) {
    std::stable_sort(v.begin(), v.end(),
                     [&](uint32_t a, uint32_t b) { return messages[a].round < messages[b].round; });
    lane_index[key] = static_cast<uint32_t>(lanes.size());
    lanes.push_back({std::move(v), 0, 0, 0});
  }
  by_lane_map.clear();
  std::vector<std::array<uint32_t, 2>> lanes_of(nm);
  for (size_t i = 0; i < nm; ++i) {
    lanes_of[i][0] = lane_index.at({src_proc[i], messages[i].stage});
    lanes_of[i][1] = dst_proc[i] == src_proc[i] ? lanes_of[i][0]
                                                : lane_index.at({dst_proc[i], messages[i].stage});
  }
  // Dependencies: messages that wait for each one, and how many each waits for.
  std::vector<uint32_t> deps_left(nm, 0);
  std::vector<std::vector<uint32_t>> dependents(nm);
  for (size_t i = 0; i < nm; ++i) {
    std::vector<uint32_t> after = messages[i].after;
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    deps_left[i] = static_cast<uint32_t>(after.size());
    for (uint32_t a : after) dependents[a].push_back(static_cast<uint32_t>(i));
  }
  std::vector<uint8_t> ready_count(nm, 0);
  std::vector<double> ready_time(nm, 0), done_time(nm, -1);

  // Activations: (time, message), earliest first, then by index.
  using Act = std::pair<double, uint32_t>;
  std::priority_queue<Act, std::vector<Act>, std::greater<>> starts;
  const double alpha = cluster.alpha_seconds;
  double now = 0;

  // A message is ready once both its lanes reached its round and every
  // message it depends on completed: it starts flowing α later.
  auto maybe_ready = [&](uint32_t m) {
    const uint8_t need = lanes_of[m][0] == lanes_of[m][1] ? 1 : 2;
    if (ready_count[m] != need || deps_left[m] != 0) return;
    ready_time[m] = now;
    starts.emplace(now + alpha, m);
  };
  // Lane `li` enters its next round (if any).
  auto enter = [&](uint32_t li) {
    Lane& p = lanes[li];
    p.pos = p.end;
    if (p.pos >= p.msgs.size()) return;
    const uint32_t k = messages[p.msgs[p.pos]].round;
    p.end = p.pos;
    while (p.end < p.msgs.size() && messages[p.msgs[p.end]].round == k) ++p.end;
    p.pending = static_cast<int64_t>(p.end - p.pos);
    for (size_t j = p.pos; j < p.end; ++j) {
      const uint32_t m = p.msgs[j];
      ++ready_count[m];
      maybe_ready(m);
    }
  };

  std::vector<uint32_t> active, merge_scratch;  // message indices, in order
  std::vector<uint32_t> finished;
  // Saturation bookkeeping for the binding link.
  std::vector<double> saturated(nl, 0);
  std::vector<uint32_t> bottlenecks;  // links saturated in the current interval

  sim::MaxMin maxmin(nl);
  int64_t events = 0;
  auto allocate = [&]() {
    ++events;
    maxmin.allocate(
        links.cap, active.size(), [&](size_t a) -> Flow& { return flows[active[a]]; }, bottlenecks);
  };

  SimResult r;
  size_t completed = 0;
  r.messages = static_cast<int64_t>(nm);
  for (const SimMessage& m : messages) r.bytes += m.bytes;

  auto complete = [&](uint32_t m) {
    done_time[m] = now;
    ++completed;
    for (int k = 0; k < 2; ++k) {
      const uint32_t li = lanes_of[m][static_cast<size_t>(k)];
      if (--lanes[li].pending == 0) finished.push_back(li);
      if (lanes_of[m][0] == lanes_of[m][1]) break;
    }
    for (uint32_t d : dependents[m]) {
      --deps_left[d];
      maybe_ready(d);
    }
  };

  // Starts the messages due now (zero-byte ones complete at once).
  auto start_due = [&] {
    while (!starts.empty() && starts.top().first <= now) {
      const uint32_t m = starts.top().second;
      starts.pop();
      if (messages[m].bytes == 0)
        complete(m);
      else
        active.push_back(m);
    }
  };

  for (uint32_t li = 0; li < lanes.size(); ++li) enter(li);
  while (!starts.empty() || !active.empty()) {
    const double t_start =
        starts.empty() ? std::numeric_limits<double>::infinity() : starts.top().first;
    advance_to_next_event(
        now, t_start, active, bottlenecks, saturated, [&](uint32_t m) -> Flow& { return flows[m]; },
        [&](uint32_t m) { return messages[m].bytes; }, complete);
    const size_t kept = active.size();
    start_due();
    // Lanes whose round completed move on; entering may start messages
    // (after α) or complete zero-byte ones, which may finish rounds again.
    while (!finished.empty()) {
      std::vector<uint32_t> batch;
      batch.swap(finished);
      std::sort(batch.begin(), batch.end());
      for (uint32_t li : batch) enter(li);
      start_due();
    }
    sim::merge_started(active, kept, merge_scratch, std::less<>());
    allocate();
  }
  if (completed != nm)
    fail(ErrorCode::kInvalidArgument, "messages",
         std::to_string(nm - completed) +
             " message(s) never start: their dependencies (after) and rounds wait on each other");

  r.seconds = now;
  r.events = events;
  std::map<uint32_t, SimStage> stages;
  for (size_t i = 0; i < nm; ++i) {
    auto [it, fresh] = stages.try_emplace(messages[i].stage);
    SimStage& s = it->second;
    if (fresh) {
      s.stage = messages[i].stage;
      s.start_seconds = ready_time[i];
      s.end_seconds = done_time[i];
    }
    s.start_seconds = std::min(s.start_seconds, ready_time[i]);
    s.end_seconds = std::max(s.end_seconds, done_time[i]);
    ++s.messages;
    s.bytes += messages[i].bytes;
  }
  for (auto& [k, s] : stages) r.per_stage.push_back(s);
  // Binding: the longest-saturated link; ties to the lowest index (the
  // order links were first used, deterministic).
  for (size_t l = 0; l < nl; ++l)
    if (saturated[l] > r.binding_saturated_seconds) {
      r.binding_saturated_seconds = saturated[l];
      r.binding = links.info[l];
    }
  return r;
}

}  // namespace reshard
