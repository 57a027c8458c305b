// Lower bounds over all plans (relays, trees, reductions in any order),
// checked two ways: against an element-by-element oracle that applies their
// definitions to every element of random cases, and on the cases where a
// single-hop plan moves more than necessary (the bound must show the gap,
// never a ratio of 1 that a relay beats).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "bounds_oracle.h"
#include "cell_ingress.h"
#include "layout_helpers.h"
#include "plan/context.h"
#include "plan/enumerate.h"
#include "plan/scratch_layout.h"
#include "random_cases.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "test_scale.h"

namespace reshard {
namespace {

using testing::oracle;
using testing::OracleBounds;

// Invariant: the planner's bounds are the oracle's, exactly, overlapping
// explicit destination boxes included (their overlap counts once per
// device and host: the union).
TEST(PlanBounds, RandomCasesMatchTheElementOracle) {
  const int cases = scaled_cases(4000);
  int64_t exact = 0, partial = 0, multi_host = 0, relay_checked = 0, overlapping = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseGen gen(7000 + static_cast<uint64_t>(c), {4, 16, 3, 7, true, true});
    PlanInput in = gen.input();
    if (c % 2) {
      // One process per device, spread over 1-5 hosts: many hosts, replicas
      // of both sides across them.
      const int32_t nh = static_cast<int32_t>(gen.uni(1, 5));
      Topology topo;
      for (const DeviceInfo& d : in.topology.devices())
        topo.add({d.device, static_cast<int32_t>(d.device),
                  static_cast<int32_t>(gen.uni(0, nh - 1)), 0});
      in.topology = topo;
    }
    const Plan plan = make_plan(in, {PlanScope::kGlobal});
    const PlanStats& st = plan.stats();
    const OracleBounds o = oracle(in);
    // Exact everywhere: overlapping explicit destination boxes are refined
    // into disjoint fragments, so an element needed on a device or host
    // counts there once (the union), as the oracle counts it.
    bool whole = true;
    int64_t per_host = 0;
    for (const TensorSpec& t : in.tensors) {
      overlapping += testing::overlapping_boxes(t.dst);
      partial += t.src.partial();
      whole &= !t.src.partial() && !t.dst.partial();
      if (whole) per_host += testing::cell_ingress_bytes(in.topology, t);
    }
    // Relays (on by default): each element needed on a host enters it once,
    // across up to 5 hosts here: the bound, overlapping boxes included.
    if (whole) {
      ++relay_checked;
      ASSERT_EQ(st.cross_host_bytes, per_host);
      ASSERT_EQ(st.cross_host_bytes, o.cross_host);
      ASSERT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
    }
    std::set<int32_t> hosts;
    for (const DeviceInfo& d : in.topology.devices()) hosts.insert(d.host);
    multi_host += hosts.size() > 1;
    ++exact;
    ASSERT_EQ(st.lower_bound_network_bytes, o.network);
    ASSERT_EQ(st.lower_bound_max_recv_bytes, o.max_recv);
    ASSERT_EQ(st.lower_bound_max_send_bytes, o.max_send);
    ASSERT_EQ(st.lower_bound_cross_host_bytes, o.cross_host);
    ASSERT_EQ(st.lower_bound_max_host_recv_bytes, o.max_host_recv);
    ASSERT_EQ(st.lower_bound_max_host_send_bytes, o.max_host_send);
  }
  EXPECT_GT(exact, cases / 3);
  EXPECT_GT(overlapping, cases / 100);
  EXPECT_GT(partial, cases / 10);
  EXPECT_GT(multi_host, cases / 2);  // half the cases have 1-5 random hosts
  EXPECT_GT(relay_checked, cases / 2);
}

// ------------------------------------------------ where single-hop loses

using testing::mesh;

// hosts[i] is the host of device i (and its process).
PlanInput one_tensor(std::vector<int64_t> shape, DType dtype, const NamedSharding& src,
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

NamedSharding named(std::shared_ptr<Mesh> m, std::vector<std::vector<std::string>> dims,
                    std::vector<std::string> partial = {}) {
  NamedSharding s;
  s.mesh = std::move(m);
  s.dims = std::move(dims);
  s.partial_axes = std::move(partial);
  return s;
}

constexpr int64_t kMiB = int64_t{1} << 20;

// RL weight sync: FSDP over host 0's 8 GPUs to two tp=4 replicas on host 1.
// Each element is needed on two devices of host 1 but must enter it once.
TEST(PlanBounds, WeightSyncToTwoReplicasShowsTheCrossHostGap) {
  std::vector<int32_t> hosts(16, 1);
  std::fill(hosts.begin(), hosts.begin() + 8, 0);
  const PlanInput in =
      one_tensor({16384, 14336}, DType::kBF16, named(mesh({"fsdp"}, {8}, 0), {{"fsdp"}, {}}),
                 named(mesh({"dp", "tp"}, {2, 4}, 8), {{}, {"tp"}}), hosts);
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 448 * kMiB);
  EXPECT_EQ(st.lower_bound_max_host_recv_bytes, 448 * kMiB);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, 448 * kMiB);
  EXPECT_EQ(st.lower_bound_binding, BoundKind::kHostSend);
  // Relays: each element enters host 1 once and is forwarded inside it.
  EXPECT_EQ(st.cross_host_bytes, 448 * kMiB);
  EXPECT_EQ(st.forwarded_bytes, 448 * kMiB);
  EXPECT_EQ(st.stages, 2);
  EXPECT_EQ(st.max_send_bytes, st.lower_bound_max_send_bytes);
  // Single-hop: twice.
  PlanInput single = in;
  single.options.relays = false;
  const PlanStats one = make_plan(single, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(one.cross_host_bytes, 896 * kMiB);
  EXPECT_EQ(one.stages, 1);
  EXPECT_GT(PlanStats::ratio(one.cost_seconds, one.lower_bound_cost_seconds), 1.9);
}

// Relays across hosts: few holders feeding many hosts of several devices.
// Every host takes each element in once and the holders send it once
// (scatter to the receiving hosts, then across them, then inside each),
// verified element by element, with single-hop as the reference.
TEST(PlanRelays, FewHoldersToManyHostsMeetTheHostBounds) {
  int checked = 0;
  for (int64_t receiving : {3, 4, 6}) {
    for (int64_t members : {1, 2, 3}) {
      for (int64_t holders : {1, 2}) {
        SCOPED_TRACE("receiving " + std::to_string(receiving) + " members " +
                     std::to_string(members) + " holders " + std::to_string(holders));
        std::vector<int32_t> hosts;
        for (int64_t d = 0; d < holders; ++d) hosts.push_back(0);
        for (int64_t i = 0; i < receiving * members; ++i)
          hosts.push_back(1 + static_cast<int32_t>(i / members));
        const std::vector<int64_t> shape = {97 + 13 * receiving, 61 + members};
        PlanInput in =
            one_tensor(shape, members == 2 ? DType::kBF16 : DType::kF32,
                       named(mesh({"a"}, {holders}, 0), {{"a"}, {}}),
                       named(mesh({"r", "k"}, {receiving, members}, holders), {{}, {}}), hosts);
        in.options.split_min_bytes = 1024;
        in.options.staging_budget_bytes = 3000 + 1000 * members;  // several rounds per stage
        const Plan plan = make_plan(in);
        const PlanStats& st = plan.stats();
        EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
        EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
        EXPECT_EQ(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes);
        EXPECT_EQ(st.stages, members > 1 ? 3 : 2);
        EXPECT_GT(st.forwarded_bytes, 0);
        OracleBuffers buffers = fill_sources(plan);
        const std::vector<TensorBuffers> views = buffers.views();
        execute_host(plan, views);
        const OracleReport report = check_destinations(plan, buffers);
        EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
        // Every process planning alone derives its part of the whole plan.
        for (int32_t p : plan.processes()) {
          const Plan one = make_plan(in, {PlanScope::kProcess, p, false});
          ASSERT_EQ(one.part(p), plan.part(p)) << "process " << p;
        }
        PlanInput single = in;
        single.options.relays = false;
        const PlanStats one = make_plan(single, {PlanScope::kGlobal}).stats();
        EXPECT_EQ(one.stages, 1);
        // Single-hop: the holders send it to every device.
        EXPECT_EQ(one.max_host_send_bytes, receiving * members * st.max_host_send_bytes);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 18);
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

Fleet random_fleet(std::mt19937_64& rng, bool subsets = false) {
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
Fleet uneven_fleet(std::mt19937_64& rng) {
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
bool relays_across(const PlanInput& in) {
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
bool relays_across(const Fleet& fleet, const PlanStats& st) {
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
double busiest_nic_ratio(const PlanStats& st) {
  return PlanStats::ratio(
      std::max(st.max_host_send_bytes, st.max_host_recv_bytes),
      std::max(st.lower_bound_max_host_send_bytes, st.lower_bound_max_host_recv_bytes));
}

std::string describe(const Fleet& f) {
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
PlanStats global_stats(Fleet& fleet, int* refused = nullptr) {
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
PlanStats without_device_rule(const Fleet& fleet, const PlanStats& st, int* traded) {
  planning::choice_override().device_cross = 0;
  PlanStats host_only = make_plan(fleet.in, {PlanScope::kGlobal}).stats();
  planning::choice_override() = {.single_hop = 0};
  if (host_only.cost_seconds == st.cost_seconds) return st;
  EXPECT_LT(st.cost_seconds, host_only.cost_seconds) << "the device rule raised the estimate";
  ++*traded;
  return host_only;
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
bool stage_checked(int32_t k, int32_t stages) {
  if (stages <= kEveryStageLimit) return true;
  const int32_t edge = kEveryStageLimit / 2;
  const int32_t stride = (stages + kEveryStageLimit - 1) / kEveryStageLimit;
  return k < edge || k >= stages - edge || k % stride == 0;
}

void execute_every_stage(const Plan& plan, int32_t threads) {
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
PlanStats check_fleet(const Fleet& fleet) {
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

TEST(PlanRelays, RandomFleetsAreExactAndMeetTheHostBounds) {
  std::mt19937_64 rng(20261123), subset_rng(20261125);
  int relayed = 0, crossed = 0, reduced = 0;
  const int cases = scaled_cases(120), subset_cases = scaled_cases(60);
  for (int c = 0; c < cases + subset_cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const Fleet fleet = c < cases ? random_fleet(rng) : random_fleet(subset_rng, true);
    const PlanStats st = check_fleet(fleet);
    if (::testing::Test::HasFailure()) return;
    relayed += st.forwarded_bytes > 0;
    crossed += st.stages == 3 || (st.stages == 2 && fleet.members == 1 && fleet.src_kind != 2);
    reduced += fleet.src_kind == 2 && st.stages == 2;
  }
  // The generator exercises every kind of stage.
  EXPECT_GT(relayed, cases / 3);
  EXPECT_GT(crossed, cases / 10);
  EXPECT_GT(reduced, cases / 20);
}

// Fewer regions than entries on the receiving host (planner version 16):
// 1-3 holders on host 0, each holding a shard, to one host of 2-8 entries
// (replicated, or sharded along the other dimension). Each region is cut
// into parts that different entries take in and forward
// (Enumerator::relay_split), so no entry forwards more than the inside-host
// broadcast's (M - 1)/M of what the host takes in: the busiest device sends
// within 1.05x of the larger of its bound and that. Version 15 gave each
// region one leader: one holder to 8 entries had one device send 7 x 8 MiB
// (7x its bound; estimate 923 µs against 409 µs now). Small tensors with
// split_min_bytes 256 are executed and checked after every stage, with
// process parts equal to the whole plan's.
TEST(PlanRelays, FewRegionsSpreadTheForwardingOverTheHost) {
  int cases = 0;
  double worst = 0;
  for (int64_t holders : {1, 2, 3})
    for (int64_t members : {2, 3, 4, 5, 8})
      for (bool sharded : {false, true})
        for (bool small : {false, true}) {
          SCOPED_TRACE(std::to_string(holders) + " holders, " + std::to_string(members) +
                       " members" + (sharded ? ", sharded" : ", replicated") +
                       (small ? ", small" : ""));
          std::vector<int32_t> hosts(static_cast<size_t>(holders), 0);
          hosts.resize(static_cast<size_t>(holders + members), 1);
          const std::vector<int64_t> shape = {small ? 96 : 4096, small ? 40 : 2048};
          std::vector<std::vector<std::string>> dims(2);
          if (sharded) dims[1] = {"k"};
          PlanInput in =
              one_tensor(shape, DType::kF32, named(mesh({"a"}, {holders}, 0), {{"a"}, {}}),
                         named(mesh({"k"}, {members}, holders), dims), hosts);
          in.options.alpha_seconds = 0;
          in.options.staging_budget_bytes = 0;
          if (small) in.options.split_min_bytes = 256;
          const Plan plan = make_plan(in);
          const PlanStats& st = plan.stats();
          // What the host takes in, over its entries: each forwards its share
          // to the others (sharded: each entry needs its own columns only).
          const double V = static_cast<double>(shape[0] * shape[1] * 4) /
                           static_cast<double>(sharded ? members : 1);
          const double fan =
              sharded ? 0.0 : V * static_cast<double>(members - 1) / static_cast<double>(members);
          const double target = std::max(static_cast<double>(st.lower_bound_max_send_bytes), fan);
          const double r = static_cast<double>(st.max_send_bytes) / target;
          EXPECT_LE(r, 1.05) << st.max_send_bytes << " bytes sent, bound "
                             << st.lower_bound_max_send_bytes;
          EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
          worst = std::max(worst, r);
          ++cases;
          if (!small) continue;
          ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
          for (int32_t p : plan.processes())
            ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
                << "process " << p;
        }
  std::printf("fewer regions than entries: %d cases, the busiest device at most %.3fx\n", cases,
              worst);
  // split_min_bytes near INT64_MAX (a fuzzed spec found the product of the
  // first version overflowing): no cut, the plan as with one leader per region.
  PlanInput in =
      one_tensor({64, 64}, DType::kF32, named(mesh({"a"}, {3}, 0), {{"a"}, {}}),
                 named(mesh({"k"}, {8}, 3), {{}, {}}), {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1});
  in.options.split_min_bytes = INT64_MAX - 1;
  in.options.alpha_seconds = 0;
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
}

// Relays across hosts with several entries per receiving host (planner
// version 17): a few holders (1-3 devices on 1-2 hosts) feed R = 2-4 more
// hosts of M = 2-8 entries each, the destination replicated, so each
// region crosses as R runs and fans out inside every host. One leader per
// run and host forwarded a run to the R - 1 other hosts and the M - 1
// other entries: up to 4x the busiest device's bound (one holder into 2
// hosts of 8). Cut into a sub-run per entry, every device sends at most
// 1.05x the larger of its bound and what a device must forward in any
// plan where each element enters each host once, (RM - 1) / RM of the
// tensor, while the host figures stay at their bounds. Small cases are
// executed after every stage and process parts compared.
TEST(PlanRelays, RunsAcrossHostsShareTheForwardingOverEveryEntry) {
  int cases = 0;
  double worst = 0, worst_small = 0;
  for (int64_t holders : {1, 2, 3})
    for (int64_t holder_hosts : {1, 2})
      for (int64_t R : {2, 3, 4})
        for (int64_t M : {2, 3, 8})
          for (double alpha : {0.0, 5e-6})
            for (bool small : {false, true}) {
              if (holder_hosts > holders || R <= holder_hosts) continue;
              SCOPED_TRACE(std::to_string(holders) + " holders on " + std::to_string(holder_hosts) +
                           " hosts into " + std::to_string(R) + " x " + std::to_string(M) +
                           ", alpha " + std::to_string(alpha) + (small ? ", small" : ""));
              std::vector<int32_t> hosts;
              for (int64_t d = 0; d < holders; ++d)
                hosts.push_back(static_cast<int32_t>(d * holder_hosts / holders));
              for (int64_t i = 0; i < R * M; ++i)
                hosts.push_back(static_cast<int32_t>(holder_hosts + i / M));
              const std::vector<int64_t> shape = {small ? 48 : 2048, small ? 40 : 1024};
              PlanInput in =
                  one_tensor(shape, DType::kBF16, named(mesh({"a"}, {holders}, 0), {{"a"}, {}}),
                             named(mesh({"r", "m"}, {R, M}, holders), {{}, {}}), hosts);
              in.options.alpha_seconds = alpha;
              in.options.staging_budget_bytes = 0;
              if (small) in.options.split_min_bytes = 64;
              const Plan plan = make_plan(in);
              const PlanStats& st = plan.stats();
              const double V = static_cast<double>(shape[0] * shape[1] * 2);
              const double fan = V * static_cast<double>(R * M - 1) / static_cast<double>(R * M);
              const double target =
                  std::max(static_cast<double>(st.lower_bound_max_send_bytes), fan);
              EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
              EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
              // Shares are cut at elements: within R elements (CrossLayout).
              EXPECT_LE(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes + 2 * R);
              ++cases;
              if (!small) {
                const double r = static_cast<double>(st.max_send_bytes) / target;
                EXPECT_LE(r, 1.05)
                    << st.max_send_bytes << " bytes sent, bound " << st.lower_bound_max_send_bytes;
                worst = std::max(worst, r);
                continue;
              }
              // 3,840 bytes over up to 32 entries: sub-runs of a few rows,
              // the busiest device within 1.3x (printed, not the point).
              worst_small = std::max(worst_small, static_cast<double>(st.max_send_bytes) / target);
              ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
              for (int32_t p : plan.processes())
                ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
                    << "process " << p;
            }
  std::printf(
      "runs across hosts of several entries: %d cases, the busiest device at most %.3fx "
      "(%.3fx on the small ones)\n",
      cases, worst, worst_small);
  EXPECT_GT(cases, 80);
}

// The source spans as many hosts as receive (a trainer on H hosts of D
// devices feeding R <= H inference replicas of M devices, the destination
// sharded in each): single-hop keeps every host NIC at its bound (each
// receiving host takes in V from the H holder hosts, each holder host sends
// R V / H <= V), so the host rule (kCrossGain) keeps it, but a holder
// device sends its shard R times while a receiving device takes in V / M.
// Planner version 18 crosses such a group by the device rule where that
// lowers the whole plan's α–β estimate (Context::decide_device_cross),
// every region cut into a run per receiving host and the direct parts
// water-filled over devices: the chosen plan's estimate is the lesser of
// the rule off and on, and where it crosses the busiest device (send or
// receive) is within 1.05x of the larger of its bounds (2 hosts of 4 into
// 2 hosts of 8 reach every device and host bound; single-hop sent 2x).
// Small cases are executed after every stage and process parts compared.
TEST(PlanRelays, HolderDevicesLoadedSeveralTimesCrossByTheEstimate) {
  int cases = 0, crossed = 0, small_crossed = 0;
  double least_gain = 1, worst_device = 0;
  for (int64_t H : {2, 3})
    for (int64_t D : {1, 2, 4})
      for (int64_t R = 2; R <= H; ++R)
        for (int64_t M : {2, 4, 8})
          for (int src : {0, 1, 2})  // rows over every device, columns, rows on each host
            for (bool dst_rows : {false, true})
              for (double alpha : {0.0, 5e-6})
                for (bool small : {false, true}) {
                  if (small && (alpha > 0 || H * D + R * M > 24)) continue;
                  SCOPED_TRACE(std::to_string(H) + " hosts of " + std::to_string(D) + " into " +
                               std::to_string(R) + " of " + std::to_string(M) + ", source " +
                               std::to_string(src) + (dst_rows ? ", rows" : ", columns") +
                               ", alpha " + std::to_string(alpha) + (small ? ", small" : ""));
                  std::vector<int32_t> hosts;
                  for (int64_t i = 0; i < H * D; ++i) hosts.push_back(static_cast<int32_t>(i / D));
                  for (int64_t i = 0; i < R * M; ++i)
                    hosts.push_back(static_cast<int32_t>(H + i / M));
                  std::vector<std::vector<std::string>> sd(2), dd(2);
                  if (src == 0) sd[0] = {"h", "d"};
                  if (src == 1) sd[1] = {"h", "d"};
                  if (src == 2) sd[0] = {"d"};
                  dd[dst_rows ? 0 : 1] = {"k"};
                  const std::vector<int64_t> shape = {small ? 96 : 8192, small ? 48 : 8192};
                  PlanInput in =
                      one_tensor(shape, DType::kF32, named(mesh({"h", "d"}, {H, D}, 0), sd),
                                 named(mesh({"r", "k"}, {R, M}, H * D), dd), hosts);
                  in.options.alpha_seconds = alpha;
                  in.options.staging_budget_bytes = 0;
                  if (small) in.options.split_min_bytes = 256;
                  auto with = [&](int rule) {
                    planning::choice_override().device_cross = rule;
                    const double cost = make_plan(in, {PlanScope::kGlobal}).stats().cost_seconds;
                    planning::choice_override() = {.single_hop = 0};
                    return cost;
                  };
                  const double off = with(0), on = with(1);
                  const Plan plan = make_plan(in);
                  const PlanStats& st = plan.stats();
                  EXPECT_DOUBLE_EQ(st.cost_seconds, std::min(off, on)) << off << " " << on;
                  EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
                  EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
                  ++cases;
                  if (st.cost_seconds < off) {
                    ++crossed;
                    small_crossed += small;
                    least_gain = std::min(least_gain, st.cost_seconds / off);
                    // The busiest device (what it sends or takes in) at
                    // the larger of its bounds.
                    const double dev =
                        static_cast<double>(std::max(st.max_send_bytes, st.max_recv_bytes)) /
                        static_cast<double>(
                            std::max(st.lower_bound_max_send_bytes, st.lower_bound_max_recv_bytes));
                    if (!small) {
                      EXPECT_LE(dev, 1.05) << st.max_send_bytes << " / " << st.max_recv_bytes;
                    }
                    worst_device = std::max(worst_device, small ? 0.0 : dev);
                  }
                  if (H == 2 && D == 4 && R == 2 && M == 8 && src != 2 && !small) {
                    EXPECT_LT(st.cost_seconds, 0.85 * off);
                    EXPECT_EQ(st.max_send_bytes, st.lower_bound_max_send_bytes);
                    EXPECT_EQ(st.max_recv_bytes, st.lower_bound_max_recv_bytes);
                    EXPECT_EQ(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes);
                  }
                  if (!small) continue;
                  ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
                  for (int32_t p : plan.processes())
                    ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
                        << "process " << p;
                }
  std::printf(
      "source spanning as many hosts as receive: %d cases, %d crossed by the device rule "
      "(estimate down to %.3fx the rule off's; %d of them small, executed), the busiest device "
      "at most %.3fx its bound\n",
      cases, crossed, least_gain, small_crossed, worst_device);
  EXPECT_GT(crossed, cases / 8);
  EXPECT_GT(small_crossed, 10);
}

// Many small tensors with the same layouts (an RL weight sync's biases and
// norms) travel in the same messages, so the α a relay adds is theirs
// together (TensorCtx::share, planner version 17). Each alone is too small
// to cut into a chunk per receiving host, and each had its one chunk enter
// the same host, which then forwarded all of them: 512 biases of 4 KiB from
// one holder into 8 hosts sent 14 MiB from one host (7x the bound, α–β
// estimate 711 us); now every host sends at most its bound.
TEST(PlanRelays, LikeSmallTensorsRelayTogether) {
  for (int64_t R : {4, 8})
    for (int64_t M : {1, 2})
      for (bool mixed : {false, true}) {
        SCOPED_TRACE(std::to_string(R) + " hosts of " + std::to_string(M) +
                     (mixed ? ", two shapes" : ""));
        std::vector<int32_t> hosts = {0};
        for (int64_t i = 0; i < R * M; ++i) hosts.push_back(static_cast<int32_t>(1 + i / M));
        PlanInput in = one_tensor({1024}, DType::kF32, named(mesh({"a"}, {1}, 0), {{}}),
                                  named(mesh({"r", "m"}, {R, M}, 1), {{}}), hosts);
        const TensorSpec first = in.tensors[0];
        for (int i = 1; i < 256; ++i) {
          TensorSpec t = first;
          t.name = "b" + std::to_string(i);
          if (mixed && i % 2 == 1) {
            t.shape = {512};
            t.dtype = DType::kBF16;
            t.src = Layout::from_named(named(mesh({"a"}, {1}, 0), {{}}), t.shape, "src");
            t.dst = Layout::from_named(named(mesh({"r", "m"}, {R, M}, 1), {{}}), t.shape, "dst");
          }
          in.tensors.push_back(t);
        }
        in.options.staging_budget_bytes = 0;
        const Plan plan = make_plan(in);
        const PlanStats& st = plan.stats();
        EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
        EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
        // Chunks are cut at elements: within R elements of each tensor.
        EXPECT_LE(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes + 256 * R * 4)
            << "one host forwards every tensor";
        PlanInput single = in;
        single.options.relays = false;
        EXPECT_LT(st.cost_seconds, make_plan(single, {PlanScope::kGlobal}).stats().cost_seconds);
        if (R == 4 && M == 2) {
          ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
          for (int32_t p : plan.processes())
            ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
                << "process " << p;
        }
        EXPECT_TRUE(relays_across(in));
        // One of them alone: share 1. Across hosts the α–β choice
        // (Enumerator::cross_slower) fetches it single-hop; inside a host
        // the relay is taken by bytes, and its stage's α costs more than
        // its 4 KiB save, which the planner's single-hop guard (off in
        // this binary, routes_as_built.cc) weighs: with the guard, never
        // above single-hop's estimate.
        PlanInput alone = in;
        alone.tensors.resize(1);
        PlanInput alone_single = alone;
        alone_single.options.relays = false;
        const double alone_single_cost =
            make_plan(alone_single, {PlanScope::kGlobal}).stats().cost_seconds;
        if (M == 1) {
          EXPECT_LE(make_plan(alone, {PlanScope::kGlobal}).stats().cost_seconds, alone_single_cost);
        }
        planning::choice_override().single_hop = -1;
        EXPECT_LE(make_plan(alone, {PlanScope::kGlobal}).stats().cost_seconds, alone_single_cost);
        planning::choice_override().single_hop = 0;
      }
}

// Sub-runs add peers: where a staging budget cannot stage them on some
// device (more than budget / 16 peers), the plan goes without them
// (Context::relay_split) instead of refusing the budget, which the plan
// without sub-runs meets (a random explicit fleet of stop 18 found it: one
// holder into 7 hosts of 2, a 57 KB tensor, 2,000 bytes of budget; since
// planner version 21 counts a device's peers stage by stage, budgets of
// 1,284-1,780 bytes plan without sub-runs and 1,796 or more with them).
TEST(PlanRelays, BudgetsThatCannotStageSubRunsPlanWithoutThem) {
  std::vector<int32_t> hosts = {0};
  for (int32_t i = 0; i < 14; ++i) hosts.push_back(1 + i / 2);
  PlanInput in = one_tensor({7, 63, 65}, DType::kF16, named(mesh({"a"}, {1}, 0), {{}, {}, {}}),
                            named(mesh({"r", "k"}, {7, 2}, 1), {{}, {}, {}}), hosts);
  in.options.split_min_bytes = 256;
  in.options.alpha_seconds = 0;
  in.options.staging_budget_bytes = 0;
  const Plan unbounded = make_plan(in);
  in.options.staging_budget_bytes = 1500;
  const Plan budgeted = make_plan(in);
  // Without sub-runs each run has one leader per host: fewer streams.
  int64_t most_unbounded = 0, most_budgeted = 0;
  for (const DeviceTraffic& d : unbounded.stats().per_device)
    most_unbounded = std::max(most_unbounded, d.send_bytes);
  for (const DeviceTraffic& d : budgeted.stats().per_device)
    most_budgeted = std::max(most_budgeted, d.send_bytes);
  EXPECT_LT(most_unbounded, most_budgeted) << "sub-runs balance the unbounded plan only";
  const PlanStats& st = budgeted.stats();
  EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
  EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
  ASSERT_NO_FATAL_FAILURE(execute_every_stage(budgeted, 2));
  for (int32_t p : budgeted.processes())
    ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), budgeted.part(p))
        << "process " << p;
  // A budget too small for either plan is still refused, naming the field.
  in.options.staging_budget_bytes = 100;
  try {
    (void)make_plan(in);
    ADD_FAILURE() << "a 100-byte budget was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("options.staging_budget_bytes"), std::string::npos);
  }
}

// The busiest NIC (a host's egress) within 1.05x of its bound over all
// plans, on every eligible case (Fleet::egress_eligible) of 20,000 random
// fleets, half of them holding shards on random subsets of 2-3 holder
// hosts: global statistics only (the first 120 fleets without subsets are
// also executed and checked above). Planner version 6 cut each region along
// one dimension into entry parts placed region by region (worst 1.17 on the
// cases of version 7's rule); version 8 cut at element granularity only the
// regions of at least split_min_bytes per receiving host and share and
// shared regions equally among their holders' hosts: on these fleets 2,062
// of the 10,560 eligible cases above 1.05x, worst 7.83 (458 of the 8,787
// cases of version 8's own rule, worst 1.33: shards on subsets). Version 9:
// all of them, worst 1.018 (docs/results.md). Version 11 adds the 328
// cases with no more receiving hosts than the source spans (worst 4.68 in
// version 10): all 10,888 within, worst 1.029.
TEST(PlanRelays, RandomFleetsKeepTheBusiestNicNearItsBound) {
  std::mt19937_64 rng(20261123);
  const int cases = scaled_cases(20000);
  int eligible = 0, refused = 0, split = 0, subsets = 0, outside = 0, few = 0, traded = 0;
  double worst = 0, worst_outside = 0, worst_few = 0, worst_traded = 0;
  for (int c = 0; c < cases; ++c) {
    Fleet fleet = random_fleet(rng, true);
    if (!fleet.partial.empty()) continue;
    SCOPED_TRACE("case " + std::to_string(c) + ": " + describe(fleet));
    const PlanStats st = global_stats(fleet, &refused);
    const double ratio =
        PlanStats::ratio(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes);
    if (fleet.few_receiving()) {
      ++few;
      worst_few = std::max(worst_few, ratio);
    }
    if (!fleet.egress_eligible()) {
      ++outside;
      worst_outside = std::max(worst_outside, ratio);
      continue;
    }
    ++eligible;
    split += fleet.split_eligible();
    subsets += fleet.src_kind == 3;
    double held = ratio;
    if (ratio > 1.05) {
      worst_traded = std::max(worst_traded, ratio);
      const PlanStats h = without_device_rule(fleet, st, &traded);
      held = PlanStats::ratio(h.max_host_send_bytes, h.lower_bound_max_host_send_bytes);
    }
    EXPECT_LE(held, 1.05) << st.max_host_send_bytes << " bytes, bound "
                          << st.lower_bound_max_host_send_bytes;
    worst = std::max(worst, held);
  }
  std::printf(
      "busiest NIC within 1.05x of its bound on %d eligible cases of %d (%d with shards on "
      "subsets of the holder hosts, %d eligible by version 8's rule; %d replanned without a "
      "staging budget), worst %.3f; %d cases without partial sums left out, worst %.3f\n",
      eligible, cases, subsets, split, refused, worst, outside, worst_outside);
  std::printf(
      "of them %d with no more receiving hosts than the source spans, worst %.3f; the device "
      "rule laid out %d plans above 1.05x (egress up to %.3fx), each with a lower estimate, "
      "held to the host rule's plan\n",
      few, worst_few, traded, worst_traded);
  EXPECT_GE(eligible, least_covered(9000));  // 10,888 with libstdc++'s distributions
  EXPECT_GE(few, least_covered(300));        // 328
}

// The source spans more hosts than receive (uneven_fleet: 2-8 holder hosts
// holding shards x copies on random subsets, a host often holding most of
// the tensor, 1-4 receiving hosts of 1-3 devices): on 20,000 fleets, global
// statistics, the busiest NIC (the most a host sends or takes in) within
// 1.05x of its bound (the larger of the host send bound, which includes the
// cross-host total over the hosts, and the host receive bound) on every
// case whose source spans at least 2 hosts and whose tensor has at least
// R x cross_min_bytes (below that, as in egress_eligible (b), the α–β model
// trades bytes for fewer α: chunked relays or single-hop). Planner version
// 10 relayed across hosts here only where the receiving hosts outnumbered
// the source's; single-hop loaded a host holding most of the tensor R times
// (2,888 of the 10,789 cases above 1.05x, worst 3.00). Version 11 crosses
// where single-hop may load a holder host above kCrossGain times what each
// receiving host takes in: worst 1.020.
// Egress alone is not asserted: where the planner stays single-hop (every
// holder host's regions times R within kCrossGain of V, each receiving
// host's ingress, which is every plan's busiest NIC), the egress bound
// R V / (H + R) lies below single-hop's R V / H; reaching it there costs a
// relay stage on every tensor (405B FSDP -> dp=32 x tp=8: 4.8x the pieces).
// Where it crosses the egress ratio is recorded and held at what version 11
// reaches (a regression guard, not a bound over all plans: a holder host
// whose devices hold only empty shards counts in the bound as a relay the
// planner does not use).
TEST(PlanRelays, UnevenFleetsKeepTheBusiestNicNearItsBound) {
  std::mt19937_64 rng(20261126);
  const int cases = scaled_cases(20000);
  int eligible = 0, crossed = 0, egress_above = 0, refused = 0, device_traded = 0;
  double worst = 0, worst_egress = 0, worst_traded = 0;
  for (int c = 0; c < cases; ++c) {
    Fleet fleet = uneven_fleet(rng);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + describe(fleet));
    const PlanStats st = global_stats(fleet, &refused);
    std::set<int32_t> source_hosts(fleet.hosts.begin(), fleet.hosts.begin() + fleet.holders);
    if (source_hosts.size() < 2 || !fleet.large()) continue;
    ++eligible;
    const double nic = busiest_nic_ratio(st);
    EXPECT_LE(nic, 1.05) << std::max(st.max_host_send_bytes, st.max_host_recv_bytes)
                         << " bytes, bounds " << st.lower_bound_max_host_send_bytes << " "
                         << st.lower_bound_max_host_recv_bytes;
    worst = std::max(worst, nic);
    // Relayed across hosts: a forward from one receiving host to another.
    if (fleet.receiving < 2 || !relays_across(fleet, st)) continue;
    ++crossed;
    double egress = PlanStats::ratio(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes);
    if (egress > 1.05) {
      const int before = device_traded;
      const PlanStats h = without_device_rule(fleet, st, &device_traded);
      if (device_traded > before) {
        worst_traded = std::max(worst_traded, egress);
        if (!relays_across(fleet, h)) continue;
        egress = PlanStats::ratio(h.max_host_send_bytes, h.lower_bound_max_host_send_bytes);
      }
    }
    egress_above += egress > 1.05;
    worst_egress = std::max(worst_egress, egress);
  }
  std::printf(
      "busiest NIC within 1.05x of its bound on %d eligible cases of %d (%d replanned without a "
      "staging budget), worst %.3f; %d relayed across hosts, egress alone above 1.05x on %d of "
      "them, worst %.3f (without the device rule; it crosses %d more above, egress at most "
      "%.3fx, each with a lower estimate)\n",
      eligible, cases, refused, worst, crossed, egress_above, worst_egress, device_traded,
      worst_traded);
  EXPECT_GE(eligible, least_covered(8000));
  EXPECT_GE(crossed, least_covered(2000));
  EXPECT_LE(egress_above, 55);  // 50
  EXPECT_LE(worst_egress, 1.3);
}

// A sample of the uneven fleets executed and checked as
// RandomFleetsAreExactAndMeetTheHostBounds does (oracle after every stage,
// each process's part, determinism, staging budget).
TEST(PlanRelays, UnevenFleetsAreExact) {
  std::mt19937_64 rng(20261127);
  int crossed = 0;
  for (int c = 0; c < scaled_cases(80); ++c) {
    const Fleet fleet = uneven_fleet(rng);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + describe(fleet));
    const PlanStats st = check_fleet(fleet);
    if (::testing::Test::HasFailure()) return;
    crossed +=
        fleet.receiving >= 2 && st.forwarded_bytes > 0 && (fleet.members == 1 || st.stages == 3);
  }
  EXPECT_GE(crossed, least_covered(15));
}

// Where single-hop already loads no holder host above what each receiving
// host takes in (FSDP shards, one device each, on 8 hosts feeding dp=2 x
// tp=2 on 2 other hosts: each holder host sends 2 x V / 8), nothing crosses:
// no relay between hosts, the plan of version 10.
TEST(PlanRelays, BalancedHoldersStaySingleHop) {
  std::vector<int32_t> hosts;
  for (int32_t d = 0; d < 16; ++d) hosts.push_back(d / 2);
  for (int32_t d = 0; d < 4; ++d) hosts.push_back(8 + d / 2);
  const PlanInput in =
      one_tensor({512, 256}, DType::kBF16, named(mesh({"fsdp"}, {16}, 0), {{"fsdp"}, {}}),
                 named(mesh({"dp", "tp"}, {2, 2}, 16), {{}, {"tp"}}), hosts);
  const Plan plan = make_plan(in);
  const PlanStats& st = plan.stats();
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs)
      EXPECT_FALSE(m.stage > 0 &&
                   in.topology.info(m.src_device).host != in.topology.info(m.dst_device).host)
          << "a relay across hosts";
  EXPECT_EQ(st.stages, 1);
  const int64_t V = 512 * 256 * 2;
  EXPECT_EQ(st.max_host_recv_bytes, V);
  EXPECT_EQ(st.max_host_send_bytes, 2 * V / 8);
  // One host holding 3/4 of the tensor (the shards of 12 of the 16 devices
  // moved onto host 0): single-hop would send 1.5 V from host 0; the relay
  // across the 2 receiving hosts keeps the busiest NIC at V.
  std::vector<int32_t> skewed = hosts;
  for (int32_t d = 0; d < 12; ++d) skewed[static_cast<size_t>(d)] = 0;
  PlanInput uneven = in;
  uneven.topology =
      one_tensor({512, 256}, DType::kBF16, named(mesh({"fsdp"}, {16}, 0), {{"fsdp"}, {}}),
                 named(mesh({"dp", "tp"}, {2, 2}, 16), {{}, {"tp"}}), skewed)
          .topology;
  const Plan up = make_plan(uneven);
  EXPECT_EQ(std::max(up.stats().max_host_send_bytes, up.stats().max_host_recv_bytes), V);
  EXPECT_TRUE(relays_across(uneven));
  PlanInput single = uneven;
  single.options.relays = false;
  EXPECT_GE(make_plan(single, {PlanScope::kGlobal}).stats().max_host_send_bytes, 3 * V / 2);
  OracleBuffers buffers = fill_sources(up);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(up, views);
  EXPECT_TRUE(check_destinations(up, buffers).ok());
}

// One holder feeding 8 hosts: a tree (or scatter then all-gather) sends the
// tensor once.
TEST(PlanBounds, OneHolderSendsOnceOverAllPlans) {
  std::vector<int32_t> hosts(9);
  for (int32_t d = 0; d < 9; ++d) hosts[static_cast<size_t>(d)] = d;
  const PlanInput in = one_tensor({4096, 4096}, DType::kF32, named(mesh({"a"}, {1}, 0), {{}, {}}),
                                  named(mesh({"r"}, {8}, 1), {{}, {}}), hosts);
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_max_send_bytes, 64 * kMiB);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, 64 * kMiB);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 8 * 64 * kMiB);  // every host takes it in
  // Relays across hosts: the holder sends it once, in parts, each entering
  // one host and crossing from there to the others.
  EXPECT_EQ(st.max_send_bytes, 64 * kMiB);
  EXPECT_EQ(st.max_host_send_bytes, 64 * kMiB);
  EXPECT_EQ(st.cross_host_bytes, 8 * 64 * kMiB);
  EXPECT_EQ(st.stages, 2);
  PlanInput single = in;
  single.options.relays = false;
  EXPECT_EQ(make_plan(single, {PlanScope::kGlobal}).stats().max_send_bytes, 8 * 64 * kMiB);
}

// psum over dp=16, one device per host: a device needs one reduced value
// per element, not every summand; an element of 16 summands needed on the
// 16 devices takes at least 16 + 16 - 2 = 30 messages (bounds.h), 120 MiB,
// 7.5 MiB a device and a host: what reduce-scatter then gather moves.
TEST(PlanBounds, PartialSumNeedsOneValuePerElement) {
  std::vector<int32_t> hosts(16);
  for (int32_t d = 0; d < 16; ++d) hosts[static_cast<size_t>(d)] = d;
  auto m = mesh({"dp"}, {16}, 0);
  const PlanInput in =
      one_tensor({1024, 1024}, DType::kF32, named(m, {{}, {}}, {"dp"}), named(m, {{}, {}}), hosts);
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_network_bytes, 120 * kMiB);
  EXPECT_EQ(st.lower_bound_max_recv_bytes, 7 * kMiB + kMiB / 2);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, 7 * kMiB + kMiB / 2);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 120 * kMiB);
  // Reduce-scatter then gather: each device reduces a 16th from the 15
  // other summands, then gathers the 15 other reduced 16ths.
  EXPECT_EQ(st.network_bytes, 120 * kMiB);
  EXPECT_EQ(st.max_recv_bytes, 7 * kMiB + kMiB / 2);
  EXPECT_EQ(st.forwarded_bytes, 60 * kMiB);
  EXPECT_EQ(st.stages, 2);
  PlanInput single = in;
  single.options.reduce_scatter = false;
  const PlanStats one = make_plan(single, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(one.network_bytes, 960 * kMiB);  // 15 summands to each of 16
  EXPECT_EQ(one.stages, 1);
  // Verified element by element.
  PlanInput small =
      one_tensor({256, 96}, DType::kBF16, named(m, {{}, {}}, {"dp"}), named(m, {{}, {}}), hosts);
  small.options.alpha_seconds = 0;  // parts as small as 4 KiB
  const Plan plan = make_plan(small);
  // 12 parts of 4 KiB, fewer than the 16 hosts: each is gathered along a
  // chain of the 16 hosts (planner version 14), 15 hops after its reducer.
  EXPECT_EQ(plan.stats().stages, 16);
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views);
  EXPECT_TRUE(check_destinations(plan, buffers).ok());
}

// psum over 4 hosts of 2 devices each, replicated destination: the
// reduce-scatter's gather enters each host once (the reducer sends its
// reduced part to its host mate and to one leader per other host, which
// fans it out), not once per device.
TEST(PlanBounds, PartialSumGatherEntersEachHostOnce) {
  std::vector<int32_t> hosts(8);
  for (int32_t d = 0; d < 8; ++d) hosts[static_cast<size_t>(d)] = d / 2;
  auto m = mesh({"dp", "k"}, {4, 2}, 0);
  PlanInput in =
      one_tensor({256, 64}, DType::kF32, named(m, {{}, {}}, {"dp"}), named(m, {{}, {}}), hosts);
  in.options.alpha_seconds = 0;  // parts as small as 4 KiB
  const int64_t V = 256 * 64 * 4;
  const Plan plan = make_plan(in);
  const PlanStats& st = plan.stats();
  // Stage 0: each of the 8 parts' reducer takes in the 3 summands of other
  // hosts; then each reduced part crosses to the 3 other hosts once.
  EXPECT_EQ(st.cross_host_bytes, 3 * V + 3 * V);
  // The bound over all plans (an all-reduce over the 4 hosts, each alone
  // holding its summand: 3 first messages and 3 needer hosts after the
  // first to know, bounds.h): this plan meets it.
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 6 * V);
  EXPECT_EQ(st.stages, 3);
  EXPECT_EQ(st.max_host_recv_bytes, 3 * V / 4 + 3 * V / 4);
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views);
  EXPECT_TRUE(check_destinations(plan, buffers).ok());
  for (int32_t p : plan.processes()) {
    const Plan one = make_plan(in, {PlanScope::kProcess, p, false});
    ASSERT_EQ(one.part(p), plan.part(p)) << "process " << p;
  }
  // Without relays the gather goes to every device of every other host.
  PlanInput direct = in;
  direct.options.relays = false;
  const PlanStats d = make_plan(direct, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(d.cross_host_bytes, 3 * V + 6 * V);
  EXPECT_EQ(d.stages, 2);
}

// The reduce-scatter's reducers go round-robin over the cell's hosts, then
// over the entries within a host (planner version 14): 4 parts of a cell of
// 2 hosts x 3 devices are reduced 2 on each host, so each host sends 2 reduced
// parts across (rotating over the cell's entries in order, one host reduced 3
// and sent 3 quarters of the tensor, the other one quarter).
TEST(PlanBounds, ReducersSpreadOverTheCellsHosts) {
  const std::vector<int32_t> hosts = {0, 0, 1, 1, 1, 2, 2, 2};
  PlanInput in = one_tensor({4500}, DType::kF32, named(mesh({"a"}, {2}, 0), {{}}, {"a"}),
                            named(mesh({"r", "k"}, {2, 3}, 2), {{}}), hosts);
  in.options.alpha_seconds = 0;  // parts of at least 4 KiB: 4 of 18,000 bytes
  const int64_t V = 4500 * 4;
  const Plan plan = make_plan(in);
  std::map<int32_t, int64_t> sent;  // cross-host bytes per sending host
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs) {
      const int32_t from = in.topology.info(m.src_device).host;
      if (from != in.topology.info(m.dst_device).host) sent[from] += m.bytes;
    }
  EXPECT_EQ(sent[1], V / 2);
  EXPECT_EQ(sent[2], V / 2);
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views);
  EXPECT_TRUE(check_destinations(plan, buffers).ok());
}

// A one-part psum (256 bytes, α = 0: below two reduce-scatter parts) from 2
// holders on host 0 to H hosts of one device: gathered along a chain of the
// H hosts while it has at most Enumerator::kMaxGatherLevels (32) hops, every
// NIC at its bound; past that along the tree of least fan-out within 32
// levels (40 hosts: fan-out 2, 5 levels), so a plan's stages stay bounded.
TEST(PlanBounds, PsumGatherChainsStopAt32Hops) {
  for (const int32_t H : {33, 40}) {
    SCOPED_TRACE("hosts " + std::to_string(H));
    std::vector<int32_t> hosts = {0, 0};
    for (int32_t h = 1; h <= H; ++h) hosts.push_back(h);
    PlanInput in = one_tensor({64}, DType::kF32, named(mesh({"a"}, {2}, 0), {{}}, {"a"}),
                              named(mesh({"r"}, {H}, 2), {{}}), hosts);
    in.options.alpha_seconds = 0;
    const Plan plan = make_plan(in);
    const PlanStats& st = plan.stats();
    // Stage 0: the holders' summands into scratch; 1: the scratch to the
    // reducer; then one stage per level.
    EXPECT_EQ(st.stages, H == 33 ? 2 + 32 : 2 + 5);
    EXPECT_EQ(st.max_host_send_bytes, H == 33 ? 256 : 512);
    EXPECT_EQ(st.max_host_recv_bytes, 256);
    OracleBuffers buffers = fill_sources(plan);
    const std::vector<TensorBuffers> views = buffers.views();
    execute_host(plan, views);
    EXPECT_TRUE(check_destinations(plan, buffers).ok());
  }
}

// Replicas of a shard on one host share the sending: each of the 8 source
// devices sends a quarter of what tp=4 needs from its shard.
TEST(PlanBounds, ReplicasOnOneHostShareTheLoad) {
  PlanInput in =
      one_tensor({8192, 8192}, DType::kF32, named(mesh({"r", "s"}, {4, 2}, 0), {{"s"}, {}}),
                 named(mesh({"tp"}, {4}, 8), {{"tp"}, {}}), std::vector<int32_t>(12, 0));
  PlanInput one_process = in;
  one_process.topology = Topology();
  for (int64_t d = 0; d < 12; ++d) one_process.topology.add({d, 0, 0, static_cast<int32_t>(d)});
  for (const PlanInput* p : {&in, &one_process}) {
    const PlanStats st = make_plan(*p, {PlanScope::kGlobal}).stats();
    EXPECT_EQ(st.lower_bound_max_send_bytes, 32 * kMiB);
    EXPECT_EQ(st.max_send_bytes, 32 * kMiB) << "split across the replicas on the host";
  }
}

// Relays for explicit destination layouts (checkpoint-style boxes): the
// entries with equal boxes form a cell and relay like a tiled cell — inside
// hosts, and across hosts when few holders feed many hosts. Fleets as in
// RandomFleetsAreExactAndMeetTheHostBounds (holders on 1-2 hosts, 3-7
// receiving hosts of 1-3 devices), destinations given as boxes: the whole
// tensor on every device, row blocks cut at random points (block m on
// member m of every host: replicas across hosts, disjoint blocks), or the
// same blocks widened by a halo (distinct boxes that overlap). Sources named
// (whole, sharded, psum over the holders: reduce-scatter) or the same as
// boxes. Every plan is checked against the oracle through the in-process
// engine, per process, and for its cross-host bytes: the bound, overlapping
// boxes included (their overlap is refined into fragments, each relayed
// once per host). The whole
// tensor replicated as boxes gets the plan of the same tiled destination.
TEST(PlanRelays, ExplicitFleetsAreExactAndMeetTheHostBounds) {
  std::mt19937_64 rng(20261124);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int relayed = 0, crossed = 0, reduced = 0, overlapping = 0, same_as_tiled = 0;
  const int cases = scaled_cases(150);
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t holders = uni(1, 3), holder_hosts = uni(1, 2);
    const int64_t receiving = uni(3, 7), members = uni(1, 3);
    std::vector<int32_t> hosts;
    for (int64_t d = 0; d < holders; ++d) hosts.push_back(static_cast<int32_t>(d % holder_hosts));
    for (int64_t i = 0; i < receiving * members; ++i)
      hosts.push_back(static_cast<int32_t>(holder_hosts + i / members));
    const int rank = static_cast<int>(uni(1, 3));
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(uni(5, 90));
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32};
    const DType dtype = dtypes[uni(0, 3)];
    const int src_kind = static_cast<int>(uni(0, 2));  // whole, sharded, partial
    std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
    std::vector<std::string> partial;
    if (src_kind == 1) src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
    if (src_kind == 2 && dtype != DType::kI32) partial = {"a"};
    const auto dst_mesh = mesh({"r", "k"}, {receiving, members}, holders);
    PlanInput in = one_tensor(
        shape, dtype, named(mesh({"a"}, {holders}, 0), src_dims, partial),
        named(dst_mesh, std::vector<std::vector<std::string>>(static_cast<size_t>(rank))), hosts);
    TensorSpec& t = in.tensors[0];
    const PlanInput tiled = in;
    // Destination boxes: 0 whole, 1 blocks, 2 blocks with a halo.
    const int dst_kind = static_cast<int>(uni(0, 2));
    std::vector<int64_t> cuts = {0, shape[0]};
    for (int64_t m = 1; m < members; ++m) cuts.push_back(uni(0, shape[0]));
    std::sort(cuts.begin(), cuts.end());
    const int64_t halo = dst_kind == 2 ? uni(1, 3) : 0;
    std::vector<LayoutEntry> boxes;
    for (int64_t i = 0; i < receiving * members; ++i) {
      LayoutEntry e;
      e.device = holders + i;
      e.box.rank = rank;
      for (int d = 0; d < rank; ++d) e.box.hi[d] = shape[static_cast<size_t>(d)];
      if (dst_kind > 0) {
        const auto m = static_cast<size_t>(i % members);
        e.box.lo[0] = std::max<int64_t>(0, cuts[m] - halo);
        e.box.hi[0] = std::min(shape[0], cuts[m + 1] + halo);
      }
      boxes.push_back(e);
    }
    t.dst = Layout::from_boxes(shape, boxes, 1, ReduceOp::kSum, "dst");
    if (uni(0, 3) == 0)  // the source as boxes too
      t.src = Layout::from_boxes(shape, t.src.entries(), t.src.num_summands(), t.src.reduce_op(),
                                 "src");
    in.options.split_min_bytes = 256;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 2000, 8000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    const Plan plan = make_plan(in);
    ASSERT_EQ(plan.parts(), make_plan(in).parts()) << "determinism";
    const PlanStats& st = plan.stats();
    relayed += st.forwarded_bytes > 0;
    reduced += t.src.num_summands() > 1 && st.forwarded_bytes > 0;
    bool across = false;
    for (const auto& [p, part] : plan.parts())
      for (const Message& m : part.recvs)
        across |= m.stage > 0 &&
                  in.topology.info(m.src_device).host != in.topology.info(m.dst_device).host;
    crossed += across && partial.empty();
    if (partial.empty()) {
      const bool overlap = testing::overlapping_boxes(t.dst);
      overlapping += overlap && st.forwarded_bytes > 0;
      EXPECT_EQ(st.cross_host_bytes, testing::cell_ingress_bytes(in.topology, t));
      // Overlapping boxes included: their overlap enters each host once.
      EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
      EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
      if (dst_kind == 0) {  // the tiled plan: same cells, same rules
        PlanInput same = tiled;
        same.tensors[0].src = t.src;
        same.options = in.options;
        EXPECT_TRUE(make_plan(same).parts() == plan.parts()) << "the tiled plan";
        ++same_as_tiled;
      }
    }
    for (int32_t p : plan.processes()) {
      const Plan one = make_plan(in, {PlanScope::kProcess, p, false});
      ASSERT_EQ(one.part(p), plan.part(p)) << "process " << p;
    }
    OracleBuffers buffers = fill_sources(plan);
    const std::vector<TensorBuffers> views = buffers.views();
    execute_host(plan, views, {static_cast<int32_t>(uni(1, 3))});
    const OracleReport report = check_destinations(plan, buffers);
    ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches";
  }
  std::printf(
      "%d cases: %d relayed, %d across hosts, %d reduce-scattered, %d with overlapping boxes "
      "relayed, %d equal to the tiled plan\n",
      cases, relayed, crossed, reduced, overlapping, same_as_tiled);
  EXPECT_GT(relayed, cases / 2);
  EXPECT_GT(crossed, cases / 5);
  EXPECT_GT(reduced, cases / 20);
  EXPECT_GT(overlapping, cases / 10);
  EXPECT_GT(same_as_tiled, cases / 10);
}

// ------------------------------------------------ pre-reduction (scratch)

// Calls f(offset in `box`, row-major) for every element of `region` (inside box).
template <class F>
void each_offset(const Box& region, const Box& box, F&& f) {
  if (region.empty()) return;
  std::array<int64_t, kMaxRank> at = region.lo;
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < box.rank; ++d) off = off * box.extent(d) + (at[d] - box.lo[d]);
    f(off);
    int d = region.rank - 1;
    for (; d >= 0; --d) {
      if (++at[d] < region.hi[d]) break;
      at[d] = region.lo[d];
    }
    if (d < 0) return;
  }
}

// The reduction a plan performs, checked without an executor, element by
// element: an element's value is the set of source summands combined into
// it (a bit mask). A stage-0 piece from a source entry brings its summand,
// a piece reading a scratch its set; both combine into what they write (a
// destination entry or a scratch), which must not hold any of those
// summands yet; a piece of a later stage reading a destination entry copies
// its set into an element not written before. Stages run in order; a piece
// must not read what its own or a later stage writes. Each send message must
// be the identical receive message of its destination's part. Scratch must
// be listed, sorted, by the part of its device's process, boxes of one
// (tensor, device) disjoint, each on a device holding the box's summand of
// its tensor, and read once, every element (sent on, to the next scratch or
// the reducer). The chain rule (planner version 13): a scratch element takes
// in at most one piece from another host — the chain's previous link, a
// scratch read in an earlier stage or, in stage 0, a summand — and the rest
// from its own host in stage 0. Returns "" when every destination element
// of every tensor with a whole destination holds every summand once, else
// the first problem.
std::string check_summands(const Plan& plan, std::map<int64_t, int64_t>* scratch_bytes = nullptr) {
  const auto& tensors = plan.tensors();
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint64_t>> dst;  // (tensor, entry)
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int32_t>> written;
  struct Buf {
    Box box;
    std::vector<uint64_t> mask;
    std::vector<int32_t> written;
    std::vector<int32_t> reads, foreign;  // per element: reads, writes from another host
  };
  std::map<std::pair<uint32_t, int64_t>, std::vector<Buf>> scratch;  // (tensor, device)
  for (const auto& [p, part] : plan.parts()) {
    for (size_t i = 0; i < part.scratch.size(); ++i) {
      const Scratch& x = part.scratch[i];
      if (x.tensor >= tensors.size()) return "scratch of an unknown tensor";
      if (plan.topology().info(x.device).process != p) return "scratch on another process";
      if (i > 0) {
        const Scratch& y = part.scratch[i - 1];
        if (std::tie(y.tensor, y.device) > std::tie(x.tensor, x.device) ||
            (std::tie(y.tensor, y.device) == std::tie(x.tensor, x.device) &&
             !std::lexicographical_compare(y.box.lo.begin(), y.box.lo.begin() + y.box.rank,
                                           x.box.lo.begin(), x.box.lo.begin() + x.box.rank)))
          return "scratch not sorted";
      }
      if (x.box.empty()) return "empty scratch";
      const Layout& src = tensors[x.tensor].src;
      bool held = false;
      for (size_t e = 0; e < src.num_entries(); ++e)
        held |= src.device(e) == x.device && intersect(src.box(e), x.box) == x.box;
      if (!held) return "scratch on a device that holds no summand of its box";
      auto& list = scratch[{x.tensor, x.device}];
      for (const Buf& b : list)
        if (!intersect(b.box, x.box).empty()) return "overlapping scratch boxes";
      const auto n = static_cast<size_t>(x.box.volume());
      list.push_back({x.box, std::vector<uint64_t>(n, 0), std::vector<int32_t>(n, -1),
                      std::vector<int32_t>(n, 0), std::vector<int32_t>(n, 0)});
      if (scratch_bytes)
        (*scratch_bytes)[x.device] += x.box.volume() * dtype_size(tensors[x.tensor].dtype);
    }
  }
  auto find_scratch = [&](uint32_t t, int64_t device, const Box& region) -> Buf* {
    auto it = scratch.find({t, device});
    if (it == scratch.end()) return nullptr;
    for (Buf& b : it->second)
      if (intersect(b.box, region) == region) return &b;
    return nullptr;
  };
  auto dst_buf = [&](uint32_t t, uint32_t e) -> std::vector<uint64_t>& {
    auto [it, fresh] = dst.try_emplace({t, e});
    if (fresh) {
      it->second.assign(static_cast<size_t>(tensors[t].dst.box(e).volume()), 0);
      written[{t, e}].assign(it->second.size(), -1);
    }
    return it->second;
  };
  // Pairing.
  std::map<std::tuple<uint32_t, uint32_t, int64_t, int64_t>,
           std::pair<const ProcessPart*, const Message*>>
      recvs;
  uint32_t stages = 0;
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs) {
      recvs[{m.stage, m.round, m.src_device, m.dst_device}] = {&part, &m};
      stages = std::max(stages, m.stage + 1);
    }
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.sends) {
      auto it = recvs.find({m.stage, m.round, m.src_device, m.dst_device});
      if (it == recvs.end()) return "a send without its receive";
      const auto& [rp, rm] = it->second;
      if (rm->num_pieces != m.num_pieces || rm->bytes != m.bytes) return "unpaired message";
      for (uint64_t i = 0; i < m.num_pieces; ++i) {
        const Piece& a = part.send_pieces[m.first_piece + i];
        const Piece& b = rp->recv_pieces[rm->first_piece + i];
        if (a.tensor != b.tensor || a.src_entry != b.src_entry || a.dst_entry != b.dst_entry ||
            !(plan.region(part, a) == plan.region(*rp, b)))
          return "message pieces differ between its ends";
      }
    }
  // Reads to check once every write is known: (buffer, region, stage).
  struct Read {
    std::vector<int32_t>* written;
    Box box, region;
    uint32_t stage;
  };
  std::vector<Read> reads;
  std::string problem;
  auto apply = [&](const ProcessPart& part, const Piece& piece, uint32_t stage, int64_t sdev,
                   int64_t ddev) {
    const Box region = plan.region(part, piece);
    const TensorSpec& t = tensors[piece.tensor];
    std::vector<uint64_t> value(static_cast<size_t>(region.volume()), 0);
    bool copy = false;
    if (piece.src_entry == kScratchEntry) {
      Buf* b = find_scratch(piece.tensor, sdev, region);
      if (!b) return problem = "a piece reads no scratch", void();
      size_t i = 0;
      each_offset(region, b->box, [&](int64_t o) {
        value[i++] = b->mask[static_cast<size_t>(o)];
        ++b->reads[static_cast<size_t>(o)];
      });
      reads.push_back({&b->written, b->box, region, stage});
    } else if (reads_source(piece, stage)) {  // stage 0, or a late summand into a scratch
      if (piece.src_entry >= t.src.num_entries() || t.src.device(piece.src_entry) != sdev)
        return problem = "a summand from no source entry of its device", void();
      std::fill(value.begin(), value.end(), uint64_t{1} << t.src.summand(piece.src_entry));
    } else {
      if (piece.src_entry >= t.dst.num_entries() || t.dst.device(piece.src_entry) != sdev)
        return problem = "a relay from no destination entry of its device", void();
      const Box box = t.dst.box(piece.src_entry);
      std::vector<uint64_t>& from = dst_buf(piece.tensor, piece.src_entry);
      size_t i = 0;
      each_offset(region, box, [&](int64_t o) { value[i++] = from[static_cast<size_t>(o)]; });
      reads.push_back({&written[{piece.tensor, piece.src_entry}], box, region, stage});
      copy = true;
    }
    std::vector<uint64_t>* to;
    std::vector<int32_t>* wr;
    Box box;
    if (piece.dst_entry == kScratchEntry) {
      Buf* b = find_scratch(piece.tensor, ddev, region);
      if (!b) return problem = "a piece writes no scratch", void();
      // The chain rule: summands from its own host (in stage 0, or in bands
      // under a budget in any stage: reads_source); from another host, a
      // chain's link (a scratch, or a first host's one summand), once.
      if (plan.topology().info(sdev).host != plan.topology().info(ddev).host) {
        each_offset(region, b->box, [&](int64_t o) {
          if (++b->foreign[static_cast<size_t>(o)] > 1)
            problem = "a scratch takes in two links from other hosts";
        });
      } else if (piece.src_entry == kScratchEntry) {
        return problem = "a scratch written from another scratch on its own host", void();
      }
      to = &b->mask;
      wr = &b->written;
      box = b->box;
    } else {
      if (piece.dst_entry >= t.dst.num_entries() || t.dst.device(piece.dst_entry) != ddev)
        return problem = "a piece into no destination entry of its device", void();
      to = &dst_buf(piece.tensor, piece.dst_entry);
      wr = &written[{piece.tensor, piece.dst_entry}];
      box = t.dst.box(piece.dst_entry);
    }
    size_t i = 0;
    each_offset(region, box, [&](int64_t o) {
      uint64_t& x = (*to)[static_cast<size_t>(o)];
      const uint64_t v = value[i++];
      if (copy ? x != 0 : (x & v) != 0) problem = "a summand combined twice";
      x |= v;
      (*wr)[static_cast<size_t>(o)] =
          std::max((*wr)[static_cast<size_t>(o)], static_cast<int32_t>(stage));
    });
  };
  for (uint32_t s = 0; s < std::max<uint32_t>(stages, 1) && problem.empty(); ++s)
    for (const auto& [p, part] : plan.parts()) {
      if (s == 0)
        for (const Piece& piece : part.local) {
          const TensorSpec& t = tensors[piece.tensor];
          const int64_t dev = t.src.device(piece.src_entry);
          apply(part, piece, 0, dev, dev);
        }
      for (const Message& m : part.recvs)
        if (m.stage == s)
          for (uint64_t i = 0; i < m.num_pieces; ++i) {
            const Piece& piece = part.recv_pieces[m.first_piece + i];
            apply(part, piece, s, m.src_device, m.dst_device);
          }
    }
  if (!problem.empty()) return problem;
  for (const Read& r : reads) {
    each_offset(r.region, r.box, [&](int64_t o) {
      if ((*r.written)[static_cast<size_t>(o)] >= static_cast<int32_t>(r.stage))
        problem = "a piece reads what its own or a later stage writes";
    });
  }
  if (!problem.empty()) return problem;
  for (const auto& [key, list] : scratch)
    for (const Buf& b : list)
      for (int32_t n : b.reads)
        if (n != 1) return "a scratch element read " + std::to_string(n) + " times";
  for (uint32_t ti = 0; ti < tensors.size(); ++ti) {
    const TensorSpec& t = tensors[ti];
    if (t.dst.partial()) continue;
    const uint64_t all = (uint64_t{1} << t.src.num_summands()) - 1;
    for (uint32_t e = 0; e < t.dst.num_entries(); ++e)
      for (uint64_t v : dst_buf(ti, e))
        if (v != all)
          return "tensor " + std::to_string(ti) + " entry " + std::to_string(e) +
                 " lacks a summand";
  }
  return "";
}

// Partial sources over many holders: 2-8 summands (one per holder device)
// on 1-3 holder hosts, to 1-4 receiving hosts of 1-3 devices, destinations
// replicated or sharded inside each host, uneven shapes, staging budgets.
struct PsumFleet {
  int64_t holders = 0, holder_hosts = 0, receiving = 0, members = 0;
  std::vector<int32_t> hosts;
  PlanInput in;
  int64_t bytes = 0;
};
// `few`: few parts and many receiving hosts instead — 3-7 receiving hosts
// and tensors of a few hundred bytes to a few tens of KiB (cells below two
// or a few reduce-scatter parts: one part, or parts fewer than the hosts,
// gathered along a chain or tree of hosts).
// `sharded`: the summands are themselves sharded along dimension 0 over
// x = 2-3 devices (`holders` counts the source mesh's devices, summands x
// x), each device on a random holder host, so the regions of one
// destination cell have different holder sets: some pre-reduce or chain
// and some do not, and each destination entry's reductions must still end
// before the gather copies from or into it (Enumerator::cell_shift).
PsumFleet psum_fleet(std::mt19937_64& rng, bool few = false, bool sharded = false) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  PsumFleet f;
  f.holder_hosts = uni(1, 3);
  f.holders = uni(std::max<int64_t>(2, f.holder_hosts), 8);
  const int64_t x = sharded ? uni(2, 3) : 1;
  if (sharded) f.holders = uni(2, 4) * x;
  f.receiving = few ? uni(3, 7) : uni(1, 4);
  f.members = uni(1, 3);
  for (int64_t d = 0; d < f.holders; ++d)
    f.hosts.push_back(static_cast<int32_t>(uni(0, 1) && !sharded ? d % f.holder_hosts
                                                                 : uni(0, f.holder_hosts - 1)));
  for (int64_t i = 0; i < f.receiving * f.members; ++i)
    f.hosts.push_back(static_cast<int32_t>(f.holder_hosts + i / f.members));
  const int rank = static_cast<int>(uni(1, 3));
  std::vector<int64_t> shape;
  for (int d = 0; d < rank; ++d)
    shape.push_back(few         ? (rank == 1   ? uni(50, 6000)
                                   : rank == 2 ? uni(4, 80)
                                               : uni(3, 18))
                    : rank == 1 ? uni(200, 40000)
                    : rank == 2 ? uni(8, 200)
                                : uni(4, 34));
  const DType dtype = uni(0, 1) ? DType::kF32 : DType::kBF16;
  std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
  if (f.members > 1 && uni(0, 1) == 1) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
  std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
  if (sharded) {
    src_dims[0] = {"x"};
    shape[0] = std::max(shape[0], x);
  }
  f.in = one_tensor(
      shape, dtype,
      named(sharded ? mesh({"a", "x"}, {f.holders / x, x}, 0) : mesh({"a"}, {f.holders}, 0),
            src_dims, {"a"}),
      named(mesh({"r", "k"}, {f.receiving, f.members}, f.holders), dst_dims), f.hosts);
  f.in.options.split_min_bytes = 256;
  f.in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
  const int64_t budgets[] = {0, int64_t{64} << 10, int64_t{1} << 20};
  f.in.options.staging_budget_bytes = budgets[uni(0, 2)];
  f.bytes = dtype_size(dtype);
  for (int64_t x : shape) f.bytes *= x;
  return f;
}

// Every device's scratch memory (its buffers placed by their stages,
// plan/scratch_layout.h: the block the engine allocates for the whole
// execution) plus what it stages in any (stage, round) — each message's
// bytes at both its ends — stays below the staging budget. (`held`, the
// raw bytes of each device's buffers from check_summands, bounds it from
// above.)
void expect_within_budget(const Plan& plan, std::map<int64_t, int64_t>& held, int64_t budget) {
  const std::vector<planning::ScratchLife> lives =
      planning::scratch_lives(plan.parts(), plan.tensors());
  std::map<int64_t, int64_t> scratch = planning::place_scratch(lives).peak;
  for (const auto& [d, b] : scratch) EXPECT_LE(b, held[d] + 8 * static_cast<int64_t>(lives.size()));
  std::map<std::tuple<int64_t, uint32_t, uint32_t>, int64_t> staged;
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs) {
      staged[{m.src_device, m.stage, m.round}] += m.bytes;
      staged[{m.dst_device, m.stage, m.round}] += m.bytes;
    }
  for (const auto& [k, bytes] : staged) EXPECT_LT(bytes + scratch[std::get<0>(k)], budget);
}

// Scratch memory against the placement the engine takes
// (plan/scratch_layout.h): the statistics' figure is that placement's peak
// over the parts; no two buffers of a device whose stages overlap share a
// byte; and the figure lies between the most raw bytes live in one stage on
// one device and the 8-aligned sum of one device's buffers.
void expect_scratch_placed(const Plan& plan) {
  const std::vector<planning::ScratchLife> lives =
      planning::scratch_lives(plan.parts(), plan.tensors());
  const planning::ScratchPlacement placed = planning::place_scratch(lives);
  int64_t most = 0;
  for (const auto& [d, b] : placed.peak) most = std::max(most, b);
  EXPECT_EQ(plan.stats().max_scratch_bytes, most);
  std::map<int64_t, std::vector<size_t>> by_device;
  for (size_t i = 0; i < lives.size(); ++i) by_device[lives[i].device].push_back(i);
  int64_t live_most = 0, sum_most = 0;
  for (const auto& [d, idx] : by_device) {
    int64_t sum = 0;
    uint32_t top = 0;
    for (size_t i : idx) {
      sum += (lives[i].bytes + 7) / 8 * 8;
      top = std::max(top, lives[i].last);
    }
    sum_most = std::max(sum_most, sum);
    for (uint32_t st = 0; st <= top; ++st) {
      int64_t live = 0;
      for (size_t i : idx) live += lives[i].first <= st && st <= lives[i].last ? lives[i].bytes : 0;
      live_most = std::max(live_most, live);
    }
    for (size_t a = 0; a < idx.size(); ++a)
      for (size_t b = a + 1; b < idx.size(); ++b) {
        const planning::ScratchLife &x = lives[idx[a]], &y = lives[idx[b]];
        if (x.last < y.first || y.last < x.first) continue;
        const int64_t xo = placed.offset[idx[a]], yo = placed.offset[idx[b]];
        EXPECT_TRUE(xo + x.bytes <= yo || yo + y.bytes <= xo)
            << "device " << d << ": scratch of stages " << x.first << "-" << x.last << " at " << xo
            << " and of stages " << y.first << "-" << y.last << " at " << yo << " overlap";
      }
  }
  EXPECT_GE(most, live_most);
  EXPECT_LE(most, sum_most);
}

// Whether a plan has a chain's link across hosts into a scratch (a scratch
// or, in stage 0, a summand written into a scratch on another host).
bool has_chain_link(const Plan& plan) {
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs)
      for (uint64_t i = 0; i < m.num_pieces; ++i)
        if (part.recv_pieces[m.first_piece + i].dst_entry == kScratchEntry &&
            plan.topology().info(m.src_device).host != plan.topology().info(m.dst_device).host)
          return true;
  return false;
}

// Whether some destination entry of a partial tensor takes contributions
// (summands in stage 0, a scratch in a later stage) in different stages:
// the layouts whose reductions, without Enumerator::cell_shift, could end
// after the gather copied from or into the entry.
bool stages_differ_within_a_cell(const Plan& plan) {
  std::map<std::pair<uint32_t, uint32_t>, std::set<uint32_t>> stages;  // (tensor, entry)
  for (const auto& [p, part] : plan.parts()) {
    for (const Piece& x : part.local)
      if (x.dst_entry != kScratchEntry) stages[{x.tensor, x.dst_entry}].insert(0);
    for (const Message& m : part.recvs)
      for (uint64_t i = 0; i < m.num_pieces; ++i) {
        const Piece& x = part.recv_pieces[m.first_piece + i];
        if (x.dst_entry != kScratchEntry && (m.stage == 0 || x.src_entry == kScratchEntry))
          stages[{x.tensor, x.dst_entry}].insert(m.stage);
      }
  }
  for (const auto& [k, s] : stages)
    if (s.size() > 1) return true;
  return false;
}

// Every plan of the partial fleets reduces exactly (through the oracle,
// stage by stage, and check_summands: each destination element gets every
// summand once, through the holder hosts' scratches in stage order — the
// chain rule —, scratch listed, placed on its holders and read once), is
// deterministic, has parts equal to each process's own plan, keeps scratch
// plus staging below the budget, and reports its largest scratch
// (PlanStats::max_scratch_bytes). Summands on 2-3 holder hosts chain
// (planner version 13) where the α–β model picks it.
// Then 80 fleets have few parts and many receiving hosts (psum_fleet's
// `few`), whose gathers run along chains or trees of hosts, and the last 80
// sharded summands (psum_fleet's `sharded`), half of them with few parts.
TEST(PlanScratch, PsumFleetsPreReduceOnTheHoldersHosts) {
  std::mt19937_64 rng(20261124), few_rng(20261124 + 14), sharded_rng(20261124 + 15);
  const int cases = scaled_cases(200), few_cases = scaled_cases(80),
            sharded_cases = scaled_cases(80);
  int pre = 0, four = 0, hops = 0, chained = 0, longer = 0, uneven = 0;
  for (int c = 0; c < cases + few_cases + sharded_cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const bool sharded = c >= cases + few_cases;
    const PsumFleet f = c < cases ? psum_fleet(rng)
                        : sharded ? psum_fleet(sharded_rng, c % 2 == 1, true)
                                  : psum_fleet(few_rng, true);
    const Plan plan = make_plan(f.in);
    ASSERT_EQ(plan.parts(), make_plan(f.in).parts()) << "determinism";
    for (int32_t p : plan.processes())
      ASSERT_EQ(make_plan(f.in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
          << "process " << p;
    std::map<int64_t, int64_t> scratch;
    ASSERT_EQ(check_summands(plan, &scratch), "");
    ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, static_cast<int32_t>(1 + c % 3)));
    const PlanStats& st = plan.stats();
    int64_t most = 0;
    for (auto [d, b] : scratch) most = std::max(most, b);
    expect_scratch_placed(plan);
    pre += most > 0;
    four += st.stages == 4;
    const bool chain = has_chain_link(plan);
    chained += chain;
    longer += st.stages > 4;
    const std::set<int32_t> holder_hosts(f.hosts.begin(), f.hosts.begin() + f.holders);
    if (sharded) uneven += stages_differ_within_a_cell(plan);
    if (holder_hosts.size() >= 2 && st.stages > 1 && f.in.options.alpha_seconds == 0 &&
        f.in.options.staging_budget_bytes == 0 && !sharded) {
      // Reduce-scatter (more than one stage) with no α and summands on 2
      // or more hosts, none of them a reducer's: every part chains.
      EXPECT_TRUE(chain) << "no chain across " << holder_hosts.size() << " holder hosts";
    }
    // A gather hop: a device that took a reduced part in from another
    // receiving host forwards across hosts later (a chain or tree).
    std::map<int64_t, uint32_t> relayed_in;  // device -> first such stage
    std::vector<const Message*> across;
    for (const auto& [p, part] : plan.parts())
      for (const Message& m : part.recvs) {
        const int32_t from = f.in.topology.info(m.src_device).host;
        if (m.stage == 0 || from == f.in.topology.info(m.dst_device).host) continue;
        across.push_back(&m);
        if (m.src_device >= f.holders) {
          auto [it, fresh] = relayed_in.try_emplace(m.dst_device, m.stage);
          if (!fresh) it->second = std::min(it->second, m.stage);
        }
      }
    bool hop = false;
    for (const Message* m : across) {
      auto it = relayed_in.find(m->src_device);
      hop |= it != relayed_in.end() && it->second < m->stage;
    }
    hops += hop;
    const int64_t budget = f.in.options.staging_budget_bytes;
    if (budget > 0) expect_within_budget(plan, scratch, budget);
  }
  std::printf(
      "%d psum fleets: %d pre-reduce, %d in 4 stages, %d gathered along a chain or tree, %d "
      "chain across holder hosts, %d in more than 4 stages; %d of %d sharded with contributions "
      "into one destination entry in different stages\n",
      cases + few_cases + sharded_cases, pre, four, hops, chained, longer, uneven, sharded_cases);
  EXPECT_GT(pre, cases / 3);
  EXPECT_GT(four, cases / 10);
  EXPECT_GT(hops, few_cases / 3);
  EXPECT_GT(chained, cases / 10);
  EXPECT_GT(longer, cases / 20);
  // About 1 in 13 sharded fleets has it (6 of 80): below full scale the
  // sample may hold none.
  if (RESHARD_TEST_SCALE >= 100) {
    EXPECT_GE(uneven, sharded_cases / 16);
  }
}

// Summands on 3 hosts that hold no destination (one each) and on a host of
// the destination cell (2): the 3 chain (planner version 13), scratch into
// scratch, while the cell's host, which takes in the gather and reduces parts
// of its own, never takes in a chain's link: its summands go to the reducers
// on its host in stage 0, and as a star (its scratch in stage 1) to those
// on the other host. Exact after every stage, the same process parts.
TEST(PlanScratch, ChainSkipsHoldersOnTheCellsHosts) {
  const std::vector<int32_t> hosts = {0, 1, 2, 3, 3, 3, 3, 4, 4};
  PlanInput in = one_tensor({96, 200}, DType::kF32, named(mesh({"a"}, {5}, 0), {{}, {}}, {"a"}),
                            named(mesh({"r", "k"}, {2, 2}, 5), {{}, {}}), hosts);
  in.options.alpha_seconds = 0;
  const Plan plan = make_plan(in);
  const PlanStats& st = plan.stats();
  EXPECT_EQ(st.stages, 5);  // links in stages 0-2, the gather in 3-4
  EXPECT_TRUE(has_chain_link(plan));
  ASSERT_EQ(check_summands(plan), "");
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs)
      for (uint64_t i = 0; i < m.num_pieces; ++i) {
        if (part.recv_pieces[m.first_piece + i].dst_entry == kScratchEntry &&
            plan.topology().info(m.src_device).host != plan.topology().info(m.dst_device).host) {
          EXPECT_LT(plan.topology().info(m.dst_device).host, 3) << "a link into the cell's host";
        }
      }
  ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
  for (int32_t p : plan.processes())
    ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
        << "process " << p;
}

// The α–β estimate of `fleet`'s plan (global statistics, the fleet's
// options as global_stats left them) with the reduce route's choices
// overridden (planning::ChoiceOverride), or single-hop (reduce-scatter off).
double estimate_with(const Fleet& fleet, planning::ChoiceOverride o, bool single_hop = false) {
  PlanInput in = fleet.in;
  in.options.reduce_scatter = !single_hop;
  o.single_hop = 0;
  planning::choice_override() = o;
  const double cost = make_plan(in, {PlanScope::kGlobal}).stats().cost_seconds;
  planning::choice_override() = {.single_hop = 0};
  return cost;
}

// The busiest NIC of partial sources with at least 2 holders (the partial
// fleets of RandomFleetsKeepTheBusiestNicNearItsBound, left out there):
// max(host send, host receive) against the larger of their bounds, and a
// host's egress alone against its bound, on the 20,000 fleets of that test.
// With no staging budget below twice the tensor (so the holders
// pre-reduce), every case with α = 0 is within 1.05x: holders on one host
// (planner version 14: cells below two parts of the reduce-scatter's floor
// are reduced as one part, and parts fewer than the cell's hosts are
// gathered along a chain, each host taking a part in once and forwarding it
// once; version 12 left 1,547 of all 1,645 above), and holders on 2 hosts
// (planner version 13: the holder hosts chain, so the reducer's host takes
// each part in once instead of once per holder host). With α > 0 the α–β
// model may keep single-hop, a tree of fan-out above 1 or, with holders on
// 2 hosts, the star (fewer stages, more bytes on a NIC): there the chosen
// plan's estimate (PlanStats::cost_seconds) is asserted no worse than the
// alternatives' — single-hop, one part, the chain and the star — planned
// with the choice overridden, within 10%: the route decides from its cell
// alone (a pure function of the cell, §2.8 of docs/design.md), with a model
// of the stages' busiest devices, while the estimate is the whole plan's
// (the other cells' stages overlap), so near-ties may fall either way.
// A budget below twice the tensor (counted apart): the whole parts'
// scratch does not fit half the budget, so the holders pre-reduce in bands
// (planner version 20); with α = 0 each of these 243 cases pre-reduces and
// keeps the busiest NIC within 1.05x (asserted). Until version 20 none of
// them pre-reduced (241 above 1.05x, median 2.0, worst 3.0); version 20
// pre-reduced 115, the others' budgets being too small to stage the
// streams bands add while a device's streams of every stage shared its
// budget (version 21 cuts rounds stage by stage, plan/rounds.h). With α > 0
// the estimate is asserted within 5% of single-hop's, as below, and the
// NIC is printed. Left out (counted and printed): holders on 2 hosts
// with α > 0: the reduce route's α–β choices (single-hop or not, parts, the
// gather's shape) do not see the stages the chain adds, so the plan's
// estimate can exceed single-hop's (up to 1.37x on these fleets) — a limit
// of this planner. Holders on 2 hosts, α = 0 and cells below their entries
// x the reduce-scatter floor (fewer parts than entries) are counted apart
// and asserted within 1.05x: until planner version 19, 3 of these 238 were
// above (worst 1.163: a receiving host that reduced 2 of 5 parts forwarded
// both to every other host); the part count is now a multiple of the
// cell's hosts.
TEST(PlanScratch, PartialFleetsKeepTheBusiestNicNearItsBound) {
  std::mt19937_64 rng(20261123);
  const int cases = scaled_cases(20000);
  std::vector<double> egress, nic, budget_nic, budget_alpha_nic;
  int budget_scratch = 0, budget_alpha_scratch = 0;
  int eligible = 0, modelled = 0, model_above = 0, several_hosts = 0, budgeted = 0, chained = 0;
  int small_two = 0, small_two_above = 0, alpha_two = 0, alpha_two_above = 0;
  double worst = 0, worst_gain = 0, worst_small_two = 0, worst_two_single = 0;
  for (int c = 0; c < cases; ++c) {
    Fleet fleet = random_fleet(rng, true);
    if (fleet.partial.empty() || fleet.holders < 2) continue;
    SCOPED_TRACE("case " + std::to_string(c) + ": " + describe(fleet));
    const PlanStats st = global_stats(fleet);
    const double e = PlanStats::ratio(st.max_host_send_bytes, st.lower_bound_max_host_send_bytes);
    const double n = busiest_nic_ratio(st);
    egress.push_back(e);
    nic.push_back(n);
    const std::set<int32_t> holder_hosts(fleet.hosts.begin(), fleet.hosts.begin() + fleet.holders);
    int64_t bytes = dtype_size(fleet.dtype);
    for (int64_t x : fleet.shape) bytes *= x;
    const PlanOptions& o = fleet.in.options;
    several_hosts += holder_hosts.size() > 1;
    if (o.staging_budget_bytes > 0 && o.staging_budget_bytes < 2 * bytes) {
      ++budgeted;
      if (o.alpha_seconds == 0) {
        budget_nic.push_back(n);
        budget_scratch += st.max_scratch_bytes > 0;
        // Pre-reduced (in bands where the whole parts' scratch is above
        // half the budget, planner version 20): the NIC at its bound too.
        EXPECT_GT(st.max_scratch_bytes, 0) << "not pre-reduced under the budget";
        EXPECT_LE(n, 1.05) << "under the budget";
      } else {
        budget_alpha_nic.push_back(n);
        budget_alpha_scratch += st.max_scratch_bytes > 0;
        const double single = estimate_with(fleet, {}, true);
        EXPECT_LE(st.cost_seconds, single * 1.05) << "slower than single-hop by the estimate";
      }
      continue;
    }
    if (holder_hosts.size() > 1) {
      bool sharded = false;
      for (const auto& d : fleet.dst_dims) sharded |= !d.empty();
      const int64_t entries = sharded ? fleet.receiving : fleet.receiving * fleet.members;
      const double cell =
          static_cast<double>(bytes) / static_cast<double>(sharded ? fleet.members : 1);
      if (o.alpha_seconds > 0) {  // the NIC reported, the estimate checked (see above)
        ++alpha_two;
        alpha_two_above += n > 1.05;
        const double single = estimate_with(fleet, {}, true);
        EXPECT_LE(st.cost_seconds, single * 1.05) << "slower than single-hop by the estimate";
        worst_two_single = std::max(worst_two_single, st.cost_seconds / single);
        continue;
      }
      if (cell < static_cast<double>(entries) * 4096) {  // fewer parts than entries
        ++small_two;
        small_two_above += n > 1.05;
        worst_small_two = std::max(worst_small_two, n);
        EXPECT_LE(n, 1.05) << "fewer parts than entries";
        continue;
      }
    }
    if (o.alpha_seconds == 0) {
      ++eligible;
      chained += holder_hosts.size() > 1;
      EXPECT_LE(n, 1.05) << st.max_host_send_bytes << " / " << st.max_host_recv_bytes << " bytes";
      EXPECT_GT(st.max_scratch_bytes, 0);
      worst = std::max(worst, n);
      continue;
    }
    // α > 0: no alternative the model weighed has a lower estimate.
    ++modelled;
    model_above += n > 1.05;
    const double alts[] = {estimate_with(fleet, {}, true), estimate_with(fleet, {1, -1}),
                           estimate_with(fleet, {0, 1}),   estimate_with(fleet, {0, 0}),
                           estimate_with(fleet, {1, 1}),   estimate_with(fleet, {1, 0})};
    for (double alt : alts) {
      EXPECT_LE(st.cost_seconds, alt * 1.10)
          << "an alternative has a lower estimate: " << alts[0] << " " << alts[1] << " " << alts[2]
          << " " << alts[3] << " " << alts[4] << " " << alts[5] << " stages " << st.stages;
      worst_gain = std::max(worst_gain, st.cost_seconds / alt);
    }
  }
  auto report = [](const char* name, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    int above = 0;
    for (double x : v) above += x > 1.05;
    std::printf("  %s: %d of %zu above 1.05; median %.3f, p90 %.3f, p99 %.3f, worst %.3f\n", name,
                above, v.size(), v[v.size() / 2], v[v.size() * 9 / 10], v[v.size() * 99 / 100],
                v.back());
  };
  std::printf(
      "partial fleets with >= 2 holders: %d with alpha 0 within 1.05 (worst %.3f; %d of them "
      "with holders on 2 hosts); %d with alpha > 0 chosen by the α–β model (%d above 1.05; "
      "estimate at most %.3fx the best alternative's); %d with holders on 2 hosts in all; left "
      "out: %d with a budget below twice the tensor, %d with holders on 2 hosts and alpha > 0 "
      "(%d above 1.05; estimate at most %.3fx single-hop's), %d with holders on 2 hosts, alpha 0 "
      "and cells below their entries x the floor (%d above 1.05, worst %.3f)\n",
      eligible, worst, chained, modelled, model_above, worst_gain, several_hosts, budgeted,
      alpha_two, alpha_two_above, worst_two_single, small_two, small_two_above, worst_small_two);
  report("egress", egress);
  report("busiest NIC", nic);
  std::printf("budget below twice the tensor, alpha 0: %zu, %d with scratch\n", budget_nic.size(),
              budget_scratch);
  report("busiest NIC, budget below twice the tensor, alpha 0", budget_nic);
  std::printf("budget below twice the tensor, alpha > 0: %zu, %d with scratch\n",
              budget_alpha_nic.size(), budget_alpha_scratch);
  report("busiest NIC, budget below twice the tensor, alpha > 0", budget_alpha_nic);
  EXPECT_GE(budget_scratch, least_covered(200));
  EXPECT_GE(eligible, least_covered(200));
  EXPECT_GE(modelled, least_covered(200));
  EXPECT_GE(chained, least_covered(40));
}

// The whole plan's reduction choice (Context::decide_reductions) over many
// partial tensors at the default α: 3 shapes (3 groups, decided one after
// another) and 18 shapes (past 16 groups: one decision for all). Every
// process's part equals the whole plan's, the plan is exact after every
// stage, and its estimate is within 5% of the single-hop plan's.
TEST(PlanScratch, ManyPartialTensorsShareTheWholePlansChoice) {
  for (int shapes : {3, 18}) {
    SCOPED_TRACE(std::to_string(shapes) + " shapes");
    std::string json = R"({"meshes": {
      "src": {"axis_names": ["dp"], "shape": [4], "devices": [0, 1, 2, 3],
              "processes": [0, 1, 2, 3], "hosts": [0, 0, 1, 1]},
      "dst": {"axis_names": ["r"], "shape": [2], "devices": [4, 5],
              "processes": [4, 5], "hosts": [2, 3]}}, "tensors": [)";
    for (int i = 0; i < 36; ++i) {
      const int rows = 8 + 24 * (i % shapes);  // a few KiB to 40 KiB
      json += std::string(i ? "," : "") + R"({"name": "g)" + std::to_string(i) +
              R"(", "shape": [)" + std::to_string(rows) + R"(, 64], "dtype": "f32",
               "src": {"mesh": "src", "spec": [null, null], "partial": {"axes": ["dp"]}},
               "dst": {"mesh": "dst", "spec": [null, null]}})";
    }
    json += "]}";
    PlanInput in = parse_spec(json).input;
    const Plan plan = make_plan(in);
    for (int32_t p : plan.processes())
      ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
          << "process " << p;
    ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
    PlanInput single = in;
    single.options.reduce_scatter = false;
    const double alone = make_plan(single, {PlanScope::kGlobal}).stats().cost_seconds;
    EXPECT_LE(plan.stats().cost_seconds, alone * 1.05);
  }
}

// A psum in place (every device holds a summand and needs the sum) over H
// hosts of k devices: the busiest device sends and takes in the ring
// all-reduce's 2 (n - 1) / n of the tensor (n = H k, the bandwidth-optimal
// all-reduce volume), once each part's owner on each holder host and its
// gather leader there rotate over the parts that host takes from others
// (Enumerator::away_rank, planner version 16; version 15 rotated by j +
// rot, which aliased with the reducer's host: over 2 hosts of 8, half the
// devices owned and led two parts each, the busiest device 592 MiB of a
// 256 MiB tensor instead of 480). Sharded destinations too (each entry
// needs its shard: reduce-scatter, no gather). Exact after every stage on
// the small cases with α = 0; process parts equal the whole plan's. Below
// full scale (the sanitizer builds, where executing the 12 small cases stage
// by stage was most of the 50 s this took under ASan) the small cases i
// with i % every == (i / every) % every (every = 100 / RESHARD_TEST_SCALE)
// are executed: at ASan's 25, 3 of them, over 2, 3 and 4 hosts, 2 and 3
// devices, replicated and sharded; every case is still planned, bounded and
// compared part by part.
TEST(PlanScratch, PsumInPlaceSpreadsOverEveryDevice) {
  int cases = 0, small_cases = 0, executed = 0;
  const int every = RESHARD_TEST_SCALE >= 100 ? 1 : 100 / std::max(RESHARD_TEST_SCALE, 1);
  double worst = 0;
  for (int64_t H : {2, 3, 4})
    for (int64_t k : {2, 3, 4, 8})
      for (bool sharded : {false, true})
        for (double alpha : {0.0, 5e-6}) {
          const int64_t n = H * k;
          std::vector<int32_t> hosts;
          for (int64_t d = 0; d < n; ++d) hosts.push_back(static_cast<int32_t>(d / k));
          const bool small = k <= 3;
          const std::vector<int64_t> shape = {small ? 16 * n : 512 * n, 1024};
          std::vector<std::vector<std::string>> dims(2);
          if (sharded) dims[0] = {"dp"};
          PlanInput in =
              one_tensor(shape, DType::kF32, named(mesh({"dp"}, {n}, 0), {{}, {}}, {"dp"}),
                         named(mesh({"dp"}, {n}, 0), dims), hosts);
          in.options.alpha_seconds = alpha;
          in.options.staging_budget_bytes = 0;
          SCOPED_TRACE(std::to_string(H) + " hosts of " + std::to_string(k) +
                       (sharded ? ", sharded" : ", replicated") + ", alpha " +
                       std::to_string(alpha));
          const Plan plan = make_plan(in, {small ? PlanScope::kAll : PlanScope::kGlobal});
          const PlanStats& st = plan.stats();
          const double V = static_cast<double>(shape[0] * shape[1] * 4);
          // Reduce-scatter alone (a sharded destination) is half the all-reduce.
          const double volume =
              (sharded ? 1.0 : 2.0) * static_cast<double>(n - 1) / static_cast<double>(n) * V;
          const double r =
              static_cast<double>(std::max(st.max_send_bytes, st.max_recv_bytes)) / volume;
          EXPECT_LE(r, 1.05) << st.max_send_bytes << " / " << st.max_recv_bytes << " bytes";
          worst = std::max(worst, r);
          ++cases;
          if (!small || alpha > 0) continue;
          ASSERT_EQ(check_summands(plan), "");
          if (small_cases % every == (small_cases / every) % every) {
            ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
            ++executed;
          }
          ++small_cases;
          for (int32_t p : plan.processes())
            ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
                << "process " << p;
        }
  std::printf("psum in place: %d cases, the busiest device at most %.3fx the all-reduce volume\n",
              cases, worst);
  EXPECT_EQ(small_cases, 12);
  EXPECT_GE(executed, small_cases / every) << "small cases executed stage by stage";
}

// A staging budget that cannot hold every tensor's scratch: a 1 MiB psum
// whose owners would each hold 512 KiB of scratch, beside four 16 KiB ones,
// under a 256 KiB budget. Until planner version 19 nothing pre-reduced (the
// most scratch above half the budget), then the small tensors' group did
// and the large one's did not; since version 20 (α = 0) every tensor
// pre-reduces in bands, written and sent on stage by stage, whose scratch
// reuses bytes two stages apart (Context::decide_pre_reduce). Scratch plus
// staged bytes stay below the budget on every device, parts equal the
// whole plan's and every stage is exact; with α = 0 and at the default α
// (where the α–β model weighs the stages the bands add).
TEST(PlanScratch, BudgetPreReducesTheGroupsItHolds) {
  for (double alpha : {0.0, 5e-6}) {
    SCOPED_TRACE("alpha " + std::to_string(alpha));
    std::string json = R"({"options": {"staging_budget_bytes": 262144, "alpha_seconds": )" +
                       std::to_string(alpha) + R"(}, "meshes": {
      "src": {"axis_names": ["dp"], "shape": [4], "devices": [0, 1, 2, 3],
              "processes": [0, 1, 2, 3], "hosts": [0, 0, 1, 1]},
      "dst": {"axis_names": ["r"], "shape": [2], "devices": [4, 5],
              "processes": [4, 5], "hosts": [2, 3]}}, "tensors": [
      {"name": "big", "shape": [4096, 64], "dtype": "f32",
       "src": {"mesh": "src", "spec": [null, null], "partial": {"axes": ["dp"]}},
       "dst": {"mesh": "dst", "spec": [null, null]}})";
    for (int i = 0; i < 4; ++i)
      json += R"(, {"name": "small)" + std::to_string(i) + R"(", "shape": [64, 64], "dtype": "f32",
       "src": {"mesh": "src", "spec": [null, null], "partial": {"axes": ["dp"]}},
       "dst": {"mesh": "dst", "spec": [null, null]}})";
    json += "]}";
    const PlanInput in = parse_spec(json).input;
    const Plan plan = make_plan(in);
    const int64_t budget = in.options.staging_budget_bytes;
    std::map<int64_t, int64_t> scratch;
    ASSERT_EQ(check_summands(plan, &scratch), "");
    std::set<uint32_t> pre_reduced;
    for (const auto& [p, part] : plan.parts())
      for (const Scratch& x : part.scratch) pre_reduced.insert(x.tensor);
    if (alpha == 0) {
      EXPECT_EQ(pre_reduced, (std::set<uint32_t>{0, 1, 2, 3, 4})) << "every tensor, in bands";
      EXPECT_GT(plan.stats().max_scratch_bytes, 0);
      EXPECT_GT(plan.stats().stages, 4) << "bands";
      EXPECT_LE(busiest_nic_ratio(plan.stats()), 1.05);
    } else {
      EXPECT_EQ(pre_reduced.count(0), 0u) << "the large tensor's scratch does not fit";
    }
    EXPECT_LE(plan.stats().max_scratch_bytes, budget / 2);
    expect_within_budget(plan, scratch, budget);
    for (int32_t p : plan.processes())
      ASSERT_EQ(make_plan(in, {PlanScope::kProcess, p, false}).part(p), plan.part(p))
          << "process " << p;
    ASSERT_NO_FATAL_FAILURE(execute_every_stage(plan, 2));
  }
}

// A process part's enumeration replays the pieces of like tensors (same
// layouts, shape, dtype and decisions: planner.cc, build_chunk) instead of
// enumerating each: the plans must be those of every tensor enumerated on
// its own — whole plans and every process's part, with 1 and 3 threads
// (each thread's tensor range records its own), on random fleets (relays,
// trees, partial sources, budgets), uneven fleets and the random generator's
// cases, each tensor three times over (the copies after the originals, one
// in another dtype: a kind of its own unless it has the same size), also
// with records capped at 1-31 pieces (a kind past the cap enumerates).
PlanInput thrice(PlanInput in) {
  const size_t n = in.tensors.size();
  for (int copy = 1; copy <= 2; ++copy) {
    for (size_t i = 0; i < n; ++i) {
      TensorSpec t = in.tensors[i];
      t.name += "_copy" + std::to_string(copy);
      if (copy == 2) t.dtype = t.dtype == DType::kF32 ? DType::kBF16 : DType::kF32;
      in.tensors.push_back(std::move(t));
    }
  }
  return in;
}

struct ReplayOff {
  ReplayOff() { planning::set_replay_like(false); }
  ~ReplayOff() { planning::set_replay_like(true); }
};
struct ReplayCap {
  explicit ReplayCap(size_t pieces) { planning::set_replay_pieces_cap(pieces); }
  ~ReplayCap() { planning::set_replay_pieces_cap(0); }
};

void expect_replay_plans_alike(const PlanInput& in) {
  std::vector<std::pair<std::string, Plan>> off;
  auto plans = [&](std::vector<std::pair<std::string, Plan>>& out) {
    for (int32_t threads : {1, 3}) {
      PlanRequest all;
      all.threads = threads;
      Plan whole = make_plan(in, all);
      const std::vector<int32_t> procs = whole.processes();
      out.emplace_back("whole, threads " + std::to_string(threads), std::move(whole));
      for (int32_t p : procs) {
        PlanRequest one;
        one.scope = PlanScope::kProcess;
        one.process = p;
        one.global_stats = false;
        one.threads = threads;
        out.emplace_back("process " + std::to_string(p) + ", threads " + std::to_string(threads),
                         make_plan(in, one));
      }
    }
  };
  {
    ReplayOff guard;
    plans(off);
  }
  std::vector<std::pair<std::string, Plan>> on;
  plans(on);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    SCOPED_TRACE(on[i].first);
    EXPECT_EQ(on[i].second.fingerprint(), off[i].second.fingerprint());
    EXPECT_EQ(on[i].second.parts(), off[i].second.parts());
  }
}

TEST(PlanReplay, LikeTensorsPlanAsIfEnumeratedAlone) {
  std::mt19937_64 rng(20261127);
  int partial = 0, relayed = 0, budgeted = 0;
  for (int c = 0; c < scaled_cases(90); ++c) {
    PlanInput in;
    std::string what;
    if (c % 3 == 0) {
      Fleet f = random_fleet(rng, c % 2 == 0);
      what = describe(f);
      partial += !f.partial.empty();
      in = f.in;
    } else if (c % 3 == 1) {
      Fleet f = uneven_fleet(rng);
      what = describe(f);
      in = f.in;
    } else {
      testing::CaseGen gen(90000 + static_cast<uint64_t>(c));
      in = gen.input();
      what = "random case";
    }
    SCOPED_TRACE("case " + std::to_string(c) + ": " + what);
    in = thrice(std::move(in));
    budgeted += in.options.staging_budget_bytes > 0;
    relayed += make_plan(in, {PlanScope::kGlobal}).stats().stages > 1;
    expect_replay_plans_alike(in);
    {
      // Records abandoned past a small cap: those kinds enumerate again.
      ReplayCap cap(1 + static_cast<size_t>(c % 7) * 5);
      expect_replay_plans_alike(in);
    }
    if (HasFailure()) return;
  }
  EXPECT_GE(partial, least_covered(3));
  EXPECT_GE(relayed, least_covered(20));
  EXPECT_GE(budgeted, least_covered(10));
}

}  // namespace
}  // namespace reshard
