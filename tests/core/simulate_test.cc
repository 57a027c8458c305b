// The fleet simulator (reshard/simulate.h) on small cases computed by hand:
// one link, flows sharing a NIC, max-min fairness, a relay chain, rounds,
// host caps; its lower bound; its topology files and their errors.
#include "reshard/simulate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>

#include "core/cluster_costs.h"
#include "core/random_cases.h"
#include "reshard/error.h"
#include "reshard/spec.h"
#include "test_scale.h"

namespace reshard {
namespace {

// Each device on its own process; hosts as given.
Topology hosts_of(std::initializer_list<std::pair<int64_t, int32_t>> devices) {
  Topology t;
  int32_t p = 0;
  for (auto [d, h] : devices) t.add({d, p++, h, 0});
  return t;
}

ClusterTopology cluster(double alpha, double intra, double nic, int32_t nics = 0,
                        double host_link = 0) {
  ClusterTopology c;
  c.alpha_seconds = alpha;
  c.intra_host_bytes_per_second = intra;
  c.nic_bytes_per_second = nic;
  c.nics_per_host = nics;
  c.host_link_bytes_per_second = host_link;
  return c;
}

TEST(Simulate, OneLinkIsAlphaPlusBytesOverBandwidth) {
  const Topology t = hosts_of({{0, 0}, {1, 1}});
  const SimResult r = simulate(t, cluster(0.5, 1e6, 100), {{0, 1, 0, 0, 1000}});
  EXPECT_DOUBLE_EQ(r.seconds, 10.5);
  EXPECT_EQ(r.messages, 1);
  EXPECT_EQ(r.bytes, 1000);
  ASSERT_TRUE(r.binding.has_value());
  EXPECT_EQ(r.binding->cls, LinkClass::kNicOut);  // both ends saturated: the first link
  EXPECT_DOUBLE_EQ(r.binding_saturated_seconds, 10.0);
  ASSERT_EQ(r.per_stage.size(), 1u);
  EXPECT_DOUBLE_EQ(r.per_stage[0].start_seconds, 0);
  EXPECT_DOUBLE_EQ(r.per_stage[0].end_seconds, 10.5);
}

TEST(Simulate, InsideAHostUsesTheIntraHostPorts) {
  const Topology t = hosts_of({{0, 0}, {1, 0}});
  const SimResult r = simulate(t, cluster(0, 300, 1), {{0, 1, 0, 0, 900}});
  EXPECT_DOUBLE_EQ(r.seconds, 3.0);
  EXPECT_EQ(r.binding->cls, LinkClass::kIntraOut);
  EXPECT_EQ(r.binding->device, 0);
}

TEST(Simulate, TwoFlowsShareOneNicThenTheSurvivorTakesItAll) {
  // Devices 0 and 1 on host 0 with one NIC; 2 and 3 on hosts 1 and 2.
  const Topology t = hosts_of({{0, 0}, {1, 0}, {2, 1}, {3, 2}});
  const std::vector<SimMessage> m = {{0, 2, 0, 0, 1000}, {1, 3, 0, 0, 500}};
  // 50 each until the 500-byte flow ends at 10 s; 500 bytes left at 100.
  EXPECT_DOUBLE_EQ(simulate(t, cluster(0, 1e6, 100, 1), m).seconds, 15.0);
  // One NIC per device: no sharing.
  EXPECT_DOUBLE_EQ(simulate(t, cluster(0, 1e6, 100, 0), m).seconds, 10.0);
  // Two NICs per host of two devices: one each.
  EXPECT_DOUBLE_EQ(simulate(t, cluster(0, 1e6, 100, 2), m).seconds, 10.0);
}

TEST(Simulate, MoreNicsThanDevicesPoolIntoOneGroup) {
  // One device per host, two NICs per host: the device's group has both.
  const Topology t = hosts_of({{0, 0}, {1, 1}});
  const SimResult r = simulate(t, cluster(0, 1e6, 100, 2), {{0, 1, 0, 0, 1000}});
  EXPECT_DOUBLE_EQ(r.seconds, 5.0);
  EXPECT_EQ(r.binding->bytes_per_second, 200);
}

TEST(Simulate, MessagesInsideAProcessFollowItsRounds) {
  // Devices 0 and 1 on process 0 (host 0), device 2 on process 1 (host 1).
  Topology t;
  t.add({0, 0, 0, 0});
  t.add({1, 0, 0, 1});
  t.add({2, 1, 1, 0});
  // Round 0: 0 -> 2 (1000 at 100) and 0 -> 1 inside the process (500 at
  // 50), both 10 s; round 1: 1 -> 2 after both, 10 s more.
  const SimResult r =
      simulate(t, cluster(0, 50, 100), {{0, 2, 0, 0, 1000}, {0, 1, 0, 0, 500}, {1, 2, 0, 1, 1000}});
  EXPECT_NEAR(r.seconds, 20.0, 1e-9);
}

TEST(Simulate, RatesAreMaxMinFairNotAnEvenSplitPerLink) {
  // A, D, B into device 2 (33.3 each); B and C share device 1's NIC out, so
  // C gets what B cannot use: 66.7, not 50. Everything ends at 30 s; an even
  // split of device 1's NIC would end C at 40 s.
  const Topology t = hosts_of({{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}});
  const std::vector<SimMessage> m = {
      {0, 2, 0, 0, 1000}, {4, 2, 0, 0, 1000}, {1, 2, 0, 0, 1000}, {1, 3, 0, 0, 2000}};
  EXPECT_NEAR(simulate(t, cluster(0, 1e6, 100), m).seconds, 30.0, 1e-9);
}

TEST(Simulate, HostLinkCapsTheNicsOfAHost) {
  const Topology t = hosts_of({{0, 0}, {1, 0}, {2, 1}, {3, 1}});
  const std::vector<SimMessage> m = {{0, 2, 0, 0, 1500}, {1, 3, 0, 0, 1500}};
  // Two NICs of 100 under a 150 cap: 75 each.
  const SimResult r = simulate(t, cluster(0, 1e6, 100, 0, 150), m);
  EXPECT_NEAR(r.seconds, 20.0, 1e-9);
  EXPECT_EQ(r.binding->cls, LinkClass::kHostOut);
  EXPECT_NEAR(simulate(t, cluster(0, 1e6, 100, 0, 0), m).seconds, 15.0, 1e-9);
}

TEST(Simulate, RelayChainForwardsAfterItsChunkArrived) {
  // 0 -> 1 (stage 0), 1 -> 2 (stage 1, after it): 0.1 + 10, then 0.1 + 10
  // more.
  const Topology t = hosts_of({{0, 0}, {1, 1}, {2, 2}, {3, 3}});
  std::vector<SimMessage> m = {{0, 1, 0, 0, 1000}, {1, 2, 1, 0, 1000, {0}}};
  SimResult r = simulate(t, cluster(0.1, 1e6, 100), m);
  EXPECT_NEAR(r.seconds, 20.2, 1e-9);
  ASSERT_EQ(r.per_stage.size(), 2u);
  EXPECT_NEAR(r.per_stage[0].end_seconds, 10.1, 1e-9);
  EXPECT_NEAR(r.per_stage[1].start_seconds, 10.1, 1e-9);
  EXPECT_NEAR(r.per_stage[1].end_seconds, 20.2, 1e-9);
  // The relay also receives 2000 bytes from device 3 in stage 0: both share
  // its NIC in (50 each) until 20.1, then 1000 bytes alone until 30.1. The
  // forward waits for its own chunk only (20.1), not for the whole stage
  // (30.1): it starts at 20.2 and ends at 30.2, not 40.2.
  m.push_back({3, 1, 0, 0, 2000});
  r = simulate(t, cluster(0.1, 1e6, 100), m);
  EXPECT_NEAR(r.seconds, 30.2, 1e-9);
  // Without the dependency the forward has nothing to wait for.
  m[1].after.clear();
  EXPECT_NEAR(simulate(t, cluster(0.1, 1e6, 100), m).seconds, 30.1, 1e-9);
}

TEST(Simulate, PipelinedRelayChainForwardsRoundRWhileReceivingRoundRPlus1) {
  // 0 -> 1 in 4 rounds of 1000 bytes (stage 0); 1 -> 2 forwards each round
  // (stage 1, round j after stage 0's round j). NICs 100 B/s, alpha 0.1.
  // Stage 0's rounds end at 10.1, 20.2, 30.3, 40.4. Stage 1's round j is
  // ready when its chunk arrived and its round j - 1 ended: 10.1, 20.2,
  // 30.3, 40.4, each 0.1 + 10 long: the last ends at 50.5 — a round more
  // than stage 0, not a whole stage (80.8 when every forward waits for all
  // of stage 0).
  const Topology t = hosts_of({{0, 0}, {1, 1}, {2, 2}});
  std::vector<SimMessage> m;
  for (uint32_t j = 0; j < 4; ++j) m.push_back({0, 1, 0, j, 1000});
  for (uint32_t j = 0; j < 4; ++j) m.push_back({1, 2, 1, j, 1000, {j}});
  const SimResult r = simulate(t, cluster(0.1, 1e6, 100), m);
  EXPECT_NEAR(r.seconds, 50.5, 1e-9);
  ASSERT_EQ(r.per_stage.size(), 2u);
  EXPECT_NEAR(r.per_stage[0].end_seconds, 40.4, 1e-9);
  EXPECT_NEAR(r.per_stage[1].start_seconds, 10.1, 1e-9);
  for (uint32_t j = 0; j < 4; ++j) m[4 + j].after = {3};  // stage barrier
  EXPECT_NEAR(simulate(t, cluster(0.1, 1e6, 100), m).seconds, 80.8, 1e-9);
}

TEST(Simulate, DependenciesThatWaitOnALaterRoundAreAnError) {
  // 0 -> 1 round 0 waits for 0 -> 1 round 1 of the same stage, which waits
  // for round 0 to end: neither starts.
  const Topology t = hosts_of({{0, 0}, {1, 1}});
  try {
    simulate(t, cluster(0, 1, 1), {{0, 1, 0, 0, 1, {1}}, {0, 1, 0, 1, 1}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "messages");
  }
  try {
    simulate(t, cluster(0, 1, 1), {{0, 1, 0, 0, 1, {0}}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "messages[0].after");
  }
}

TEST(Simulate, RoundsRunInOrderAndWaitForTheSlowestPeer) {
  const Topology t = hosts_of({{0, 0}, {1, 1}, {2, 2}});
  // Two rounds of one stream: (0.5 + 10) twice.
  EXPECT_NEAR(simulate(t, cluster(0.5, 1e6, 100), {{0, 1, 0, 0, 1000}, {0, 1, 0, 1, 1000}}).seconds,
              21.0, 1e-9);
  // Round 0: 0 -> 1 (1000) and 0 -> 2 (3000) share device 0's NIC out: the
  // first ends at 20, the second at 40. Round 1's 0 -> 1 (1000) waits for
  // device 0 to finish round 0: 40 + 10.
  const SimResult r = simulate(t, cluster(0, 1e6, 100),
                               {{0, 1, 0, 0, 1000}, {0, 2, 0, 0, 3000}, {0, 1, 0, 1, 1000}});
  EXPECT_NEAR(r.seconds, 50.0, 1e-9);
  const SimResult r2 = simulate(t, cluster(0, 1e6, 100),
                                {{0, 1, 0, 0, 1000}, {0, 2, 0, 0, 3000}, {1, 2, 0, 1, 1000}});
  // 1 -> 2 starts at 20 (device 1 done with round 0) but device 2 is still
  // in round 0 until 40: it starts at 40, alone, ends at 50.
  EXPECT_NEAR(r2.seconds, 50.0, 1e-9);
}

TEST(Simulate, ZeroByteMessagesCostAlphaOnly) {
  const Topology t = hosts_of({{0, 0}, {1, 1}});
  EXPECT_NEAR(simulate(t, cluster(0.25, 1e6, 100), {{0, 1, 0, 0, 0}, {0, 1, 0, 1, 0}}).seconds, 0.5,
              1e-12);
  EXPECT_EQ(simulate(t, cluster(0.25, 1e6, 100), {}).seconds, 0);
}

TEST(Simulate, DeterministicWhateverTheMessageOrder) {
  Topology t;
  for (int64_t d = 0; d < 16; ++d)
    t.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d / 4), 0});
  std::vector<SimMessage> m;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const int64_t s = static_cast<int64_t>(rng() % 16);
    int64_t d = static_cast<int64_t>(rng() % 16);
    if (d == s) d = (d + 1) % 16;
    m.push_back({s, d, static_cast<uint32_t>(rng() % 2), static_cast<uint32_t>(rng() % 3),
                 static_cast<int64_t>(rng() % 100000)});
  }
  const ClusterTopology c = cluster(1e-3, 4e5, 1e5, 2, 3e5);
  const SimResult a = simulate(t, c, m);
  const SimResult a2 = simulate(t, c, m);
  EXPECT_EQ(a.seconds, a2.seconds);
  EXPECT_EQ(a.events, a2.events);
  std::shuffle(m.begin(), m.end(), rng);
  EXPECT_NEAR(simulate(t, c, m).seconds, a.seconds, 1e-9 * a.seconds);
}

TEST(Simulate, BadMessagesNameTheMessage) {
  const Topology t = hosts_of({{0, 0}, {1, 1}});
  try {
    simulate(t, cluster(0, 1, 1), {{0, 1, 0, 0, 1}, {0, 1, 0, 0, -5}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "messages[1].bytes");
  }
  try {
    simulate(t, cluster(0, 1, 1), {{1, 1, 0, 0, 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "messages[0]");
  }
  try {
    simulate(t, cluster(0, 1, -1), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "nic_bytes_per_second");
  }
}

// ------------------------------------------------------------ topology files

void expect_topology_error(const std::string& text, ErrorCode code, const std::string& field) {
  try {
    parse_cluster_topology(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

TEST(ClusterTopologyFile, ParsesAndRoundTrips) {
  const ClusterTopology c = parse_cluster_topology(
      R"({"name": "x", "alpha_seconds": 1e-6, "intra_host_bytes_per_second": 4.5e11,
          "nic_bytes_per_second": 5e10, "nics_per_host": 8,
          "host_link_bytes_per_second": 3e11, "sources": ["a"]})");
  EXPECT_EQ(c.name, "x");
  EXPECT_EQ(c.nics_per_host, 8);
  EXPECT_EQ(c.host_link_bytes_per_second, 3e11);
  EXPECT_EQ(parse_cluster_topology(cluster_topology_json(c)), c);
}

TEST(ClusterTopologyFile, BadValuesNameTheirKey) {
  const std::string ok_rest = R"("intra_host_bytes_per_second": 1, "nic_bytes_per_second": 1)";
  expect_topology_error(R"({"alpha_seconds": 0, "intra_host_bytes_per_second": 1,
                            "nic_bytes_per_second": -1})",
                        ErrorCode::kInvalidArgument, "nic_bytes_per_second");
  expect_topology_error(R"({"alpha_seconds": 0, "intra_host_bytes_per_second": 0,
                            "nic_bytes_per_second": 1})",
                        ErrorCode::kInvalidArgument, "intra_host_bytes_per_second");
  expect_topology_error(R"({"alpha_seconds": -1, )" + ok_rest + "}", ErrorCode::kInvalidArgument,
                        "alpha_seconds");
  expect_topology_error(R"({"alpha_seconds": "fast", )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "alpha_seconds");
  expect_topology_error(R"({)" + ok_rest + "}", ErrorCode::kInvalidArgument, "alpha_seconds");
  expect_topology_error(R"({"alpha_seconds": 0, "nics_per_host": 2.5, )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "nics_per_host");
  expect_topology_error(R"({"alpha_seconds": 0, "nics_per_host": -1, )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "nics_per_host");
  expect_topology_error(R"({"alpha_seconds": 0, "host_link_bytes_per_second": 0, )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "host_link_bytes_per_second");
  expect_topology_error(R"({"alpha_seconds": 0, "nic_bandwidth": 5, )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "nic_bandwidth");
  expect_topology_error(R"({"alpha_seconds": 0, "sources": [1], )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "sources[0]");
  expect_topology_error(R"({"alpha_seconds": 0, "name": 3, )" + ok_rest + "}",
                        ErrorCode::kInvalidArgument, "name");
  expect_topology_error("[1, 2]", ErrorCode::kInvalidArgument, "topology");
  try {
    parse_cluster_topology("{\"alpha_seconds\": ");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
  }
}

TEST(ClusterTopologyFile, ShippedFilesParse) {
  for (const char* f : {"h100_8gpu_ndr400.json", "gb200_nvl72.json"}) {
    const ClusterTopology c =
        load_cluster_topology(std::string(RESHARD_SOURCE_DIR) + "/bench/topologies/" + f);
    EXPECT_EQ(c.nic_bytes_per_second, 50e9) << f;  // 400 Gb/s per GPU
  }
  try {
    load_cluster_topology("/nonexistent/topology.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "topology");
  }
}

// ------------------------------------------------------------ plans

// One f32 tensor of 1M elements on device 0 (host 0) replicated to the four
// devices of host 1.
Spec replicate_to_one_host() {
  return parse_spec(R"({
    "meshes": {
      "a": {"axis_names": ["x"], "shape": [1], "devices": [0], "processes": [0], "hosts": [0]},
      "b": {"axis_names": ["x"], "shape": [4], "devices": [1, 2, 3, 4],
            "processes": [1, 2, 3, 4], "hosts": [1, 1, 1, 1]}},
    "tensors": [{"name": "w", "shape": [1024, 1024], "dtype": "f32",
                 "src": {"mesh": "a", "spec": []}, "dst": {"mesh": "b", "spec": []}}]})");
}

TEST(SimulateBound, HostEgressOverItsNicsBinds) {
  const Spec s = replicate_to_one_host();
  const ClusterTopology c = cluster(1e-3, 1e9, 1e8);
  const SimBound b = simulate_lower_bound(s.input, c);
  // Host 0 alone holds the 4 MiB and has one NIC; the device bound divides
  // by NIC plus NVLink, host 1's ingress by four NICs. The 4 MiB are needed
  // on the 4 devices of host 1: sent 4 times (α + 4 x) or forwarded inside
  // host 1 α after they crossed (x + (2 - 1/4) α), x = 4 MiB / 1e8.
  EXPECT_EQ(b.kind, "host_send");
  EXPECT_EQ(b.id, 0);
  EXPECT_EQ(b.bytes, 4 << 20);
  EXPECT_EQ(b.fan, 4);
  EXPECT_DOUBLE_EQ(b.seconds, (4 << 20) / 1e8 + 1.75e-3);
  // Every plan, relays or not, takes at least that long here.
  const Plan relays = make_plan(s.input);
  const SimResult r = simulate(s.input.topology, c, plan_messages(relays));
  EXPECT_GE(r.seconds, b.seconds);
  const SimResult d = simulate(s.input.topology, c, direct_p2p_messages(s.input));
  EXPECT_EQ(direct_p2p_messages(s.input).size(), 4u);  // one per destination
  // Without relays the 4 MiB leave device 0 four times.
  EXPECT_NEAR(d.seconds, 1e-3 + 4 * (4 << 20) / 1e8, 1e-9);
  EXPECT_LT(r.seconds, d.seconds);
}

// 4 MiB replicated on hosts 0 and 1 (one device each), needed on the 4
// devices of host 2. Neither holder host alone must send a byte (the other
// holds a copy), but the two together must send all 4 MiB out, over their
// 2 NICs: x = 4 MiB / 2e8, needed on 4 devices outside them, so sent out 4
// times (α + 4 x) or forwarded outside (x + (2 - 1/4) α). Host 2 takes in
// 4 MiB over its 4 NICs, less.
TEST(SimulateBound, HostsHoldingCopiesSendOutTogether) {
  const Spec s = parse_spec(R"({
    "meshes": {
      "a": {"axis_names": ["r"], "shape": [2], "devices": [0, 1], "processes": [0, 1],
            "hosts": [0, 1]},
      "b": {"axis_names": ["x"], "shape": [4], "devices": [2, 3, 4, 5],
            "processes": [2, 3, 4, 5], "hosts": [2, 2, 2, 2]}},
    "tensors": [{"name": "w", "shape": [1024, 1024], "dtype": "f32",
                 "src": {"mesh": "a", "spec": []}, "dst": {"mesh": "b", "spec": []}}]})");
  const ClusterTopology c = cluster(1e-3, 1e9, 1e8);
  const SimBound b = simulate_lower_bound(s.input, c);
  EXPECT_EQ(b.kind, "holder_hosts");
  EXPECT_EQ(b.id, 0);
  EXPECT_EQ(b.bytes, 4 << 20);
  EXPECT_EQ(b.fan, 4);
  EXPECT_DOUBLE_EQ(b.bytes_per_second, 2e8);
  EXPECT_DOUBLE_EQ(b.seconds, (4 << 20) / 2e8 + 1.75e-3);
  // The planner's own cost bound has the same term (without the fan-out's
  // second α): α + 4 MiB over the holder hosts' NICs together.
  PlanInput in = s.input;
  in.options.alpha_seconds = 1e-3;
  in.options.inter_host_bytes_per_second = 1e8;
  in.options.intra_host_bytes_per_second = 1e9;
  const PlanStats st = make_plan(in).stats();
  EXPECT_EQ(st.lower_bound_binding, BoundKind::kHostSend);
  EXPECT_EQ(st.lower_bound_binding_id, 0);
  EXPECT_DOUBLE_EQ(st.lower_bound_cost_seconds, 1e-3 + (4 << 20) / 2e8);
  // Every plan takes at least that long.
  for (const auto& m : {plan_messages(make_plan(s.input)), direct_p2p_messages(s.input)})
    EXPECT_GE(simulate(s.input.topology, c, m).seconds, b.seconds);
}

// Host 1 takes in 4 MiB it needs on its 3 devices (replicated on hosts 0
// and 2, so no host alone holds it and no host sends a forced byte): over
// its 3 NICs, x = 4 MiB / 3e8, taken in 3 times (α + 3 x) or forwarded
// inside the host (x + (2 - 1/3) α). The holder hosts send it out over
// their 4 NICs together, less.
TEST(SimulateBound, HostIngressFannedOutInsideTheHostPaysASecondAlpha) {
  const Spec s = parse_spec(R"({
    "meshes": {
      "a": {"axis_names": ["x"], "shape": [4], "devices": [0, 4, 5, 6],
            "processes": [0, 4, 5, 6], "hosts": [0, 0, 2, 2]},
      "b": {"axis_names": ["x"], "shape": [3], "devices": [1, 2, 3],
            "processes": [1, 2, 3], "hosts": [1, 1, 1]}},
    "tensors": [{"name": "w", "shape": [1024, 1024], "dtype": "f32",
                 "src": {"mesh": "a", "spec": []}, "dst": {"mesh": "b", "spec": []}}]})");
  const ClusterTopology c = cluster(1e-3, 1e9, 1e8);
  const SimBound b = simulate_lower_bound(s.input, c);
  EXPECT_EQ(b.kind, "host_recv");
  EXPECT_EQ(b.id, 1);
  EXPECT_EQ(b.bytes, 4 << 20);
  EXPECT_EQ(b.fan, 3);
  const double x = (4 << 20) / 3e8;
  EXPECT_DOUBLE_EQ(b.seconds, x + (2.0 - 1.0 / 3) * 1e-3);
  for (const std::vector<SimMessage>& m :
       {plan_messages(make_plan(s.input)), direct_p2p_messages(s.input)})
    EXPECT_GE(simulate(s.input.topology, c, m).seconds, b.seconds);
}

// One host: device 0 alone holds a tensor devices 1-3 need. Over its port
// and NIC (1e9 + 1e8) it sends it 3 times (α + 3 x) or once before a
// forward (x + (2 - 1/3) α): 4 MiB takes the second, 1 KiB the first.
TEST(SimulateBound, DeviceSendToSeveralNeedersPaysASecondAlphaOrEveryCopy) {
  for (const int64_t rows : {1024, 1}) {
    SCOPED_TRACE(rows);
    const Spec s = parse_spec(R"({
      "meshes": {
        "a": {"axis_names": ["x"], "shape": [1], "devices": [0], "processes": [0], "hosts": [0]},
        "b": {"axis_names": ["x"], "shape": [3], "devices": [1, 2, 3], "processes": [1, 2, 3],
              "hosts": [0, 0, 0]}},
      "tensors": [{"name": "w", "shape": [)" +
                              std::to_string(rows) +
                              R"(, 256], "dtype": "f32",
                   "src": {"mesh": "a", "spec": []}, "dst": {"mesh": "b", "spec": []}}]})");
    const ClusterTopology c = cluster(1e-3, 1e9, 1e8);
    const SimBound b = simulate_lower_bound(s.input, c);
    const int64_t bytes = rows * 1024;
    EXPECT_EQ(b.kind, "device_send");
    EXPECT_EQ(b.id, 0);
    EXPECT_EQ(b.bytes, bytes);
    EXPECT_EQ(b.fan, 3);
    const double x = static_cast<double>(bytes) / 1.1e9;
    EXPECT_DOUBLE_EQ(b.seconds, rows == 1 ? 1e-3 + 3 * x : x + (2.0 - 1.0 / 3) * 1e-3);
    for (const std::vector<SimMessage>& m :
         {plan_messages(make_plan(s.input)), direct_p2p_messages(s.input)})
      EXPECT_GE(simulate(s.input.topology, c, m).seconds, b.seconds);
  }
}

// Every host together: psum over dp = 4 hosts of 2 devices (the host's two
// devices hold one summand), 16 MiB f32 needed on all 8. An element of 4
// summands, one per host, needed on 4 hosts none of which holds them all,
// takes 4 + 4 - 1 - 1 = 6 crossings (the gossip bound over hosts), 6 x 16
// MiB over the 4 hosts' 8 NICs of 50 GB/s; each host needs it on both its
// devices, so a crossing either goes to both or is forwarded inside α
// after it completed: 100,663,296 / 1.6e12 + (2 - 1/2) α (α = 5 us), not
// α + 2 x, against α + x without the fan-out.
TEST(SimulateBound, HostsTogetherPayASecondAlphaWhereEachHostFansOut) {
  const Spec s =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/bench/specs/psum_dp4_hosts_of_2.json");
  const ClusterTopology c = load_cluster_topology(std::string(RESHARD_SOURCE_DIR) +
                                                  "/bench/topologies/h100_8gpu_ndr400.json");
  const SimBound b = simulate_lower_bound(s.input, c);
  EXPECT_EQ(b.kind, "hosts");
  EXPECT_EQ(b.id, -1);
  EXPECT_EQ(b.bytes, 6 * (int64_t{16} << 20));
  EXPECT_EQ(b.fan, 2);
  EXPECT_DOUBLE_EQ(b.seconds, 100663296 / 1.6e12 + 1.5 * 5e-6);
  EXPECT_GE(simulate_plan(s.input, c).seconds, b.seconds);
  EXPECT_GE(simulate(s.input.topology, c, direct_p2p_messages(s.input)).seconds, b.seconds);
}

// The hosts' fan-out holds over every plan: psums over 3-5 hosts of 2-3
// devices (a host's devices hold one summand, whole or sharded), needed
// replicated or sharded over each host's devices, at random α and
// bandwidths; the default plan, the single-hop plan, direct_p2p and the
// default plan's messages each split into 4 of sizes 1, 2, 3, 4 in the same
// round (sub-message j of a forward after sub-message j of what it waited
// for: forwards start before the whole message arrived, as close to the
// bound as these schedules come) simulate at or above it.
TEST(SimulateBound, HostsTogetherFanOutNeverAboveASimulatedPlan) {
  const int cases = scaled_cases(60);
  int binds = 0;
  std::mt19937_64 rng(3501);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int nh = uni(3, 5), per = uni(2, 3);
    std::string devices, processes, hosts;
    for (int d = 0; d < nh * per; ++d) {
      const std::string sep = d == 0 ? "" : ", ";
      devices += sep + std::to_string(d);
      processes += sep + std::to_string(d);
      hosts += sep + std::to_string(d / per);
    }
    const char* src = uni(0, 1) ? "[null, null]" : R"(["k", null])";
    const char* dst = uni(0, 3) ? "[null, null]" : R"(["k", null])";
    Spec s = parse_spec(
        R"({"meshes": {"m": {"axis_names": ["dp", "k"], "shape": [)" + std::to_string(nh) + ", " +
        std::to_string(per) + R"(], "devices": [)" + devices + R"(], "processes": [)" + processes +
        R"(], "hosts": [)" + hosts + R"(]}}, "tensors": [{"name": "g", "shape": [)" +
        std::to_string(6 * uni(1, 64)) + R"(, 96], "dtype": "f32",
      "src": {"mesh": "m", "spec": )" +
        src + R"(, "partial": {"axes": ["dp"]}}, "dst": {"mesh": "m", "spec": )" + dst + "}}]}");
    const double alphas[] = {0, 1e-6, 5e-6, 1e-4};
    const ClusterTopology cl = cluster(alphas[uni(0, 3)], uni(0, 1) ? 4.5e11 : 1e9,
                                       uni(0, 1) ? 5e10 : 1e8, uni(0, 1) ? 0 : 8);
    plan_with_cluster_costs(s.input.options, cl);
    const SimBound b = simulate_lower_bound(s.input, cl);
    binds += b.kind == "hosts" && b.fan > 1;
    PlanInput single = s.input;
    single.options.relays = false;
    single.options.reduce_scatter = false;
    const std::vector<SimMessage> m = plan_messages(make_plan(s.input));
    std::vector<SimMessage> split;
    for (const SimMessage& x : m) {
      int64_t left = x.bytes;
      for (uint32_t j = 0; j < 4; ++j) {
        SimMessage y = x;
        y.bytes = j == 3 ? left : x.bytes * (j + 1) / 10;
        left -= y.bytes;
        y.after.clear();
        for (uint32_t a : x.after) y.after.push_back(a * 4 + j);
        split.push_back(std::move(y));
      }
    }
    for (const std::vector<SimMessage>& x :
         {m, split, plan_messages(make_plan(single)), direct_p2p_messages(s.input)}) {
      const double t = simulate(s.input.topology, cl, x).seconds;
      ASSERT_GE(t * (1 + 1e-12) + 1e-15, b.seconds) << b.kind << " fan " << b.fan;
    }
  }
  EXPECT_GT(binds, cases / 4);  // the hosts' fan-out binds often here
}

// The bound holds over every plan: on random small fleets (1-5 hosts,
// partial and explicit layouts, random α, bandwidths and NICs), the default
// plan and the single-hop plan, planned at the case's own costs, simulate
// at or above it.
TEST(SimulateBound, NeverAboveASimulatedPlanOnRandomFleets) {
  const int cases = scaled_cases(1000);
  int fanned = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseGen gen(91000 + static_cast<uint64_t>(c), {3, 12, 2, 9, true, true});
    PlanInput in = gen.input();
    const int32_t nh = static_cast<int32_t>(gen.uni(1, 5));
    Topology topo;
    for (const DeviceInfo& d : in.topology.devices())
      topo.add(
          {d.device, static_cast<int32_t>(d.device), static_cast<int32_t>(gen.uni(0, nh - 1)), 0});
    in.topology = topo;
    const double alphas[] = {0, 1e-6, 1e-4, 1e-3};
    const int32_t nics[] = {0, 1, 2, 8};
    const ClusterTopology cl =
        cluster(alphas[gen.uni(0, 3)], gen.coin() ? 1e9 : 4.5e11, gen.coin() ? 1e8 : 5e10,
                nics[gen.uni(0, 3)], gen.coin(0.25) ? 1.5e8 : 0);
    const SimBound b = simulate_lower_bound(in, cl);
    fanned += b.fan > 1;
    PlanInput single = in;
    single.options.relays = false;
    single.options.reduce_scatter = false;
    for (const PlanInput* p : {&in, &single}) {
      const double t = simulate(p->topology, cl, plan_messages(make_plan(*p))).seconds;
      ASSERT_GE(t * (1 + 1e-12) + 1e-15, b.seconds) << b.kind << " " << b.id << " fan " << b.fan;
    }
    const double d = simulate(in.topology, cl, direct_p2p_messages(in)).seconds;
    ASSERT_GE(d * (1 + 1e-12) + 1e-15, b.seconds) << b.kind << " " << b.id << " fan " << b.fan;
  }
  EXPECT_GT(fanned, cases / 10);  // the fan-out term binds often
}

TEST(SimulateBound, PlanMessagesByPartEqualTheWholePlan) {
  const Spec s = replicate_to_one_host();
  std::vector<SimMessage> whole = plan_messages(make_plan(s.input));
  std::vector<SimMessage> parts = plan_messages_by_part(s.input);
  auto less = [](const SimMessage& a, const SimMessage& b) {
    return std::tie(a.stage, a.round, a.src_device, a.dst_device, a.bytes) <
           std::tie(b.stage, b.round, b.src_device, b.dst_device, b.bytes);
  };
  std::sort(whole.begin(), whole.end(), less);
  std::sort(parts.begin(), parts.end(), less);
  EXPECT_EQ(whole, parts);
  EXPECT_FALSE(whole.empty());
}

// Memory is known before it is spent: above max_bytes the call refuses from
// the global statistics' message count, naming the estimate, before any part
// is planned; at the estimate it plans.
TEST(SimulateBound, PlanMessagesByPartRefusesAboveItsMemoryLimit) {
  const Spec s = replicate_to_one_host();
  const int64_t messages = make_plan(s.input, {PlanScope::kGlobal}).stats().messages;
  ASSERT_GT(messages, 0);
  const int64_t need = sim_memory_estimate(messages);
  EXPECT_EQ(need, messages * kSimBytesPerMessage);
  int64_t parts = 0;
  try {
    plan_messages_by_part(
        s.input, 1, [&](int64_t, int64_t) { ++parts; }, need - 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(need) + " bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parts, 0) << "a part was planned before the refusal";
  EXPECT_EQ(plan_messages_by_part(s.input, 1, nullptr, need).size(), static_cast<size_t>(messages));
  try {
    plan_messages_by_part(s.input, 1, nullptr, -5);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(sim_memory_estimate(0), 0);
  EXPECT_EQ(sim_memory_estimate(INT64_MAX / 2), INT64_MAX);
}

// The same messages with stage barriers: a message of a later stage waits
// for every earlier-stage message into its sender, not only for those that
// brought what it forwards.
std::vector<SimMessage> behind_stage_barriers(const std::vector<SimMessage>& m) {
  std::vector<SimMessage> barrier = m;
  for (SimMessage& x : barrier) {
    x.after.clear();
    if (x.stage == 0) continue;
    for (uint32_t i = 0; i < barrier.size(); ++i)
      if (m[i].stage < x.stage && m[i].dst_device == x.src_device) x.after.push_back(i);
  }
  return barrier;
}

// plan_messages gives each forwarded message the messages that brought
// what it forwards: earlier stages, into the device that forwards.
TEST(SimulateBound, ForwardsWaitForTheMessagesThatBroughtTheirData) {
  const Spec s =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/tests/mpi/specs/relay_one_holder_3_hosts.json");
  PlanInput in = s.input;
  in.options.staging_budget_bytes = 64 << 10;  // several rounds per stage
  const std::vector<SimMessage> m = plan_messages(make_plan(in));
  int forwards = 0;
  uint32_t max_stage = 0;
  for (const SimMessage& x : m) {
    max_stage = std::max(max_stage, x.stage);
    if (x.stage == 0) {
      EXPECT_TRUE(x.after.empty());
      continue;
    }
    ++forwards;
    EXPECT_FALSE(x.after.empty()) << x.src_device << " -> " << x.dst_device;
    for (uint32_t a : x.after) {
      ASSERT_LT(a, m.size());
      EXPECT_LT(m[a].stage, x.stage);
      EXPECT_EQ(m[a].dst_device, x.src_device);
    }
  }
  EXPECT_EQ(max_stage, 2u);
  EXPECT_GT(forwards, 0);
  // Pipelined, the plan ends before the same messages with stage barriers.
  const ClusterTopology c = cluster(1e-5, 1e9, 1e8);
  EXPECT_LT(simulate(in.topology, c, m).seconds,
            simulate(in.topology, c, behind_stage_barriers(m)).seconds);
}

// Relay bands (plan/enumerate.h): the RL weight sync's relays (one entry of
// each tensor-parallel cell per replica on host 1 takes a source cell in and
// forwards it to the other replica) forward each band once the messages
// that brought that band arrived, not the whole stream: without a budget
// and with the default 1 GiB, which cuts none of these streams. Planner
// version 5 sent each stream in one message, so every forward waited for
// everything its relay received, the same as a stage barrier.
TEST(SimulateBound, RelayBandsForwardBeforeTheirWholeStreamArrived) {
  const Spec s =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/bench/specs/rl_sync_fsdp8_to_2x_tp4.json");
  for (int64_t budget : {int64_t{0}, int64_t{1} << 30}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    PlanInput in = s.input;
    in.options.staging_budget_bytes = budget;
    const std::vector<SimMessage> m = plan_messages(make_plan(in));
    std::map<int64_t, size_t> into;  // stage-0 messages into each relay
    for (const SimMessage& x : m)
      if (x.stage == 0) ++into[x.dst_device];
    std::map<int64_t, size_t> fewest;  // per relay, the fewest a forward waits for
    for (const SimMessage& x : m) {
      if (x.stage == 0) continue;
      EXPECT_FALSE(x.after.empty());
      auto [it, fresh] = fewest.try_emplace(x.src_device, x.after.size());
      it->second = std::min(it->second, x.after.size());
    }
    ASSERT_EQ(fewest.size(), 8u);  // every destination device relays
    for (const auto& [relay, n] : fewest) EXPECT_LT(n, into[relay]) << "relay " << relay;
    // So the plan ends before the same messages with stage barriers.
    const ClusterTopology c = cluster(1e-5, 1e9, 1e8);
    EXPECT_LT(simulate(in.topology, c, m).seconds,
              simulate(in.topology, c, behind_stage_barriers(m)).seconds);
  }
}

TEST(SimulatePeers, Rank0BroadcastGathersThenPipelinesDownAChain) {
  const Spec s = replicate_to_one_host();
  const std::vector<SimMessage> m = rank0_broadcast_messages(s.input, 8);
  // Device 0 is the root and holds everything: no gather; a chain of 4
  // hops, 8 chunks each.
  ASSERT_EQ(m.size(), 32u);
  int64_t bytes = 0;
  for (const SimMessage& x : m) {
    EXPECT_EQ(x.stage, 1u);
    bytes += x.bytes;
  }
  EXPECT_EQ(bytes, 4 * (4 << 20));
  // Chunk 0 crosses hop 0 (0 -> 1) in round 0, hop 3 (3 -> 4) in round 3.
  EXPECT_EQ(m[0].src_device, 0);
  EXPECT_EQ(m[0].dst_device, 1);
  EXPECT_EQ(m[24].src_device, 3);
  EXPECT_EQ(m[24].round, 3u);
  try {
    rank0_broadcast_messages(s.input, -1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "chunks");
  }
}

TEST(SimulatePeers, LayeredInjectsOnceThenFansOutInsideTheHost) {
  const Spec s = replicate_to_one_host();
  std::vector<SimMessage> m = layered_messages(s.input, 1);
  // Device 1 leads host 1: it takes the 4 MiB in (round 0) and forwards
  // them to 2, 3 and 4 (round 1).
  const std::vector<SimMessage> want = {
      {0, 1, 0, 0, 4 << 20}, {1, 2, 0, 1, 4 << 20}, {1, 3, 0, 1, 4 << 20}, {1, 4, 0, 1, 4 << 20}};
  EXPECT_EQ(m, want);
  const SimResult r = simulate(s.input.topology, cluster(1e-3, 1e9, 1e8), m);
  EXPECT_NEAR(r.seconds, 2e-3 + (4 << 20) / 1e8 + 3.0 * (4 << 20) / 1e9, 1e-12);
  // Two chunks: the fan-out of chunk 0 overlaps the injection of chunk 1.
  m = layered_messages(s.input, 2);
  EXPECT_EQ(m.size(), 7u + 1u);  // rounds 0, 1 (inject + 3 fan-outs), 2 (3 fan-outs)
  try {
    layered_messages(s.input, -2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "chunks");
  }
}

}  // namespace
}  // namespace reshard
