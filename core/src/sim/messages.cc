// Message sets for the simulator (reshard/simulate.h): a plan's own, planned
// whole or one process part at a time, and the modelled peers' schedules of
// the same data movement.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "exec/schedule/stage_deps.h"
#include "reshard/error.h"
#include "reshard/simulate.h"
#include "sim/part_messages.h"

namespace reshard {
namespace {

// src, dst, stage, round, sub: unique in a plan.
using MessageKey = std::tuple<int64_t, int64_t, uint32_t, uint32_t, uint32_t>;

MessageKey key_of(const Message& m) {
  return {m.src_device, m.dst_device, m.stage, m.round, m.sub};
}

// Appends the sends of `part` (a part of `plan`), each one's sub to `subs`
// and, for each, the keys of the messages it waits for (sim::part_sends).
void append_sends(const Plan& plan, const ProcessPart& part, std::vector<SimMessage>& out,
                  std::vector<uint32_t>& subs, std::vector<std::vector<MessageKey>>& after) {
  sim::part_sends(plan, part, [&](size_t, const Message& m, std::span<const uint32_t> found) {
    out.push_back({m.src_device, m.dst_device, m.stage, m.round, m.bytes});
    subs.push_back(m.sub);
    after.emplace_back();
    for (uint32_t r : found) after.back().push_back(key_of(part.recvs[r]));
  });
}

// Turns the keys of `after` into indices in `out` (whose subs are `subs`).
void resolve_after(std::vector<SimMessage>& out, const std::vector<uint32_t>& subs,
                   const std::vector<std::vector<MessageKey>>& after) {
  std::vector<std::pair<MessageKey, uint32_t>> index(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const SimMessage& m = out[i];
    index[i] = {{m.src_device, m.dst_device, m.stage, m.round, subs[i]}, static_cast<uint32_t>(i)};
  }
  std::sort(index.begin(), index.end());
  for (size_t i = 0; i < out.size(); ++i) {
    for (const MessageKey& k : after[i]) {
      const auto it = std::lower_bound(index.begin(), index.end(), k,
                                       [](const std::pair<MessageKey, uint32_t>& e,
                                          const MessageKey& v) { return e.first < v; });
      if (it != index.end() && it->first == k) out[i].after.push_back(it->second);
    }
  }
}

}  // namespace

namespace sim {

void part_sends(
    const Plan& plan, const ProcessPart& part,
    const std::function<void(size_t, const Message&, std::span<const uint32_t>)>& each) {
  const stage_deps::WriterIndex writers(plan, part, false);
  std::vector<uint32_t> found;
  for (size_t i = 0; i < part.sends.size(); ++i) {
    const Message& m = part.sends[i];
    found.clear();
    if (m.stage != 0 && !writers.empty()) {
      for (uint64_t k = 0; k < m.num_pieces && m.first_piece + k < part.send_pieces.size(); ++k) {
        const Piece& p = part.send_pieces[m.first_piece + k];
        if (reads_source(p, m.stage)) continue;  // a summand: there from the start
        writers.writers(p.tensor, p.src_entry, plan.region(part, p), m.stage, found);
      }
      stage_deps::sort_unique(found);
    }
    each(i, m, found);
  }
}

}  // namespace sim

std::vector<SimMessage> plan_messages(const Plan& plan) {
  std::vector<SimMessage> out;
  std::vector<uint32_t> subs;
  std::vector<std::vector<MessageKey>> after;
  for (const auto& [p, part] : plan.parts()) append_sends(plan, part, out, subs, after);
  resolve_after(out, subs, after);
  return out;
}

int64_t sim_memory_estimate(int64_t messages) {
  if (messages <= 0) return 0;
  if (messages > std::numeric_limits<int64_t>::max() / kSimBytesPerMessage)
    return std::numeric_limits<int64_t>::max();
  return messages * kSimBytesPerMessage;
}

std::vector<SimMessage> plan_messages_by_part(
    const PlanInput& input, int32_t threads,
    const std::function<void(int64_t, int64_t)>& parts_planned, int64_t max_bytes,
    int64_t max_stats_pieces) {
  // The global part names the processes; its statistics count the messages.
  PlanRequest g{PlanScope::kGlobal, 0, true};
  g.max_stats_pieces = max_stats_pieces;
  const Plan global = make_plan(input, g);
  if (max_bytes != kUnlimitedPlanBytes) {
    if (max_bytes < 0)
      fail(ErrorCode::kInvalidArgument, "max_bytes",
           "must be >= 0 or kUnlimitedPlanBytes (-1), got " + std::to_string(max_bytes));
    const int64_t limit = max_bytes == 0 ? default_max_plan_bytes() : max_bytes;
    const int64_t messages = global.stats().messages;
    const int64_t need = sim_memory_estimate(messages);
    if (need > limit)
      fail(ErrorCode::kResourceExhausted, "max_bytes",
           "simulating the plan's " + std::to_string(messages) + " messages needs about " +
               std::to_string(need) + " bytes of memory (" + std::to_string(kSimBytesPerMessage) +
               " a message), above the limit of " + std::to_string(limit) + " bytes" +
               (max_bytes == 0 ? " (the default, half the memory available)" : ""));
  }
  std::vector<SimMessage> out;
  std::vector<uint32_t> subs;
  std::vector<std::vector<MessageKey>> after;
  const auto total = static_cast<int64_t>(global.processes().size());
  int64_t done = 0;
  for (int32_t p : global.processes()) {
    PlanRequest r{PlanScope::kProcess, p, false};
    r.threads = threads;
    r.max_stats_pieces = max_stats_pieces;
    const Plan part_plan = make_plan(input, r);
    auto it = part_plan.parts().find(p);
    if (it != part_plan.parts().end()) append_sends(part_plan, it->second, out, subs, after);
    if (parts_planned) parts_planned(++done, total);
  }
  resolve_after(out, subs, after);
  return out;
}

std::vector<SimMessage> direct_p2p_messages(const PlanInput& input, int32_t threads) {
  PlanInput single = input;
  single.options.relays = false;
  single.options.reduce_scatter = false;
  return plan_messages_by_part(single, threads);
}

std::vector<SimMessage> rank0_broadcast_messages(const PlanInput& input, int32_t chunks) {
  if (chunks < 0)
    fail(ErrorCode::kInvalidArgument, "chunks",
         "must be non-negative, got " + std::to_string(chunks));
  // The root: the lowest device holding a source shard.
  int64_t root = -1;
  std::set<int64_t> dsts;
  int64_t total = 0;  // bytes of every tensor, whole
  for (const TensorSpec& t : input.tensors) {
    for (size_t e = 0; e < t.src.num_entries(); ++e)
      if (root < 0 || t.src.device(e) < root) root = t.src.device(e);
    for (size_t e = 0; e < t.dst.num_entries(); ++e) dsts.insert(t.dst.device(e));
    total += t.dst.num_elements() * dtype_size(t.dtype);
  }
  std::vector<SimMessage> out;
  if (root < 0) return out;
  // Stage 0, gather: each (summand, box) group's bytes split over its
  // holders; the root keeps its own.
  std::map<int64_t, int64_t> to_root;
  for (const TensorSpec& t : input.tensors) {
    const int64_t es = dtype_size(t.dtype);
    std::map<std::tuple<int32_t, std::vector<int64_t>>, std::vector<int64_t>> groups;
    for (size_t e = 0; e < t.src.num_entries(); ++e) {
      const Box b = t.src.box(e);
      if (b.empty()) continue;
      std::vector<int64_t> key(b.lo.begin(), b.lo.begin() + b.rank);
      key.insert(key.end(), b.hi.begin(), b.hi.begin() + b.rank);
      groups[{t.src.summand(e), std::move(key)}].push_back(t.src.device(e));
    }
    for (auto& [key, holders] : groups) {
      std::sort(holders.begin(), holders.end());
      const std::vector<int64_t>& k = std::get<1>(key);
      int64_t volume = 1;
      const size_t rank = k.size() / 2;
      for (size_t d = 0; d < rank; ++d) volume *= k[rank + d] - k[d];
      const int64_t bytes = volume * es, n = static_cast<int64_t>(holders.size());
      // The root's own copy needs no message.
      if (std::binary_search(holders.begin(), holders.end(), root)) continue;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t share = bytes / n + (i < bytes % n ? 1 : 0);
        if (share > 0) to_root[holders[static_cast<size_t>(i)]] += share;
      }
    }
  }
  for (auto [dev, bytes] : to_root) out.push_back({dev, root, 0, 0, bytes});
  const auto gathered = static_cast<uint32_t>(out.size());
  // Stage 1, broadcast down a chain: root, then the destinations by (host,
  // device); chunk j crosses hop i in round i + j.
  std::vector<std::pair<int32_t, int64_t>> order;
  for (int64_t d : dsts)
    if (d != root) order.emplace_back(input.topology.info(d).host, d);
  std::sort(order.begin(), order.end());
  if (order.empty() || total == 0) return out;
  const int64_t hops = static_cast<int64_t>(order.size());
  const int64_t c = std::max<int64_t>(
      1, std::min<int64_t>(chunks == 0 ? std::max<int64_t>(4, 4 * hops) : chunks, total));
  int64_t prev = root;
  for (int64_t i = 0; i < hops; ++i) {
    const int64_t next = order[static_cast<size_t>(i)].second;
    for (int64_t j = 0; j < c; ++j) {
      const int64_t bytes = total / c + (j < total % c ? 1 : 0);
      out.push_back({prev, next, 1, static_cast<uint32_t>(i + j), bytes});
      // The root forwards once everything was gathered; later hops follow
      // the chain's rounds (chunk j reaches hop i in round i + j, after it
      // crossed hop i - 1 in round i + j - 1).
      if (i == 0)
        for (uint32_t g = 0; g < gathered; ++g) out.back().after.push_back(g);
    }
    prev = next;
  }
  return out;
}

}  // namespace reshard

namespace reshard {

std::vector<SimMessage> layered_messages(const PlanInput& input, int32_t chunks) {
  if (chunks < 0)
    fail(ErrorCode::kInvalidArgument, "chunks",
         "must be non-negative, got " + std::to_string(chunks));
  struct Cell {
    std::vector<std::pair<int64_t, int64_t>> inject;  // (holder, bytes)
    std::vector<std::vector<int64_t>> per_host;       // devices needing it, by host
    int64_t bytes = 0;
  };
  std::vector<Cell> cells;
  int64_t longest = 1;
  for (const TensorSpec& t : input.tensors) {
    const int64_t es = dtype_size(t.dtype);
    // Source replica groups: (summand, box) -> holders.
    std::map<std::tuple<int32_t, std::vector<int64_t>>, std::vector<int64_t>> src_groups;
    std::map<std::tuple<int32_t, std::vector<int64_t>>, Box> src_boxes;
    for (size_t e = 0; e < t.src.num_entries(); ++e) {
      const Box b = t.src.box(e);
      if (b.empty()) continue;
      std::vector<int64_t> key(b.lo.begin(), b.lo.begin() + b.rank);
      key.insert(key.end(), b.hi.begin(), b.hi.begin() + b.rank);
      const auto k = std::make_tuple(t.src.summand(e), std::move(key));
      src_groups[k].push_back(t.src.device(e));
      src_boxes[k] = b;
    }
    std::map<std::tuple<int32_t, std::vector<int64_t>>, std::vector<int64_t>> dst_groups;
    std::map<std::tuple<int32_t, std::vector<int64_t>>, Box> dst_boxes;
    for (size_t e = 0; e < t.dst.num_entries(); ++e) {
      const Box b = t.dst.box(e);
      if (b.empty()) continue;
      std::vector<int64_t> key(b.lo.begin(), b.lo.begin() + b.rank);
      key.insert(key.end(), b.hi.begin(), b.hi.begin() + b.rank);
      const auto k = std::make_tuple(t.dst.summand(e), std::move(key));
      dst_groups[k].push_back(t.dst.device(e));
      dst_boxes[k] = b;
    }
    for (auto& [key, devices] : dst_groups) {
      const Box B = dst_boxes[key];
      Cell c;
      c.bytes = B.volume() * es;
      for (auto& [skey, holders] : src_groups) {
        const int64_t bytes = intersect(src_boxes[skey], B).volume() * es;
        if (bytes == 0) continue;
        std::sort(holders.begin(), holders.end());
        const auto n = static_cast<int64_t>(holders.size());
        for (int64_t i = 0; i < n; ++i) {
          const int64_t share = bytes / n + (i < bytes % n ? 1 : 0);
          if (share > 0) c.inject.emplace_back(holders[static_cast<size_t>(i)], share);
        }
      }
      std::map<int32_t, std::vector<int64_t>> by_host;
      for (int64_t d : devices) by_host[input.topology.info(d).host].push_back(d);
      for (auto& [h, v] : by_host) {
        std::sort(v.begin(), v.end());
        c.per_host.push_back(std::move(v));
      }
      longest = std::max<int64_t>(longest, static_cast<int64_t>(c.per_host.size()));
      cells.push_back(std::move(c));
    }
  }
  const int64_t c_chunks = chunks == 0 ? std::max<int64_t>(4, 4 * longest) : chunks;
  // Bytes per (round offset, src, dst) over all cells first: a transfer of
  // offset o carries chunk j of its cells in round j + o, so the chunking
  // applies to the sums (fused messages; work proportional to the distinct
  // transfers times the chunks, not to cells times holders times chunks).
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> per_offset;
  auto add = [&](int64_t offset, int64_t src, int64_t dst, int64_t bytes) {
    if (src == dst || bytes <= 0) return;
    per_offset[{offset, src, dst}] += bytes;
  };
  for (size_t ci = 0; ci < cells.size(); ++ci) {
    const Cell& c = cells[ci];
    // One device per host leads: rotating over the cell index.
    std::vector<int64_t> leaders;
    for (const auto& v : c.per_host) leaders.push_back(v[ci % v.size()]);
    for (const auto& [holder, bytes] : c.inject) add(0, holder, leaders[0], bytes);
    for (size_t i = 0; i < leaders.size(); ++i) {
      const auto hop = static_cast<int64_t>(i);
      if (i > 0) add(hop, leaders[i - 1], leaders[i], c.bytes);
      for (int64_t d : c.per_host[i]) add(hop + 1, leaders[i], d, c.bytes);
    }
  }
  std::map<std::tuple<uint32_t, int64_t, int64_t>, int64_t> fused;  // (round, src, dst)
  for (const auto& [k, bytes] : per_offset) {
    const auto [offset, src, dst] = k;
    for (int64_t j = 0; j < c_chunks; ++j) {
      const int64_t part = bytes / c_chunks + (j < bytes % c_chunks ? 1 : 0);
      if (part > 0) fused[{static_cast<uint32_t>(offset + j), src, dst}] += part;
    }
  }
  std::vector<SimMessage> out;
  out.reserve(fused.size());
  for (const auto& [k, bytes] : fused)
    out.push_back({std::get<1>(k), std::get<2>(k), 0, std::get<0>(k), bytes});
  return out;
}

}  // namespace reshard
