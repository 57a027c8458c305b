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
#include "plan/bounds.h"
#include "plan/context.h"
#include "plan/enumerate.h"
#include "plan/scratch_layout.h"
#include "random_cases.h"
#include "relay_fleets.h"
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
  int64_t fans = 0, fans_exact = 0, holder_sets = 0, replicated_sets = 0;
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
    // Fan-outs (the simulator's second α): never above the fewest needers
    // of any byte counted (sound), equal where every cell is exact.
    planning::Context ctx(in);
    ctx.build();
    const planning::Bounds lb = planning::compute_bounds(ctx);
    auto check_fan = [&](int64_t got, int64_t bytes, const auto& want, auto key) {
      if (bytes <= 0) return;
      ASSERT_GE(got, 1);
      const auto it = want.find(key);
      ASSERT_NE(it, want.end());
      ASSERT_LE(got, it->second);
      fans += 1;
      fans_exact += got == it->second;
    };
    for (size_t d = 0; d < ctx.devices.size(); ++d)
      check_fan(lb.forced_fan[d], lb.forced[d], o.forced_fan, ctx.devices[d]);
    for (size_t h = 0; h < lb.hosts.size(); ++h) {
      check_fan(lb.egress_fan[h], lb.egress[h], o.egress_fan, lb.hosts[h]);
      check_fan(lb.ingress_fan[h], lb.ingress[h], o.ingress_fan, lb.hosts[h]);
    }
    // The hosts holding copies together: the oracle's sets exactly where no
    // destination boxes overlap (overlapping cells are not counted: below).
    bool overlaps = false;
    for (const TensorSpec& t : in.tensors) overlaps |= testing::overlapping_boxes(t.dst) > 0;
    std::map<std::set<int32_t>, std::pair<int64_t, int64_t>> sets;
    for (const planning::Bounds::HolderSet& set : lb.holder_sets) {
      std::set<int32_t> ids;
      for (uint32_t h : set.hosts) ids.insert(lb.hosts[h]);
      ASSERT_EQ(ids.size(), set.hosts.size());
      ASSERT_TRUE(sets.emplace(ids, std::make_pair(set.bytes, set.fan)).second);
    }
    if (!overlaps) {
      ASSERT_EQ(sets, o.holder_sets);
      ASSERT_EQ(std::make_pair(lb.all_holders.bytes, lb.all_holders.fan), o.all_holders);
      holder_sets += static_cast<int64_t>(sets.size());
      replicated_sets +=
          std::count_if(sets.begin(), sets.end(), [](const auto& s) { return s.first.size() > 1; });
    } else {
      for (const auto& [ids, bf] : sets) {
        const auto it = o.holder_sets.find(ids);
        ASSERT_NE(it, o.holder_sets.end());
        ASSERT_LE(bf.first, it->second.first);
        ASSERT_GE(bf.second, it->second.second);
      }
      ASSERT_LE(lb.all_holders.bytes, o.all_holders.first);
    }
  }
  EXPECT_GT(replicated_sets, cases / 20);  // sets of several holder hosts (242 of 4,000)
  EXPECT_GT(holder_sets, cases / 2);
  EXPECT_GT(fans_exact, fans * 9 / 10);
  EXPECT_GT(exact, cases / 3);
  EXPECT_GT(overlapping, cases / 200);  // about 1% of the cases (4 of the first 400)
  EXPECT_GT(partial, cases / 10);
  EXPECT_GT(multi_host, cases / 2);  // half the cases have 1-5 random hosts
  EXPECT_GT(relay_checked, cases / 2);
}

// ------------------------------------------------ where single-hop loses

using testing::mesh;
using testing::named;
using testing::one_tensor;

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

}  // namespace
}  // namespace reshard
