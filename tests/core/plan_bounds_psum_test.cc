// Lower bounds of partial sources (psum) over all plans, computed by hand:
// an element of k >= 2 summands needed on n devices takes at least
// k + n - 1 - [a needer holds a summand] messages (the one-way gossip bound,
// core/src/plan/bounds.h), and its counterpart over hosts. Each case states
// its figures and how they follow; where a plan meets them, the plan's own
// figures are checked equal.
#include <gtest/gtest.h>

#include "layout_helpers.h"
#include "relay_fleets.h"
#include "reshard/plan.h"
#include "reshard/simulate.h"
#include "reshard/spec.h"

namespace reshard {
namespace {

using testing::mesh;
using testing::named;
using testing::one_tensor;

// One f32 tensor; hosts[i] is the host of device i (and its process).
PlanInput psum(std::vector<int64_t> shape, const NamedSharding& src, const NamedSharding& dst,
               const std::vector<int32_t>& hosts) {
  return one_tensor(std::move(shape), DType::kF32, src, dst, hosts);
}

std::vector<int32_t> own_hosts(int32_t n) {
  std::vector<int32_t> h(static_cast<size_t>(n));
  for (int32_t d = 0; d < n; ++d) h[static_cast<size_t>(d)] = d;
  return h;
}

constexpr int64_t kV = 1024 * 1024 * 4;  // a 1024 x 1024 f32 tensor

// All-reduce over 4 devices, one per host: 4 summands needed on 4 devices,
// a needer holding one: 4 + 4 - 1 - 1 = 6 messages an element, 6V in all,
// 1.5V for the busiest device (and host) to send and to receive. Over
// hosts the same: each host alone holds its summand, so with u the first
// to know, 3 hosts send first messages and 3 needer hosts receive after:
// 6V crossing. Reduce-scatter then all-gather moves exactly that (each
// quarter: 3 summands in, 3 reduced copies out), so every ratio is 1.
TEST(PlanBoundsPsum, AllReduceMeetsTheGossipBound) {
  auto m = mesh({"dp"}, {4}, 0);
  const PlanInput in =
      psum({1024, 1024}, named(m, {{}, {}}, {"dp"}), named(m, {{}, {}}), own_hosts(4));
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_network_bytes, 6 * kV);
  EXPECT_EQ(st.lower_bound_max_recv_bytes, 3 * kV / 2);
  EXPECT_EQ(st.lower_bound_max_send_bytes, 3 * kV / 2);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 6 * kV);
  EXPECT_EQ(st.lower_bound_max_host_recv_bytes, 3 * kV / 2);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, 3 * kV / 2);
  EXPECT_EQ(st.network_bytes, st.lower_bound_network_bytes);
  EXPECT_EQ(st.max_recv_bytes, st.lower_bound_max_recv_bytes);
  EXPECT_EQ(st.max_send_bytes, st.lower_bound_max_send_bytes);
  EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
}

// Four summand devices reducing into four other devices, each needing a
// quarter (tiled), every device on its own host: an element has 4 summands
// and 1 needer holding none: 4 messages, 4V in all (one value per needer
// would say V, a ratio of 4 for this optimal plan). The busiest device
// sends V (it alone holds its summand, needed elsewhere) and receives at
// least 4V over 8 devices = V/2; over hosts 4V cross (u the needer: 4
// sole holder hosts send; u a holder: 3 send, the needer receives), the
// busiest host sends V and takes in at least 4V / 8 hosts = V/2.
TEST(PlanBoundsPsum, FourSummandsIntoFourDisjointDevices) {
  const PlanInput in = psum({1024, 1024}, named(mesh({"dp"}, {4}, 0), {{}, {}}, {"dp"}),
                            named(mesh({"r"}, {4}, 4), {{"r"}, {}}), own_hosts(8));
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_network_bytes, 4 * kV);
  EXPECT_EQ(st.lower_bound_max_send_bytes, kV);
  EXPECT_EQ(st.lower_bound_max_recv_bytes, kV / 2);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 4 * kV);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, kV);
  EXPECT_EQ(st.lower_bound_max_host_recv_bytes, kV / 2);
  EXPECT_EQ(st.network_bytes, 4 * kV);
  EXPECT_EQ(st.cross_host_bytes, 4 * kV);
  EXPECT_EQ(st.max_send_bytes, kV);
}

// Four summands (one host each) reduced into device 0, which holds one of
// them: 4 + 1 - 1 - 1 = 3 messages an element, 3V. Device 0 receives at
// least V (it lacks the sum), the others send V each (alone holding their
// summand); over hosts 3V cross (u = host 0: 3 sole holder hosts send).
// Single-hop (each summand straight to device 0) moves 3V.
TEST(PlanBoundsPsum, ReduceIntoOneHolder) {
  const PlanInput in = psum({1024, 1024}, named(mesh({"dp"}, {4}, 0), {{}, {}}, {"dp"}),
                            named(mesh({"r"}, {1}, 0), {{}, {}}), own_hosts(4));
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_network_bytes, 3 * kV);
  EXPECT_EQ(st.lower_bound_max_recv_bytes, kV);
  EXPECT_EQ(st.lower_bound_max_send_bytes, kV);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 3 * kV);
  EXPECT_EQ(st.lower_bound_max_host_recv_bytes, kV);
  EXPECT_EQ(st.network_bytes, 3 * kV);
  EXPECT_EQ(st.cross_host_bytes, 3 * kV);
}

// Two holder hosts of 2 devices (4 summands) to 2 other hosts of 2
// devices, replicated: 4 summands, 4 needers holding none: 4 + 4 - 1 = 7
// messages an element (7V); the busiest device receives V (it lacks the
// sum) and sends V (alone holding its summand). Over hosts: each holder
// host alone holds its 2 summands; with u a holder host, the other sends
// once and both needer hosts receive; with u a needer host, both holder
// hosts send and the other needer host receives: 3V cross (one value per
// needer host would say 2V). The busiest host sends V and takes in V.
TEST(PlanBoundsPsum, HolderHostsIntoOtherHosts) {
  const PlanInput in = psum({1024, 1024}, named(mesh({"dp"}, {4}, 0), {{}, {}}, {"dp"}),
                            named(mesh({"r", "k"}, {2, 2}, 4), {{}, {}}), {0, 0, 1, 1, 2, 2, 3, 3});
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_network_bytes, 7 * kV);
  EXPECT_EQ(st.lower_bound_max_recv_bytes, kV);
  EXPECT_EQ(st.lower_bound_max_send_bytes, kV);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 3 * kV);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, kV);
  EXPECT_EQ(st.lower_bound_max_host_recv_bytes, kV);
  EXPECT_GE(st.cross_host_bytes, 3 * kV);
  EXPECT_GE(st.network_bytes, 7 * kV);
}

// Summand 0 on hosts 0 and 1, summand 1 on hosts 2 and 3, needed on host 4
// (device 4): no host alone holds a summand, so the first messages of the
// 2 summands come from 2 hosts (one holds at most 1 of them): with u =
// host 4 they are its 2 crossings; with u = host 0, host 2 or 3 sends and
// host 4 receives: 2V cross (one value per needer host would say V). Over
// devices 2 summands, 1 needer: 2 messages, 2V; device 4 receives V.
TEST(PlanBoundsPsum, SummandsReplicatedOverHosts) {
  const PlanInput in = psum({1024, 1024}, named(mesh({"dp", "r"}, {2, 2}, 0), {{}, {}}, {"dp"}),
                            named(mesh({"x"}, {1}, 4), {{}, {}}), own_hosts(5));
  const PlanStats st = make_plan(in, {PlanScope::kGlobal}).stats();
  EXPECT_EQ(st.lower_bound_network_bytes, 2 * kV);
  EXPECT_EQ(st.lower_bound_max_recv_bytes, kV);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 2 * kV);
  EXPECT_EQ(st.lower_bound_max_host_recv_bytes, kV);
  EXPECT_EQ(st.lower_bound_max_host_send_bytes, (2 * kV + 4) / 5);
  EXPECT_EQ(st.network_bytes, 2 * kV);
  EXPECT_EQ(st.cross_host_bytes, 2 * kV);
}

// The simulator's bound: all-reduce over 4 hosts of one device and one NIC
// of 1e8 B/s: 6V must cross hosts, over 4 NICs together: α + 6V / 4e8,
// where each host's own figures (V in, V out) give α + V / 1e8.
TEST(PlanBoundsPsum, SimulatorBoundCountsEveryCrossing) {
  auto m = mesh({"dp"}, {4}, 0);
  const PlanInput in =
      psum({1024, 1024}, named(m, {{}, {}}, {"dp"}), named(m, {{}, {}}), own_hosts(4));
  ClusterTopology c;
  c.alpha_seconds = 1e-3;
  c.intra_host_bytes_per_second = 1e9;
  c.nic_bytes_per_second = 1e8;
  c.nics_per_host = 1;
  const SimBound b = simulate_lower_bound(in, c);
  EXPECT_EQ(b.kind, "hosts");
  EXPECT_EQ(b.id, -1);
  EXPECT_EQ(b.bytes, 6 * kV);
  EXPECT_DOUBLE_EQ(b.seconds, 1e-3 + 6.0 * kV / 4e8);
  // The plan's α–β cost bound is the same term (one NIC a device).
  PlanInput same = in;
  same.options.alpha_seconds = 1e-3;
  same.options.inter_host_bytes_per_second = 1e8;
  same.options.intra_host_bytes_per_second = 1e9;
  const PlanStats st = make_plan(same, {PlanScope::kGlobal}).stats();
  EXPECT_DOUBLE_EQ(st.lower_bound_cost_seconds, 1e-3 + 6.0 * kV / 4e8);
  EXPECT_EQ(st.lower_bound_binding, BoundKind::kHostRecv);
}

}  // namespace
}  // namespace reshard
