// Hand-built plans with scratch buffers (plan.h, Scratch) for the engine
// and wire tests: reduction trees whose summands are combined on their
// holders' host before they cross to the destination's reducer (the planner
// does not emit scratch yet).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "plan/plan_builder.h"
#include "plan/scratch_layout.h"
#include "reshard/error.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace reshard::scratch_plans {

// One piece of a hand-built plan, from device to device.
struct Xfer {
  int64_t src = 0;
  int64_t dst = 0;
  uint32_t stage = 0;
  uint32_t round = 0;
  uint32_t src_entry = 0;
  uint32_t dst_entry = 0;
  Box region;
};

inline Box rows(int64_t lo, int64_t hi, int64_t cols) {
  Box b;
  b.rank = 2;
  b.lo[0] = lo;
  b.hi[0] = hi;
  b.lo[1] = 0;
  b.hi[1] = cols;
  return b;
}

// Replaces the parts of `plan` (of tensor 0) with the given pieces and
// scratch: local pieces (same device, stage 0), sends ordered by (stage,
// round, destination, source), receives by (stage, round, source,
// destination), each message's pieces in the order given.
inline void set_parts(Plan& plan, const std::vector<Xfer>& xs, std::vector<Scratch> scratch) {
  const Topology& topo = plan.topology();
  const int64_t elem = dtype_size(plan.tensors()[0].dtype);
  std::map<int32_t, ProcessPart> parts;
  std::vector<int32_t> processes;
  const auto part_of = [&](int64_t device) -> ProcessPart& {
    const int32_t p = topo.info(device).process;
    ProcessPart& part = parts[p];
    part.process = p;
    return part;
  };
  for (const Xfer& x : xs) {
    part_of(x.src);
    part_of(x.dst);
  }
  const auto piece = [&](ProcessPart& part, const Xfer& x) {
    part.regions.push_back(x.region);
    return Piece{0, x.src_entry, x.dst_entry, static_cast<uint32_t>(part.regions.size() - 1)};
  };
  for (const Xfer& x : xs) {
    if (x.src == x.dst) {
      ProcessPart& part = part_of(x.src);
      part.local.push_back(piece(part, x));
    }
  }
  for (int side = 0; side < 2; ++side) {
    const bool send = side == 0;
    // key -> pieces in order
    std::map<std::tuple<int32_t, uint32_t, uint32_t, int64_t, int64_t>, std::vector<Xfer>> msgs;
    for (const Xfer& x : xs) {
      if (x.src == x.dst) continue;
      const int32_t p = topo.info(send ? x.src : x.dst).process;
      msgs[{p, x.stage, x.round, send ? x.dst : x.src, send ? x.src : x.dst}].push_back(x);
    }
    for (const auto& [key, list] : msgs) {
      ProcessPart& part = parts[std::get<0>(key)];
      std::vector<Piece>& pieces = send ? part.send_pieces : part.recv_pieces;
      Message m;
      m.src_device = list.front().src;
      m.dst_device = list.front().dst;
      m.stage = list.front().stage;
      m.round = list.front().round;
      m.first_piece = pieces.size();
      m.num_pieces = list.size();
      for (const Xfer& x : list) {
        pieces.push_back(piece(part, x));
        m.bytes += x.region.volume() * elem;
      }
      (send ? part.sends : part.recvs).push_back(m);
    }
  }
  std::sort(scratch.begin(), scratch.end(), [](const Scratch& a, const Scratch& b) {
    return std::tie(a.tensor, a.device, a.box.lo) < std::tie(b.tensor, b.device, b.box.lo);
  });
  for (const Scratch& s : scratch) part_of(s.device).scratch.push_back(s);
  for (const auto& [p, part] : parts) processes.push_back(p);
  Plan::Builder::parts(plan) = std::move(parts);
  Plan::Builder::processes(plan) = processes;
}

struct TreeCase {
  std::vector<int> per_host = {2, 2};  // holders on each holder host
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  bool two_level = false;         // the leaders' scratch meet in an aggregator's
  int rounds = 1;                 // row slabs of each part, one round each
  bool host_process = false;      // one process per host (else per device)
  bool raw_first_host = false;    // host 0's holders send raw summands to the reducers
  bool relay_same_stage = false;  // the reducers forward in their contributions' stage
  // The stage in which the second half's scratch is written (its summands
  // read in a later stage than 0: plan.h, reads_source) and after which it
  // is sent on, as a pre-reduction banded under a staging budget: 1, its
  // stages overlap the first half's (0-1); 2, they do not, and the two
  // halves share bytes on the leader (plan/scratch_layout.h). Not with
  // two_level.
  uint32_t late = 0;
  std::string label() const {
    std::string s = "hosts";
    for (int k : per_host) s += " " + std::to_string(k);
    s += std::string(" op ") + std::to_string(static_cast<int>(op)) + " " +
         std::string(dtype_name(dtype)) + (two_level ? " two-level" : "") + " rounds " +
         std::to_string(rounds) + (host_process ? " process/host" : " process/device") +
         (raw_first_host ? " raw host 0" : "") + (late > 0 ? " late " + std::to_string(late) : "");
    return s;
  }
};

inline constexpr int64_t kRows = 8;
inline constexpr int64_t kCols = 6;

// The plan shape of a reduction tree (the brief of the planner's scratch):
// holder hosts reduce each half of the tensor on their first device
// (scratch written by its own summand, a local piece, and by the other
// holders' messages, stage 0), optionally combined again in an aggregator's
// scratch (stage 1), then sent as one contribution each to the half's
// reducer (a destination entry, on its own host), which forwards its
// reduced half to the other replica (a relay of the last stage).
inline Plan tree_plan(const TreeCase& c) {
  const int hosts = static_cast<int>(c.per_host.size());
  Topology topo;
  std::vector<std::vector<int64_t>> holders(static_cast<size_t>(hosts));
  int64_t next = 0;
  const auto add = [&](int host) {
    const int64_t d = next++;
    topo.add({d, c.host_process ? host : static_cast<int32_t>(d), host, 0});
    return d;
  };
  for (int h = 0; h < hosts; ++h) {
    for (int k = 0; k < c.per_host[static_cast<size_t>(h)]; ++k) {
      holders[static_cast<size_t>(h)].push_back(add(h));
    }
  }
  const int64_t r0 = add(hosts);
  const int64_t r1 = add(hosts + 1);
  const int64_t agg = c.two_level ? add(hosts + 2) : -1;
  const std::vector<int64_t> shape = {kRows, kCols};
  std::vector<LayoutEntry> src_entries;
  int32_t summand = 0;
  for (const auto& host : holders) {
    for (int64_t d : host) src_entries.push_back({d, summand++, rows(0, kRows, kCols)});
  }
  const int32_t summands = summand;
  TensorSpec t;
  t.name = "w";
  t.shape = shape;
  t.dtype = c.dtype;
  t.src = Layout::from_boxes(shape, src_entries, summands, c.op, "src");
  t.dst =
      Layout::from_boxes(shape, {{r0, 0, rows(0, kRows, kCols)}, {r1, 0, rows(0, kRows, kCols)}}, 1,
                         ReduceOp::kSum, "dst");
  PlanInput in;
  in.tensors.push_back(t);
  in.topology = topo;
  in.options.staging_budget_bytes = 0;
  // The parts below are a tree by hand; the planner's shell around them
  // keeps its routes (the single-hop guard would drop them: tiny tensor).
  in.options.single_hop_guard = false;
  Plan plan = make_plan(in);
  const Layout& src = plan.tensors()[0].src;
  const Layout& dst = plan.tensors()[0].dst;
  const auto src_entry = [&](int64_t d) { return static_cast<uint32_t>(*src.entry_of(d)); };
  const auto dst_entry = [&](int64_t d) { return static_cast<uint32_t>(*dst.entry_of(d)); };
  const int64_t reducer[2] = {r0, r1};
  const int64_t half = kRows / 2;
  std::vector<Xfer> xs;
  std::vector<Scratch> scratch;
  // Stage of the reducers' last contributions; the relay comes after it.
  const uint32_t last = c.late > 0 ? c.late + 1 : c.two_level ? 2 : 1;
  for (int j = 0; j < 2; ++j) {
    const Box part = rows(j * half, (j + 1) * half, kCols);
    // The stage in which the holders write the half's scratch.
    const uint32_t w = j == 1 ? c.late : 0;
    if (c.two_level) scratch.push_back({0, agg, part});
    for (int r = 0; r < c.rounds; ++r) {
      const int64_t lo = j * half + half * r / c.rounds;
      const int64_t hi = j * half + half * (r + 1) / c.rounds;
      const Box slab = rows(lo, hi, kCols);
      const auto round = static_cast<uint32_t>(r);
      for (int h = 0; h < hosts; ++h) {
        const auto& host = holders[static_cast<size_t>(h)];
        if (c.raw_first_host && h == 0) {
          for (int64_t d : host) {
            xs.push_back({d, reducer[j], 0, round, src_entry(d), dst_entry(reducer[j]), slab});
          }
          continue;
        }
        const int64_t leader = host.front();
        if (r == 0) scratch.push_back({0, leader, part});
        for (int64_t d : host)
          xs.push_back({d, leader, w, round, src_entry(d), kScratchEntry, slab});
        if (c.two_level) {
          xs.push_back({leader, agg, 1, round, kScratchEntry, kScratchEntry, slab});
        } else {
          xs.push_back(
              {leader, reducer[j], w + 1, round, kScratchEntry, dst_entry(reducer[j]), slab});
        }
      }
      if (c.two_level) {
        xs.push_back({agg, reducer[j], 2, round, kScratchEntry, dst_entry(reducer[j]), slab});
      }
      xs.push_back({reducer[j], reducer[1 - j], c.relay_same_stage ? last : last + 1, round,
                    dst_entry(reducer[j]), dst_entry(reducer[1 - j]), slab});
    }
  }
  set_parts(plan, xs, scratch);
  // Statistics the decoder accepts: every stage and round below their
  // counts, and the scratch of one leader (two halves, or one where they
  // share bytes) as the planner would place it.
  PlanStats& stats = Plan::Builder::stats(plan);
  stats.stages = std::max<int32_t>(stats.stages, static_cast<int32_t>(last) + 2);
  stats.rounds = std::max<int32_t>(stats.rounds, c.rounds);
  stats.max_scratch_bytes =
      planning::most_scratch(planning::scratch_lives(plan.parts(), plan.tensors()));
  return plan;
}

// Copy staging (plan.h, Scratch of a tensor whose source is not partial):
// 2 hosts x 2 devices (0, 1 on host 0; 2, 3 on host 1), a [8, cols] tensor
// sharded over the 4 devices by rows (device d: rows 2d..2d+2) into two row
// halves replicated on each host (devices 0, 2: rows 0-4; 1, 3: rows 4-8).
// The cross-host bytes of the two devices that need them go through the
// other device of their host: device 0 stages rows 6-8 (from device 3) and
// forwards them to device 1, device 3 stages rows 2-4 (from device 1) and
// forwards them to device 2 (stage 1, each read one piece while `rounds`
// row slabs write it). `local_write`: device 1 also copies its own rows 2-4
// into a staging of its own (a local piece) and forwards them to device 0
// in stage 1. The rest moves directly in stage 0.
struct StagingCase {
  DType dtype = DType::kF32;
  int64_t cols = 4;
  int rounds = 1;
  bool host_process = false;  // one process per host (else per device)
  bool local_write = false;
  std::string label() const {
    return std::string(dtype_name(dtype)) + " cols " + std::to_string(cols) + " rounds " +
           std::to_string(rounds) + (host_process ? " process/host" : " process/device") +
           (local_write ? " local write" : "");
  }
};

inline Plan staging_plan(const StagingCase& c) {
  Topology topo;
  for (int64_t d = 0; d < 4; ++d)
    topo.add({d, c.host_process ? static_cast<int32_t>(d / 2) : static_cast<int32_t>(d),
              static_cast<int32_t>(d / 2), 0});
  const std::vector<int64_t> shape = {kRows, c.cols};
  TensorSpec t;
  t.name = "w";
  t.shape = shape;
  t.dtype = c.dtype;
  std::vector<LayoutEntry> src_entries;
  for (int64_t d = 0; d < 4; ++d) src_entries.push_back({d, 0, rows(2 * d, 2 * d + 2, c.cols)});
  t.src = Layout::from_boxes(shape, src_entries, 1, ReduceOp::kSum, "src");
  t.dst = Layout::from_boxes(shape,
                             {{0, 0, rows(0, 4, c.cols)},
                              {1, 0, rows(4, 8, c.cols)},
                              {2, 0, rows(0, 4, c.cols)},
                              {3, 0, rows(4, 8, c.cols)}},
                             1, ReduceOp::kSum, "dst");
  PlanInput in;
  in.tensors.push_back(t);
  in.topology = topo;
  in.options.staging_budget_bytes = 0;
  in.options.single_hop_guard = false;
  Plan plan = make_plan(in);
  std::vector<Xfer> xs;
  std::vector<Scratch> scratch;
  // Device d's source rows [lo, hi) to destination entry e (= its device)
  // or to the staging of device `via`, in row slabs, one round each.
  const auto move = [&](int64_t from, int64_t to, uint32_t dst_entry, int64_t lo, int64_t hi,
                        uint32_t stage = 0) {
    for (int r = 0; r < c.rounds; ++r) {
      const int64_t a = lo + (hi - lo) * r / c.rounds;
      const int64_t b = lo + (hi - lo) * (r + 1) / c.rounds;
      xs.push_back({from, to, stage, static_cast<uint32_t>(r), static_cast<uint32_t>(from),
                    dst_entry, rows(a, b, c.cols)});
    }
  };
  const auto forward = [&](int64_t via, int64_t to, int64_t lo, int64_t hi) {
    scratch.push_back({0, via, rows(lo, hi, c.cols)});
    xs.push_back({via, to, 1, 0, kScratchEntry, static_cast<uint32_t>(to), rows(lo, hi, c.cols)});
  };
  // Device 0: rows 0-2 local, 2-4 from device 1 (or its staging).
  move(0, 0, 0, 0, 2);
  if (c.local_write) {
    move(1, 1, kScratchEntry, 2, 4);
    forward(1, 0, 2, 4);
  } else {
    move(1, 0, 0, 2, 4);
  }
  // Device 1: rows 4-6 from device 2, 6-8 from device 3 through device 0.
  move(2, 1, 1, 4, 6);
  move(3, 0, kScratchEntry, 6, 8);
  forward(0, 1, 6, 8);
  // Device 2: rows 0-2 from device 0, 2-4 from device 1 through device 3.
  move(0, 2, 2, 0, 2);
  move(1, 3, kScratchEntry, 2, 4);
  forward(3, 2, 2, 4);
  // Device 3: rows 4-6 from device 2, 6-8 local.
  move(2, 3, 3, 4, 6);
  move(3, 3, 3, 6, 8);
  set_parts(plan, xs, scratch);
  PlanStats& stats = Plan::Builder::stats(plan);
  stats.stages = std::max<int32_t>(stats.stages, 2);
  stats.rounds = std::max<int32_t>(stats.rounds, c.rounds);
  stats.max_scratch_bytes =
      planning::most_scratch(planning::scratch_lives(plan.parts(), plan.tensors()));
  return plan;
}

// What decode_plan says of `bytes` (empty where it decodes), its code in `code`.
inline std::string decode_error(const std::vector<uint8_t>& bytes, ErrorCode* code) {
  try {
    (void)decode_plan(bytes);
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  *code = ErrorCode::kOk;
  return "";
}

// kCorrupt, naming every one of `fields`.
inline void expect_corrupt(const std::vector<uint8_t>& bytes,
                           std::initializer_list<std::string> fields) {
  ErrorCode code = ErrorCode::kOk;
  const std::string what = decode_error(bytes, &code);
  EXPECT_EQ(code, ErrorCode::kCorrupt) << what;
  for (const std::string& f : fields)
    EXPECT_NE(what.find(f), std::string::npos) << f << " in: " << what;
}

}  // namespace reshard::scratch_plans
