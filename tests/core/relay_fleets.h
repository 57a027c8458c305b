// Random fleets for the staged-plan tests (plan_relays_test.cc,
// plan_scratch_test.cc): few holders feeding many hosts, their plans
// checked against the oracle stage by stage and against the host bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bounds_oracle.h"
#include "layout_helpers.h"
#include "plan/enumerate.h"
#include "random_cases.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"

namespace reshard::testing {

// hosts[i] is the host of device i (and its process).
inline PlanInput one_tensor(std::vector<int64_t> shape, DType dtype, const NamedSharding& src,
                            const NamedSharding& dst, const std::vector<int32_t>& hosts) {
  PlanInput in;
  TensorSpec t;
  t.name = "w";
  t.shape = shape;
  t.dtype = dtype;
  t.src = Layout::from_named(src, shape, "src");
  t.dst = Layout::from_named(dst, shape, "dst");
  in.tensors.push_back(std::move(t));
  for (size_t d = 0; d < hosts.size(); ++d)
    in.topology.add({static_cast<int64_t>(d), static_cast<int32_t>(d), hosts[d], 0});
  return in;
}

inline NamedSharding named(std::shared_ptr<Mesh> m, std::vector<std::vector<std::string>> dims,
                           std::vector<std::string> partial = {}) {
  NamedSharding s;
  s.mesh = std::move(m);
  s.dims = std::move(dims);
  s.partial_axes = std::move(partial);
  return s;
}

// Random fleets for staged plans: few holders on one or two hosts feeding
// 3-7 receiving hosts of 1-3 devices, destinations replicated or sharded
// inside each host, sources whole, sharded or partial (psum over the
// holders), uneven shapes, several dtypes, staging budgets.
struct Fleet {
  int64_t holders = 0, holder_hosts = 0, receiving = 0, members = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  int src_kind = 0;  // whole, sharded, partial
  std::vector<std::string> partial;
  std::vector<std::vector<std::string>> dst_dims;
  int32_t threads = 1;  // for execute_host

  std::vector<int32_t> hosts;  // per device
  PlanInput in;

  // Whether the busiest NIC's bound is asserted (RandomFleetsKeep...): a
  // source that is not partial, and a tensor of at least R ×
  // cross_min_bytes (R receiving hosts; the lesser of split_min_bytes and a
  // quarter of what one α buys between hosts, at least 4 KiB: docs/design.md
  // §2.4). Left out: (a) partial sources: the reduce-scatter's parts are cut
  // per destination cell and its gather enters every host, not water-filled
  // against the holders' hosts — a limit of this planner, not of all plans;
  // (b) smaller tensors: a plan whose entry chunks (what a holder's host
  // sends one receiving host to forward) are at least cross_min_bytes gives
  // chunks to m < R receiving hosts, so one forwards at least (R - 1)/m >= 1
  // times the entry bytes, while the bound is R/(R + H) of the tensor (H
  // holder hosts) or what one host alone holds; direct parts instead cost
  // their holders R copies. Below that floor one α costs more than the
  // bytes it spreads (the α–β model picks the star or single-hop). Before
  // planner version 11 also (c): no more receiving hosts than the source
  // spans (3 receiving hosts, 3 holder hosts), where the planner did not
  // relay across hosts; version 11 relays there whenever single-hop may
  // overload a holder host, which on these fleets is every such case, and
  // meets the bound (few_receiving).
  bool egress_eligible() const {
    if (!partial.empty()) return false;
    return large();
  }
  // The former (c) of egress_eligible: no more receiving hosts than the (at
  // least 2) hosts the source spans, a source not partial, a tensor of at
  // least R x cross_min_bytes.
  bool few_receiving() const {
    if (!partial.empty()) return false;
    std::set<int32_t> source_hosts(hosts.begin(), hosts.begin() + holders);
    return source_hosts.size() >= 2 && receiving <= static_cast<int64_t>(source_hosts.size()) &&
           large();
  }
  // At least R x cross_min_bytes (see (b) above).
  bool large() const {
    int64_t bytes = dtype_size(dtype);
    for (int64_t x : shape) bytes *= x;
    const PlanOptions& o = in.options;
    const double quarter = std::max(4096.0, o.alpha_seconds * o.inter_host_bytes_per_second / 4);
    const int64_t floor_bytes = std::min(o.split_min_bytes, static_cast<int64_t>(quarter));
    return bytes >= receiving * floor_bytes;
  }
  // The rule of planner version 8 (egress_eligible before version 9): every
  // region (source cell ∩ destination cell) at least split_min_bytes per
  // receiving host in each holder host's equal share.
  bool split_eligible() const {
    if (!partial.empty()) return false;
    const Layout& src = in.tensors[0].src;
    const Layout& dst = in.tensors[0].dst;
    std::map<std::vector<int64_t>, std::set<int32_t>> regions;  // corners -> holder hosts
    for (size_t e = 0; e < dst.num_entries(); ++e)
      for (size_t r = 0; r < src.num_entries(); ++r) {
        const Box b = intersect(src.box(r), dst.box(e));
        if (b.empty()) continue;
        std::vector<int64_t> k;
        for (int d = 0; d < b.rank; ++d) k.insert(k.end(), {b.lo[d], b.hi[d]});
        regions[k].insert(hosts[static_cast<size_t>(src.device(r))]);
      }
    for (const auto& [k, hs] : regions) {
      int64_t volume = 1;
      for (size_t d = 0; d < k.size(); d += 2) volume *= k[d + 1] - k[d];
      const auto nh = static_cast<int64_t>(hs.size());
      if (volume / nh * dtype_size(dtype) < receiving * in.options.split_min_bytes) return false;
    }
    return true;
  }
};

inline Fleet random_fleet(std::mt19937_64& rng, bool subsets = false) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Fleet f;
  f.holders = uni(1, 3);
  f.holder_hosts = uni(1, 2);
  f.receiving = uni(3, 7);
  f.members = uni(1, 3);
  std::vector<int32_t>& hosts = f.hosts;
  for (int64_t d = 0; d < f.holders; ++d) hosts.push_back(static_cast<int32_t>(d % f.holder_hosts));
  for (int64_t i = 0; i < f.receiving * f.members; ++i)
    hosts.push_back(static_cast<int32_t>(f.holder_hosts + i / f.members));
  const int rank = static_cast<int>(uni(1, 3));
  for (int d = 0; d < rank; ++d) f.shape.push_back(uni(5, 90));
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32};
  f.dtype = dtypes[uni(0, 3)];
  f.src_kind = static_cast<int>(uni(0, 2));
  std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
  if (f.src_kind == 1) src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
  if (f.src_kind == 2 && f.dtype != DType::kI32) f.partial = {"a"};
  f.dst_dims.resize(static_cast<size_t>(rank));
  if (f.members > 1 && uni(0, 1) == 1) f.dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
  f.in =
      one_tensor(f.shape, f.dtype, named(mesh({"a"}, {f.holders}, 0), src_dims, f.partial),
                 named(mesh({"r", "k"}, {f.receiving, f.members}, f.holders), f.dst_dims), hosts);
  f.in.options.split_min_bytes = 256;
  f.in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
  const int64_t budgets[] = {0, 2000, 8000, int64_t{1} << 30};
  f.in.options.staging_budget_bytes = budgets[uni(0, 3)];
  f.threads = static_cast<int32_t>(uni(1, 3));
  if (subsets && uni(0, 1) == 1) {
    const PlanOptions options = f.in.options;
    f.src_kind = 3;
    f.partial.clear();
    f.holder_hosts = uni(2, 3);
    const int64_t shards = uni(1, 3), copies = uni(2, 3);
    f.holders = shards * copies;
    hosts.clear();
    for (int64_t d = 0; d < f.holders; ++d)
      hosts.push_back(static_cast<int32_t>(uni(0, f.holder_hosts - 1)));
    for (int64_t i = 0; i < f.receiving * f.members; ++i)
      hosts.push_back(static_cast<int32_t>(f.holder_hosts + i / f.members));
    std::vector<std::vector<std::string>> dims(static_cast<size_t>(rank));
    dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
    f.in =
        one_tensor(f.shape, f.dtype, named(mesh({"a", "c"}, {shards, copies}, 0), dims),
                   named(mesh({"r", "k"}, {f.receiving, f.members}, f.holders), f.dst_dims), hosts);
    f.in.options = options;
  }
  return f;
}

// Fleets where the source spans more hosts than receive (RL weight sync from
// a training fleet to a small inference fleet): 1-4 shards x 1-3 copies,
// each device on a random one of 2-8 holder hosts (in half of the fleets a
// device goes to host 0 with probability 1/2 first: a host holding most of
// the tensor), feeding 1-4 receiving hosts (at most the holder hosts) of 1-3
// devices. A generator and seeds of its own, so the other families keep
// their populations.
inline Fleet uneven_fleet(std::mt19937_64& rng) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Fleet f;
  f.src_kind = 4;
  f.holder_hosts = uni(2, 8);
  f.receiving = uni(1, std::min<int64_t>(4, f.holder_hosts));
  f.members = uni(1, 3);
  const int64_t shards = uni(1, 4), copies = uni(1, 3);
  f.holders = shards * copies;
  const bool skewed = uni(0, 1) == 1;
  for (int64_t d = 0; d < f.holders; ++d)
    f.hosts.push_back(
        static_cast<int32_t>(skewed && uni(0, 1) == 1 ? 0 : uni(0, f.holder_hosts - 1)));
  for (int64_t i = 0; i < f.receiving * f.members; ++i)
    f.hosts.push_back(static_cast<int32_t>(f.holder_hosts + i / f.members));
  const int rank = static_cast<int>(uni(1, 3));
  for (int d = 0; d < rank; ++d) f.shape.push_back(uni(5, 90));
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32};
  f.dtype = dtypes[uni(0, 3)];
  std::vector<std::vector<std::string>> dims(static_cast<size_t>(rank));
  dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
  f.dst_dims.resize(static_cast<size_t>(rank));
  if (f.members > 1 && uni(0, 1) == 1) f.dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
  f.in =
      one_tensor(f.shape, f.dtype, named(mesh({"a", "c"}, {shards, copies}, 0), dims),
                 named(mesh({"r", "k"}, {f.receiving, f.members}, f.holders), f.dst_dims), f.hosts);
  f.in.options.split_min_bytes = 256;
  f.in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
  const int64_t budgets[] = {0, 2000, 8000, int64_t{1} << 30};
  f.in.options.staging_budget_bytes = budgets[uni(0, 3)];
  f.threads = static_cast<int32_t>(uni(1, 3));
  return f;
}

// Whether a plan of `in` forwards from one host to another (a relay stage
// across hosts).
inline bool relays_across(const PlanInput& in) {
  PlanInput unbudgeted = in;
  unbudgeted.options.staging_budget_bytes = 0;
  const Plan plan = make_plan(unbudgeted);
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs)
      if (m.stage > 0 && in.topology.info(m.src_device).host != in.topology.info(m.dst_device).host)
        return true;
  return false;
}

// The same, from a fleet's global statistics where they tell (a source not
// partial): with one device per receiving host, a destination device that
// sends forwards to another host; with several, a stage 2 is the fan-out on
// the hosts a part crossed to; else from the plan.
inline bool relays_across(const Fleet& fleet, const PlanStats& st) {
  if (fleet.members == 1) {
    for (const DeviceTraffic& d : st.per_device)
      if (d.device >= fleet.holders && d.send_bytes > 0) return true;
    return false;
  }
  if (st.stages == 3) return true;
  return st.stages == 2 && relays_across(fleet.in);
}

// The busiest NIC: the most bytes one host sends or takes in, over its bound
// (the larger of the host send bound, which includes the cross-host total
// over the hosts, and the host receive bound).
inline double busiest_nic_ratio(const PlanStats& st) {
  return PlanStats::ratio(
      std::max(st.max_host_send_bytes, st.max_host_recv_bytes),
      std::max(st.lower_bound_max_host_send_bytes, st.lower_bound_max_host_recv_bytes));
}

inline std::string describe(const Fleet& f) {
  std::string s = "holders " + std::to_string(f.holders) + " on " + std::to_string(f.holder_hosts) +
                  " hosts, " + std::to_string(f.receiving) + " receiving hosts of " +
                  std::to_string(f.members) + ", shape [";
  for (size_t d = 0; d < f.shape.size(); ++d) s += (d ? "," : "") + std::to_string(f.shape[d]);
  s += "] " + std::to_string(dtype_size(f.dtype)) + " B, src kind " + std::to_string(f.src_kind) +
       ", dst ";
  for (const auto& d : f.dst_dims) s += d.empty() ? "_" : d[0];
  s += ", alpha " + std::to_string(f.in.options.alpha_seconds) + ", budget " +
       std::to_string(f.in.options.staging_budget_bytes) + ", hosts";
  for (int32_t h : f.hosts) s += " " + std::to_string(h);
  return s;
}

// The fleet's global statistics. A staging budget too small for the
// streams (16 bytes per peer: kInvalidArgument) is dropped and counted in
// *refused: budgets cut rounds, not the bytes a host sends.
inline PlanStats global_stats(Fleet& fleet, int* refused = nullptr) {
  try {
    return make_plan(fleet.in, {PlanScope::kGlobal}).stats();
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), ErrorCode::kInvalidArgument) << x.what();
    if (refused) ++*refused;
    fleet.in.options.staging_budget_bytes = 0;
    return make_plan(fleet.in, {PlanScope::kGlobal}).stats();
  }
}

// The device rule (planner version 18) trades host egress for the devices'
// balance where the whole plan's estimate drops. The statistics of
// `fleet`'s plan without it, where it changed the plan (after checking that
// its estimate is lower than `st`'s, the plan with it; counted in
// *traded), else `st`: the host-egress guards below hold for the host rule.
inline PlanStats without_device_rule(const Fleet& fleet, const PlanStats& st, int* traded) {
  planning::choice_override().device_cross = 0;
  PlanStats host_only = make_plan(fleet.in, {PlanScope::kGlobal}).stats();
  planning::choice_override().device_cross = -1;
  if (host_only.cost_seconds == st.cost_seconds) return st;
  EXPECT_LT(st.cost_seconds, host_only.cost_seconds) << "the device rule raised the estimate";
  ++*traded;
  return host_only;
}

// Crossing off (planner version 48, TensorCtx::cross_off) trades a holder
// host's egress for a receiving host's NICs where the whole plan's
// estimate drops. The statistics of `fleet`'s plan without it, where it
// changed the plan (after checking that its estimate is not lower than
// `st`'s; counted in *traded), else `st`; either way crossing off stays
// off (choice_override().cross_off = 0) until the caller resets it, so
// that without_device_rule then weighs the device rule alone.
inline PlanStats without_cross_off(const Fleet& fleet, const PlanStats& st, int* traded) {
  planning::choice_override().cross_off = 0;
  PlanStats rules = make_plan(fleet.in, {PlanScope::kGlobal}).stats();
  if (rules.cost_seconds == st.cost_seconds) return st;
  EXPECT_LE(st.cost_seconds, rules.cost_seconds) << "crossing off raised the estimate";
  ++*traded;
  return rules;
}

// Every plan is checked against the oracle through the in-process engine,
// against its host bounds, for staging within the budget per (device,
// stage, round), for determinism and for parts equal to each process's own
// plan.
// Then 60 fleets with shards on subsets of the holder hosts (planner
// version 9's water-filled shares).
// Executes `plan` in-process against the oracle, then stage by stage:
// what stages 0..k wrote already holds its value (what later stages
// forward), and each stage finishes more elements (but in a plan with
// scratch, where stages may write scratch only or contribute to reductions
// that end later: pre-reduction and chains, docs/design.md §2.4); where
// stage k+1 finishes elements, stopping after stage k leaves them
// unwritten, which the check through k+1 sees. Each check executes stages
// 0..k again, so a plan of S stages costs S^2 / 2 stage executions: past
// kEveryStageLimit stages (pre-reduction in hundreds of bands under a
// small budget, planner version 21) the checks stop after the first and
// last kEveryStageLimit / 2 stages and after every stride-th one between,
// and the whole plan is still checked element by element.
constexpr int32_t kEveryStageLimit = 64;
inline bool stage_checked(int32_t k, int32_t stages) {
  if (stages <= kEveryStageLimit) return true;
  const int32_t edge = kEveryStageLimit / 2;
  const int32_t stride = (stages + kEveryStageLimit - 1) / kEveryStageLimit;
  return k < edge || k >= stages - edge || k % stride == 0;
}

inline void execute_every_stage(const Plan& plan, int32_t threads) {
  const PlanStats& st = plan.stats();
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views, {threads});
  const OracleReport report = check_destinations(plan, buffers);
  ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches";
  Engine engine(make_local_transport());
  // Elements finished after each stage: every stage finishes some, but for
  // stages that only write scratch or contribute to reductions that end
  // later (a pre-reduction, a chain's links: plans with scratch).
  // (Stages not checked keep the count of the last one checked.)
  std::vector<int64_t> finished;
  for (int32_t k = 0; k < st.stages; ++k) {
    const int64_t before = finished.empty() ? 0 : finished.back();
    if (!stage_checked(k, st.stages)) {
      finished.push_back(before);
      continue;
    }
    VerifyOptions v;
    v.last_stage = k;
    const OracleReport r = verify_plan(engine, plan, kAllProcesses, {}, v);
    ASSERT_TRUE(r.ok()) << r.mismatches << " mismatches after stage " << k;
    if (st.max_scratch_bytes > 0)
      ASSERT_GE(r.elements, before);
    else
      ASSERT_GT(r.elements, before) << "stage " << k << " wrote nothing";
    finished.push_back(r.elements);
  }
  ASSERT_GT(finished.back(), 0);
  for (int32_t k = 0; k + 1 < st.stages; ++k) {
    if (!stage_checked(k, st.stages) || !stage_checked(k + 1, st.stages)) continue;
    if (finished[static_cast<size_t>(k) + 1] == finished[static_cast<size_t>(k)]) continue;
    // Stage k + 1 finishes elements: stopping after stage k must show.
    OracleBuffers part = fill_sources(plan);
    const std::vector<TensorBuffers> pv = part.views();
    ExecuteOptions o;
    o.last_stage = k;
    engine.execute(plan, kAllProcesses, pv, o);
    EXPECT_FALSE(check_destinations_through_stage(plan, part, static_cast<uint32_t>(k + 1)).ok())
        << "stopping after stage " << k << " went unnoticed";
  }
  ASSERT_EQ(finished.back(), report.elements);
}

// Plans `fleet` and checks it: determinism, cross-host bytes and host
// receive bound (sources not partial), staging within the budget, each
// process's part, and execution against the oracle through the in-process
// engine after every stage. Returns the plan's statistics.
inline PlanStats check_fleet(const Fleet& fleet) {
  const PlanInput& in = fleet.in;
  const Plan plan = make_plan(in);
  const Plan again = make_plan(in);
  EXPECT_EQ(plan.parts(), again.parts()) << "determinism";
  const PlanStats& st = plan.stats();
  {
    if (fleet.partial.empty()) {
      EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
      EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
    }
    // Staging per (device, stage, round) within the budget.
    std::map<std::tuple<int64_t, uint32_t, uint32_t>, int64_t> staged;
    for (const auto& [p, part] : plan.parts())
      for (const Message& m : part.recvs) {
        staged[{m.src_device, m.stage, m.round}] += m.bytes;
        staged[{m.dst_device, m.stage, m.round}] += m.bytes;
      }
    if (in.options.staging_budget_bytes > 0) {
      for (const auto& [k, bytes] : staged) EXPECT_LT(bytes, in.options.staging_budget_bytes);
    }
    for (int32_t p : plan.processes()) {
      const Plan one = make_plan(in, {PlanScope::kProcess, p, false});
      EXPECT_EQ(one.part(p), plan.part(p)) << "process " << p;
    }
    EXPECT_NO_FATAL_FAILURE(execute_every_stage(plan, fleet.threads));
  }
  return st;
}

}  // namespace reshard::testing

// The names the relay and scratch tests use unqualified. `using namespace
// testing::fleet_names;` brings in these alone: the whole of
// reshard::testing would clash with gtest's ::testing.
namespace reshard::testing::fleet_names {
using testing::busiest_nic_ratio;
using testing::check_fleet;
using testing::describe;
using testing::execute_every_stage;
using testing::Fleet;
using testing::global_stats;
using testing::mesh;
using testing::named;
using testing::one_tensor;
using testing::oracle;
using testing::OracleBounds;
using testing::random_fleet;
using testing::relays_across;
using testing::stage_checked;
using testing::uneven_fleet;
using testing::without_cross_off;
using testing::without_device_rule;
}  // namespace reshard::testing::fleet_names
