// The α–β estimate of core/src/plan/stage_cost.h on plans small enough to
// compute by hand: one device per host, one NIC each, α = 1 µs and 1 GB/s
// between hosts (1,000 bytes take 1 µs).
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "plan/rounds.h"
#include "plan/stage_cost.h"

namespace reshard::planning {
namespace {

constexpr double kUs = 1e-6;

struct Chain {
  Bounds lb;
  PlanOptions o;
  std::deque<std::vector<Acc>> stages;

  explicit Chain(size_t devices) {
    lb.group_of_device.resize(devices);
    for (size_t d = 0; d < devices; ++d) lb.group_of_device[d] = static_cast<uint32_t>(d);
    lb.group_nics.assign(devices, 1);
    lb.host_of_device = lb.group_of_device;
    o.alpha_seconds = 1 * kUs;
    o.inter_host_bytes_per_second = 1e9;
    o.intra_host_bytes_per_second = 1e10;
  }
  // Stage `s` sends `bytes` from device a to device b across hosts, in
  // `msgs` messages.
  void send(size_t s, size_t a, size_t b, int64_t bytes, int64_t msgs = 1) {
    while (stages.size() <= s) stages.emplace_back(lb.group_nics.size());
    stages[s][a].send += bytes;
    stages[s][a].send_inter += bytes;
    stages[s][a].send_msgs += msgs;
    stages[s][b].recv += bytes;
    stages[s][b].recv_inter += bytes;
    stages[s][b].recv_msgs += msgs;
  }
  double cost(std::vector<int64_t> rounds) const { return stage_cost(stages, rounds, lb, o); }
};

// Sub-messages on a Chain (KeyedRounds::subs): each stream's bytes of
// each sub, sent as one message a sub.
struct SubChain : Chain {
  std::deque<std::vector<std::vector<Acc>>> rows;  // per stage, sub, device
  KeyedRounds kr;
  SubChain(size_t devices, size_t subs) : Chain(devices), nsubs(subs) { kr.subs = true; }
  // Stage `s` sends bytes[j] of sub j from device a to device b.
  void send_subs(size_t s, size_t a, size_t b, const std::vector<int64_t>& bytes) {
    while (rows.size() <= s) rows.emplace_back(nsubs, std::vector<Acc>(lb.group_nics.size()));
    while (kr.sub_streams.size() <= s) kr.sub_streams.emplace_back();
    SubStream x{static_cast<uint32_t>(a), static_cast<uint32_t>(b), 0};
    for (size_t j = 0; j < bytes.size(); ++j) {
      if (bytes[j] <= 0) continue;
      send(s, a, b, bytes[j]);
      Acc& out = rows[s][j][a];
      Acc& in = rows[s][j][b];
      out.send += bytes[j], out.send_inter += bytes[j], ++out.send_msgs;
      in.recv += bytes[j], in.recv_inter += bytes[j], ++in.recv_msgs;
      x.mask |= 1u << j;
    }
    kr.sub_streams[s].push_back(x);
  }
  // The rounds as choose_subs prices them: each sub's busiest link.
  const KeyedRounds& rounds() {
    kr.sub_rows = &rows;
    kr.seconds.assign(rows.size(), {});
    for (size_t s = 0; s < rows.size(); ++s)
      for (const std::vector<Acc>& x : rows[s])
        kr.seconds[s].push_back(busiest_link_seconds(x, lb, o));
    return kr;
  }
  double cost() {
    return stage_cost(stages, std::vector<int64_t>(stages.size(), 1), lb, o, RoundSizes::kEven,
                      &rounds());
  }
  // The subs' pipeline alone, every stage moving and no stall.
  double pipeline() {
    return sub_pipeline(rounds(), std::vector<double>(stages.size(), 1.0),
                        std::vector<double>(stages.size(), 0.0), lb, o);
  }
  size_t nsubs;
};

TEST(StageCost, OneStageTakesAlphaPerRoundAndItsBusiestLink) {
  Chain c(2);
  c.send(0, 0, 1, 4000);
  // 4 µs on device 0's NIC out and device 1's NIC in, one α per round.
  EXPECT_NEAR(c.cost({1}), 5 * kUs, 1e-12);
  EXPECT_NEAR(c.cost({4}), 8 * kUs, 1e-12);
}

TEST(StageCost, ForwardStartsTwoRoundsAfterTheStageBeforeIt) {
  // A relay chain 0 -> 1 -> 2, 4,000 bytes in each stage, 4 rounds each:
  // T_s = 4 α + 4 µs = 8 µs, one round 2 µs. The forward's round r reads
  // what arrived up to round r + 1 (kForwardLagRounds = 1), so it starts
  // after 2 rounds of stage 0 (4 µs) and ends 8 µs later: 12 µs, against
  // 16 µs one stage after the other. (Without the lag it would be 10 µs.)
  ASSERT_EQ(kForwardLagRounds, 1.0);
  Chain c(3);
  c.send(0, 0, 1, 4000);
  c.send(1, 1, 2, 4000);
  EXPECT_NEAR(c.cost({4, 4}), 12 * kUs, 1e-12);
  EXPECT_NEAR(c.cost({1, 1}), 10 * kUs, 1e-12);  // 2 × (α + 4 µs), serial
}

TEST(StageCost, TwoRoundsPerStageDoNotOverlap) {
  // The same chain in 2 rounds: T_s = 2 α + 4 µs = 6 µs, one round 3 µs;
  // the forward's first round waits for both rounds of stage 0, so the
  // stages run one after the other: 12 µs (the fleet simulator's time for
  // bench/specs/psum_dp4_hosts_of_2.json cut this way is also the sum of
  // its stages).
  Chain c(3);
  c.send(0, 0, 1, 4000);
  c.send(1, 1, 2, 4000);
  EXPECT_NEAR(c.cost({2, 2}), 12 * kUs, 1e-12);
}

TEST(StageCost, ALinkServingTwoStagesCarriesBothAfterTheFill) {
  // Device 1 receives 4,000 bytes in stage 0 and 8,000 more in stage 1
  // (from device 2, which received nothing): 4 rounds each. Stage 0:
  // T = 8 µs, one round 2; stage 1: T = 4 + 8 = 12 µs, one round 3.
  // Stage 1 starts after 2 rounds of stage 0, at 4 µs (its stall on device
  // 1's NIC in, φ = 1/2, ρ = 1: W = 4 / 0.5 × 0.5 = 4 µs, no later).
  // Pipeline: max(0 + 8 + 2 × 3, 4 + 12) = 16 µs. Device 1's NIC in: from
  // the start, 12 µs over both stages plus α × 4, 16 µs; from stage 1's
  // start, stage 1's 8 µs and what is left of stage 0 then, spread over
  // its 8 µs: 4 × (8 − 4) / 8 = 2 µs, so 4 + 10 + 4 α = 18 µs. Serial:
  // 20 µs. So 18 µs.
  Chain c(3);
  c.send(0, 0, 1, 4000);
  c.send(1, 2, 1, 8000);
  EXPECT_NEAR(c.cost({4, 4}), 18 * kUs, 1e-12);
  // Device 1 takes 8,000 bytes in each stage (from 0, then from 2). T_s =
  // 4 + 8 = 12 µs, one round 3; stage 1 starts at 6 µs, its stall W = 8 /
  // 0.5 × 0.5 = 8 µs; pipeline max(0 + 12 + 6, 8 + 12) = 20 µs; device
  // 1's NIC in from the start 16 + 4 α = 20 µs, from stage 1's start
  // (6 µs) 8 + 8 × (12 − 6) / 12 + 4 α = 16 µs: 22 µs; serial 24 µs. So
  // 22 µs.
  Chain d(3);
  d.send(0, 0, 1, 8000);
  d.send(1, 2, 1, 8000);
  EXPECT_NEAR(d.cost({4, 4}), 22 * kUs, 1e-12);
}

TEST(StageCost, ALinkAnEarlierStageLeavesPartIdleCarriesItsRestAfterTheLaterStart) {
  // Stage 0: device 0 sends 4,000 bytes to device 1 and 8,000 to device
  // 2; its NIC out (12 µs) paces the stage, T_0 = 4 α + 12 = 16 µs in 4
  // rounds of 4. Stage 1: device 2 sends 16,000 bytes to device 1, T_1 =
  // 4 + 16 = 20 µs, rounds of 5. Stage 1 starts after 2 rounds of stage 0,
  // at 8 µs (stall on device 1's NIC in: φ = 1/2, ρ = 1, W = 4 µs).
  // Device 1's NIC in carries 4 µs of stage 0, spread over its 16: half of
  // it (2 µs) is left when stage 1 starts, so it ends no sooner than
  // 8 + 2 + 16 + 4 α = 30 µs (the fleet simulator on two_holder_hosts_to_
  // 6_hosts: the receiving hosts' NICs take stage 0 slowly, paced by the
  // holders', before their forwards start). Pipeline: max(0 + 16 + 2 × 5,
  // 8 + 20) = 28 µs; device 0's NIC out 12 + 4 α + 2 × 5 = 26 µs; serial
  // 36 µs. So 30 µs (28 µs taking the link as busy from 0 on).
  Chain c(3);
  c.send(0, 0, 1, 4000);
  c.send(0, 0, 2, 8000);
  c.send(1, 2, 1, 16000);
  EXPECT_NEAR(c.cost({4, 4}), 30 * kUs, 1e-12);
  EXPECT_LE(stage_cost_floor(c.stages, c.lb, c.o), c.cost({4, 4}));
}

TEST(StageCost, BandsAboveZeroLengthenTheFirstRound) {
  // A relay chain 0 -> 1 -> 2. Stage 0 moves 8,000 bytes in 3 rounds:
  // 1,000 of them in bands above 0 (rounds 1 and 2, Acc::send_late), the
  // rest in round 0. T_0 = 3 α + 8 = 11 µs: round 0 takes α + 7 = 8 µs,
  // rounds 1 and 2 (11 − 8) / 2 = 1.5 µs each. Stage 1 forwards 4,000
  // bytes in 3 even rounds: T_1 = 3 + 4 = 7 µs, rounds of 7/3. Its first
  // round waits for rounds 0 and 1 of stage 0: 9.5 µs, so it ends at
  // 16.5 µs (the fleet simulator on rl_sync_uneven_replicas_4_to_2_hosts
  // unpipelined: the forwards wait for a first round that carries four
  // fifths of the stage). Stage 0's pipeline 11 + 2 × 7/3 = 15.667 µs;
  // serial 18 µs. So 16.5 µs.
  Chain c(3);
  c.send(0, 0, 1, 8000);
  c.send(1, 1, 2, 4000);
  c.stages[0][0].send_late = 1000;
  c.stages[0][1].recv_late = 1000;
  EXPECT_NEAR(c.cost({3, 3}), 16.5 * kUs, 1e-12);
  // Even rounds (pipelined, bands merged into their streams): the forward
  // starts after 2 × 11/3 µs and ends at 14.333 µs; stage 0's pipeline,
  // 15.667 µs, binds.
  EXPECT_NEAR(stage_cost(c.stages, {3, 3}, c.lb, c.o, RoundSizes::kEven), (11 + 14.0 / 3) * kUs,
              1e-12);
}

TEST(StageCost, TheLastRoundsOfALaterStageWaitForTheEndOfTheStageBefore) {
  // A relay chain 0 -> 1 -> 2: 8,000 bytes in stage 0, 4,000 in stage 1,
  // 4 rounds each: T_0 = 12 µs (rounds of 3), T_1 = 8 µs (rounds of 2).
  // The forward's round r reads up to round r + 1 of stage 0, so its last
  // two rounds wait for the end of stage 0: 12 + 2 × 2 = 16 µs (the
  // forward's own pipeline: 2 × 3 + 8 = 14 µs; serial 20 µs).
  ASSERT_EQ(kForwardLagRounds, 1.0);
  Chain c(3);
  c.send(0, 0, 1, 8000);
  c.send(1, 1, 2, 4000);
  EXPECT_NEAR(c.cost({4, 4}), 16 * kUs, 1e-12);
}

TEST(StageCost, AStageWithFewMessagesOnALinkWaitsForTheStagesBeforeIt) {
  // Stage 0: device 0 sends 20,000 bytes to device 1 (20 µs) in 7
  // messages. Stage 1: device 2 sends 20,000 bytes to each of 1 and 3 in
  // one message each; its NIC out (40 µs) is the stage's busiest link. 4
  // rounds each: T_0 = 4 α + 20 = 24 µs (one round 6), T_1 = 4 + 40 = 44
  // µs; the fill of stage 1 is 2 rounds of stage 0, 12 µs.
  // Device 1's NIC in carries E = 20 µs of stage 0 and is shared: stage 1
  // has φ = 1 / (1 + 7) of its messages and needs ρ = 20 / 40 of it, so it
  // stalls W_1 = E / (1 − φ) · (1 − φ / ρ) = 20 / 0.875 × 0.75 = 17.142857
  // µs > 12. Pipeline: 17.142857 + 44 = 61.142857 µs; device 2's NIC out
  // 17.142857 + 40 + 4 α, the same; device 1's NIC in 0 + 40 + 4 = 44;
  // serial 68. So 61.142857 µs (56 µs, 12 + 44, without the stall).
  Chain c(4);
  c.send(0, 0, 1, 20000, 7);
  c.send(1, 2, 1, 20000);
  c.send(1, 2, 3, 20000);
  EXPECT_NEAR(c.cost({4, 4}), 61.142857142857 * kUs, 1e-11);
  // With one message in stage 0 stage 1 has φ = 1/2 of device 1's NIC in,
  // all the ρ = 1/2 it needs: no stall, 12 + 44 = 56 µs.
  Chain d(4);
  d.send(0, 0, 1, 20000, 1);
  d.send(1, 2, 1, 20000);
  d.send(1, 2, 3, 20000);
  EXPECT_NEAR(d.cost({4, 4}), 56 * kUs, 1e-12);
  // The stall never takes the estimate above the stages one after the
  // other (68 µs), and never below the floor.
  EXPECT_LE(c.cost({4, 4}), 68 * kUs);
  EXPECT_LE(stage_cost_floor(c.stages, c.lb, c.o), c.cost({4, 4}));
}

TEST(StageCost, KeyedRoundsWaitOnlyForTheirOwnRoundAndAreAsLongAsTheirKeys) {
  // The chain 0 -> 1 -> 2 of 4,000 bytes a stage in 2 keyed rounds
  // (plan/rounds.h, RoundRule::keys): round r of the forward waits only for
  // round r of stage 0 (lag 0). Even keys, 2,000 bytes each: every round
  // takes α + 2 µs = 3 µs; round 0 of stage 1 ends at 3 + 3 = 6 µs, round 1
  // at max(6, 6) + 3 = 9 µs. The links agree: stage 0's carry 4 µs after
  // no fill, plus α per round (2 µs) and stage 1's last round (3 µs): 9 µs;
  // stage 1's after stage 0's first round (3 µs), 4 + 2 = 9 µs. Unkeyed, 2
  // rounds do not overlap at all: 12 µs (TwoRoundsPerStageDoNotOverlap).
  Chain c(3);
  c.send(0, 0, 1, 4000);
  c.send(1, 1, 2, 4000);
  KeyedRounds even{{{2 * kUs, 2 * kUs}, {2 * kUs, 2 * kUs}}};
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &even), 9 * kUs, 1e-12);
  EXPECT_NEAR(c.cost({2, 2}), 12 * kUs, 1e-12);
  // Keys of 3,000 and 1,000 bytes in both stages: rounds of 4 and 2 µs.
  // Round 0 of stage 1 ends at 4 + 4 = 8 µs, round 1 at max(8, 6) + 2 = 10
  // µs; stage 1's links: after stage 0's first round (4 µs), 4 + 2 α = 10
  // µs; stage 0's: 4 + 2 α + stage 1's last round (2 µs) = 8 µs. So 10 µs:
  // uneven keys cost what their longest rounds hold up.
  KeyedRounds uneven{{{3 * kUs, 1 * kUs}, {3 * kUs, 1 * kUs}}};
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &uneven), 10 * kUs, 1e-12);
  // A round no stream of the stage holds takes nothing: stage 1 only in
  // round 1 (4,000 bytes, 5 µs) starts after stage 0's round 1 (at 4 + 2 =
  // 6 µs) and ends at 11 µs, the pipeline; stage 0's links: 4 + 2 α + that
  // last round (5 µs) = 11 µs; stage 1's after stage 0's first round (4
  // µs): 4 + 4 + 2 α = 10 µs. So 11 µs.
  KeyedRounds late{{{3 * kUs, 1 * kUs}, {0, 4 * kUs}}};
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &late), 11 * kUs, 1e-12);
}

TEST(StageCost, KeyedForwardsWaitOnlyForTheStreamsThatFeedThem) {
  // Two hosts of two devices, each device its own NIC: 1,000 bytes take
  // 1 µs across hosts and 0.1 µs within one; α = 1 µs; 2 keyed rounds.
  // Stage 0: device 0 sends 4,000 bytes across to device 2 (2,000 a key)
  // and 1,000 within its host into device 1's scratch (500 a key); stage
  // 1: device 1 forwards those across to device 3 (its NIC is idle in
  // stage 0). Stage 0 takes 2 α + 4 µs = 6 µs, rounds of 3 µs.
  Chain c(4);
  c.lb.host_of_device = {0, 0, 1, 1};
  std::deque<std::vector<std::vector<Acc>>> rows(
      2, std::vector<std::vector<Acc>>(2, std::vector<Acc>(4)));
  auto charge = [&](std::vector<Acc>& x, size_t a, size_t b, int64_t bytes) {
    x[a].send += bytes, x[b].recv += bytes;
    ++x[a].send_msgs, ++x[b].recv_msgs;
    if (c.lb.host_of_device[a] != c.lb.host_of_device[b])
      x[a].send_inter += bytes, x[b].recv_inter += bytes;
  };
  auto send = [&](size_t s, size_t a, size_t b, int64_t bytes) {
    while (c.stages.size() <= s) c.stages.emplace_back(4);
    charge(c.stages[s], a, b, bytes);
    for (std::vector<Acc>& round : rows[s]) charge(round, a, b, bytes / 2);
  };
  send(0, 0, 2, 4000);
  send(0, 0, 1, 1000);
  send(1, 1, 3, 1000);
  KeyedRounds kr;
  for (size_t s = 0; s < 2; ++s) {
    kr.seconds.emplace_back();
    kr.loads.emplace_back();
    for (size_t r = 0; r < 2; ++r) {
      kr.seconds[s].push_back(busiest_link_seconds(rows[s][r], c.lb, c.o));
      kr.loads[s].push_back(link_loads(rows[s][r], c.lb, c.o));
    }
  }
  // Aggregated, round r of the forward waits for all of round r of stage
  // 0: it ends at 3 + (α + 0.5) = 4.5 µs and 6 + 1.5 = 7.5 µs; stage 0's
  // links: 4 µs, 2 α and the forward's last round, 7.5 µs.
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &kr), 7.5 * kUs, 1e-12);
  // Its senders known: device 1 forwards a sending-side transit (kind 0),
  // fed over device 0's port out and its own port in (0.05 µs a round),
  // each device its own process. Round 0 of the forward starts when its
  // feed arrived, at α + 0.05 = 1.05 µs, and ends at 2.55; round 1's feed
  // leaves when device 0's round 0 ended (3 µs) and arrives at 4.05, the
  // forward ends at 5.55. Stage 0's NIC links feed nothing: 4 + 2 α = 6
  // µs, no forward after them; its port links carry 0.1 µs, 2 α and the
  // forward's last round (1.5 µs); the forward's links start at its first
  // round (1.05 µs): 1.05 + 1 + 2 α = 4.05. So 6 µs: the forward hides
  // behind stage 0, as the fleet simulator runs it.
  kr.lanes = 4;
  kr.streams.resize(2);
  kr.streams[1].push_back({1, 3, 0b11, 0b1, 1, 3});
  kr.senders.resize(2);
  kr.senders[1].push_back({{0.05 * kUs, 0.05 * kUs}, {0.5 * kUs, 0.5 * kUs}});
  kr.senders_at.resize(2);
  kr.senders_at[1].assign(4 * KeyedRounds::kForwardKinds, -1);
  kr.senders_at[1][1 * KeyedRounds::kForwardKinds + 0] = 0;
  kr.feed_links.assign(1, std::vector<double>(kr.loads[0][0].size(), 0.0));
  const auto [out, in] = stream_links(c.lb, 4, 0, 1);
  kr.feed_links[0][out] = kr.feed_links[0][in] = 0.5 * kUs;
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &kr), 6 * kUs, 1e-12);
  // A forward fed across hosts waits for that: fed over device 0's NIC
  // (2 µs a round) and device 1's port, round 0 arrives at 3 µs and the
  // forward ends at 4.5, round 1 at 3 + 3 = 6 and 7.5 µs: 7.5 µs.
  kr.senders[1][0].feed = {2 * kUs, 2 * kUs};
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &kr), 7.5 * kUs, 1e-12);
}

TEST(StageCost, SubEndsShareTheLinkAmongTheFlowsThatFlow) {
  // Two flows from 0 of 1 and 2 µs: both at half rate until the first ends
  // at 2, the other alone from then: 3. Flows of 2 and 1 µs from 0 and 1:
  // the first alone to 1 (1 µs left), then both at half rate: both at 3.
  // A flow of no work ends at its start.
  EXPECT_EQ(sub_ends({0, 0}, {1, 2}), (std::vector<double>{2, 3}));
  EXPECT_EQ(sub_ends({0, 1}, {2, 1}), (std::vector<double>{3, 3}));
  EXPECT_EQ(sub_ends({5, 0}, {0, 1}), (std::vector<double>{5, 1}));
  // Weighted by messages, 2 : 1: the first at 2/3 of the link ends at 1.5,
  // the other (1.5 µs left) alone at 3.
  EXPECT_EQ(sub_ends({0, 0}, {1, 2}, {2, 1}), (std::vector<double>{1.5, 3}));
}

TEST(StageCost, SubsOfGrowingWidthsEndOneAfterAnotherAndTheirForwardsOverlap) {
  // The chain 0 -> 1 -> 2 of 3,000 bytes a stage as one round of 2 subs of
  // 1,000 and 2,000 bytes (KeyedRounds::subs): each stage's subs share its
  // link. Stage 0's start at α = 1 µs at half rate each: sub 0 ends at
  // 1 + 2 = 3 µs, sub 1 (1 µs left) at 4. The forward's sub 0 starts at
  // 3 + α = 4 and ends at 5 alone; its sub 1 starts at 4 + α = 5 and ends
  // at 7: the pipeline, 7 µs. The links: stage 0's carry 3 µs plus α plus
  // stage 1's drain (α + its last sub, 3 µs): 7; stage 1's after stage 0's
  // lead (α + 2 subs × 1 µs = 3 µs) 3 + 3 + α = 7. So 7 µs, against 8 one
  // stage after the other (2 × (α + 3 µs)) and 8 as 2 keyed rounds of the
  // same widths (rounds of 2 and 3 µs: C_0 = 2, 5; C_1 = 4, 8).
  SubChain c(3, 2);
  c.send_subs(0, 0, 1, {1000, 2000});
  c.send_subs(1, 1, 2, {1000, 2000});
  EXPECT_NEAR(c.cost(), 7 * kUs, 1e-12);
  EXPECT_NEAR(c.Chain::cost({1, 1}), 8 * kUs, 1e-12);
  KeyedRounds keyed{{{1 * kUs, 2 * kUs}, {1 * kUs, 2 * kUs}}};
  EXPECT_NEAR(stage_cost(c.stages, {2, 2}, c.lb, c.o, RoundSizes::kEven, &keyed), 8 * kUs, 1e-12);
  // P = 3 subs of 1,000, 2,000 and 3,000 bytes (6,000 a stage). Stage 0
  // from α = 1: a third each until sub 0 ends at 1 + 3 = 4, then sub 1 (1
  // µs left) and sub 2 (2 left) half each: sub 1 at 6, sub 2 at 7. Stage 1:
  // sub 0 from 5 alone to 6; sub 1 from 7, alone to 8 (1 µs left), then
  // with sub 2 (from 8, 3 µs) at half rate: sub 1 at 10, sub 2 (2 left) at
  // 12. Links: stage 0's 6 + α + stage 1's drain (α + 3) = 11, stage 1's
  // after the lead (α + 3 × 1 µs = 4) 4 + 6 + α = 11; one stage after the
  // other 14. So 12 µs.
  SubChain c3(3, 3);
  c3.send_subs(0, 0, 1, {1000, 2000, 3000});
  c3.send_subs(1, 1, 2, {1000, 2000, 3000});
  EXPECT_NEAR(c3.cost(), 12 * kUs, 1e-12);
  EXPECT_NEAR(c3.Chain::cost({1, 1}), 14 * kUs, 1e-12);
  // Subs of equal widths end together: the forward waits for all of stage
  // 0 (at 4 µs) and ends at 4 + α + 3 = 8, one stage after the other.
  SubChain even(3, 2);
  even.send_subs(0, 0, 1, {1500, 1500});
  even.send_subs(1, 1, 2, {1500, 1500});
  EXPECT_NEAR(even.cost(), 8 * kUs, 1e-12);
  EXPECT_LE(stage_cost_floor(c.stages, c.lb, c.o), c.cost());
}

TEST(StageCost, SubsOfAReducerWaitForTheirLateSummand) {
  // Device 4 sums what 1 and 3 received and forwards the sum to 2, P = 2.
  // Stage 0: 0 -> 1 subs of 1,000 and 2,000 bytes (from α = 1 µs at half
  // rate: sub 0 ends at 3, sub 1 at 4); 2 -> 3 sub 0 alone, 3,000 bytes
  // (1 to 4: this summand's sub 0 is late). Stage 1: 1 -> 4 subs of 1,000
  // and 2,000 (device 1's link: sub 0 from 4 to 5, sub 1 from 5 to 7);
  // 3 -> 4 sub 0, 1,000 (from 4 + α = 5 to 6). Device 4's link in: sub 0
  // (2 µs, two messages) from its first sender's start, 4, alone to 5, then
  // beside sub 1 (from 5, 2 µs, one message) at 2/3 of the link: sub 0 at
  // 6.5, sub 1 (1.5 µs left at 6.5) at 8. Stage 2: 4 -> 2 sub 0 (1,000)
  // from 7.5 to 8.5, sub 1 (2,000) from 9 to 11. The old
  // estimate fed sub j from the busiest link of the stage before (there
  // device 4's in, its subs priced at stage 1's busiest link of each: 1.8
  // and 1.2 µs scaled over stage 0) and said 11.8 µs.
  // The case with the second summand's stage-0 sub 0 of `late` bytes.
  auto reduce = [](int64_t late) {
    SubChain c(5, 2);
    c.send_subs(0, 0, 1, {1000, 2000});
    c.send_subs(0, 2, 3, {late, 0});
    c.send_subs(1, 1, 4, {1000, 2000});
    c.send_subs(1, 3, 4, {1000, 0});
    c.send_subs(2, 4, 2, {1000, 2000});
    return c.pipeline();
  };
  EXPECT_NEAR(reduce(3000), 11 * kUs, 1e-12);
  // The summand later still (2 -> 3 of 5,000 bytes, at 6): 3 -> 4 from 7
  // to 8, so the sum's sub 0 is there at 8 though device 4's link in ends
  // it at 6.5; sub 1 ends at 8 too. The sum's subs start together at 9 and
  // share the link: sub 0 at 11, sub 1 at 12.
  EXPECT_NEAR(reduce(5000), 12 * kUs, 1e-12);
}

TEST(StageCost, SubsOfALaterStageShareALinkWithTheStagesBeforeIt) {
  // Stage 0: 0 -> 1 subs of 1,000 and 2,000 bytes; stage 1: 2 -> 1 sub 0,
  // 1,000 bytes its sender holds from the start. Device 1's link in carries
  // all three messages from α = 1 µs, a third each: both subs 0 end at 4,
  // sub 1 (1 µs left) at 5. Each stage on its own link alone would end at
  // 4 (stage 0's sub 1) and 2 (stage 1).
  SubChain c(3, 2);
  c.send_subs(0, 0, 1, {1000, 2000});
  c.send_subs(1, 2, 1, {1000, 0});
  EXPECT_NEAR(c.pipeline(), 5 * kUs, 1e-12);
}

TEST(StageCost, SubsOfARelayFollowTheirOwnSenderNotTheBusiestLink) {
  // A relay chain 0 -> 1 -> 2 -> 3 of subs of 1,000 and 2,000 bytes, P = 2,
  // and in stage 1 a stream 4 -> 5 of 4,000 bytes of sub 1 that its sender
  // holds from the start (the stage's busiest link). Stage 0: sub 0 ends at
  // 3, sub 1 at 4; stage 1: the relay's sub 0 from 4 to 5, sub 1 from 5 to
  // 7, and 4 -> 5 from α to 5; stage 2: sub 0 from 6 to 7, sub 1 from 8 to
  // 10. The old estimate fed stage 2 from stage 1's busiest link (its subs
  // 0.8 and 3.2 µs from 4 and 5: 4.8 and 8.2) and said 11.2 µs.
  SubChain c(6, 2);
  c.send_subs(0, 0, 1, {1000, 2000});
  c.send_subs(1, 1, 2, {1000, 2000});
  c.send_subs(1, 4, 5, {0, 4000});
  c.send_subs(2, 2, 3, {1000, 2000});
  EXPECT_NEAR(c.pipeline(), 10 * kUs, 1e-12);
}

TEST(StageCost, SpreadRoundsEndInSmallTailRoundsAndForwardsHalfARoundBack) {
  // Spread cuts of 2 even bounds: q = 1/2, then the tail 1 - 1/4, 1 - 1/8;
  // K = 4 rounds of stage 0 with key widths 1/2, 1/4, 1/8, 1/8. A forward's
  // bounds move back by half the round before: 1/2 - 1/4, 3/4 - 1/8, 7/8 -
  // 1/16, widths 1/4, 3/8, 3/16, 3/16.
  const std::vector<double> q = spread_bounds(2);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_DOUBLE_EQ(q[0], 0.5);
  EXPECT_DOUBLE_EQ(q[1], 0.75);
  EXPECT_DOUBLE_EQ(q[2], 0.875);
  EXPECT_DOUBLE_EQ(spread_forward_bound(q, 1), 0.25);
  EXPECT_DOUBLE_EQ(spread_forward_bound(q, 3), 0.8125);
  const KeyedRounds k = spread_rounds(2, q);
  ASSERT_EQ(k.seconds.size(), 2u);
  EXPECT_EQ(k.seconds[0], (std::vector<double>{0.5, 0.25, 0.125, 0.125}));
  EXPECT_EQ(k.seconds[1], (std::vector<double>{0.25, 0.375, 0.1875, 0.1875}));
  // The chain 0 -> 1 -> 2 of 4,000 bytes a stage (4 µs each): stage 0's
  // rounds take α + 2, 1, 0.5, 0.5 µs and end at 3, 5, 6.5, 8 µs; the
  // forward's take α + 1, 1.5, 0.75, 0.75 µs, round r after stage-0 round r
  // (it reads rounds r - 1 and r): 5, 7.5, 9.25, 11 µs. The links: stage
  // 1's after stage 0's first round (3 µs), 4 µs + 4 α = 11 µs; stage 0's
  // 4 + 4 α + the forward's last round (1.75 µs) = 9.75. So 11 µs, against
  // 12 µs pipelined at 4 even rounds one round late.
  Chain c(3);
  c.send(0, 0, 1, 4000);
  c.send(1, 1, 2, 4000);
  EXPECT_NEAR(stage_cost(c.stages, {4, 4}, c.lb, c.o, RoundSizes::kEven, &k), 11 * kUs, 1e-12);
  EXPECT_NEAR(stage_cost(c.stages, {4, 4}, c.lb, c.o, RoundSizes::kEven), 12 * kUs, 1e-12);
  // 24 even bounds (K = 26) on two stages of 1,600 µs: stage-0 rounds of
  // α + 1600/24 µs end at 67.67 r + 67.67 (r < 23), then 35.33, 17.67,
  // 17.67 µs more; a forward's even rounds take as long and wait for
  // their own stage-0 round: round 22 ends at 23 × 67.67 + 67.67 = 1624
  // µs, then α + 1600 (1/32, 1/64, 1/64) µs: 1675, 1701, 1727 µs. Equal
  // stages gain nothing from the tail; pipelined at 40 even rounds the
  // chain takes 1722 µs (PipelineRoundsBalanceTheFillAgainstAlpha), so the
  // estimate keeps the byte cuts there.
  Chain f(3);
  f.send(0, 0, 1, 1600000);
  f.send(1, 1, 2, 1600000);
  const KeyedRounds k24 = spread_rounds(2, spread_bounds(24));
  EXPECT_NEAR(stage_cost(f.stages, {26, 26}, f.lb, f.o, RoundSizes::kEven, &k24), 1727 * kUs, 1e-9);
  // With a forward of 160 µs (a tenth) they win: stage 0 ends at 26 α +
  // 1600 = 1626 µs and the forward's last round (α + 160 / 64 µs) after
  // it: 1629.5 µs (stage 0's links: 1600 + 26 α + that round, the same).
  // Pipelined at pipeline_rounds' k = round(sqrt(2 × 160 / 2)) = 13: T_0
  // = 1613 µs, T_1 = 173, and the forward's last two rounds after stage 0:
  // 1613 + 2 × 173 / 13 = 1639.6 µs.
  Chain g(3);
  g.send(0, 0, 1, 1600000);
  g.send(1, 1, 2, 160000);
  EXPECT_EQ(pipeline_rounds(g.stages, g.lb, g.o), 13);
  EXPECT_NEAR(stage_cost(g.stages, {26, 26}, g.lb, g.o, RoundSizes::kEven, &k24), 1629.5 * kUs,
              1e-9);
  EXPECT_NEAR(stage_cost(g.stages, {13, 13}, g.lb, g.o, RoundSizes::kEven),
              (1613 + 2.0 * 173 / 13) * kUs, 1e-9);
}

TEST(StageCost, PipelineRoundsBalanceTheFillAgainstAlpha) {
  // k = sqrt((1 + L) (Σ T_s − max T_s) / (α S)): two stages of 100 µs each
  // (100,000 bytes), α = 1 µs, S = 2: sqrt(2 × 100 / 2) = 10.
  Chain c(3);
  c.send(0, 0, 1, 100000);
  c.send(1, 1, 2, 100000);
  EXPECT_EQ(pipeline_rounds(c.stages, c.lb, c.o), 10);
  // Two stages of 4 µs: sqrt(2 × 4 / 2) = 2.
  Chain d(3);
  d.send(0, 0, 1, 4000);
  d.send(1, 1, 2, 4000);
  EXPECT_EQ(pipeline_rounds(d.stages, d.lb, d.o), 2);
  // Two stages of 1,600 µs: sqrt(2 × 1600 / 2) = 40 rounds, above
  // kFewPipelineRounds (16), which compute_stats also prices. The chain's
  // pipeline at k rounds: T = k α + 1600 µs, the forward after two rounds
  // of stage 0: 2 T / k + T. k = 16: 2 × 101 + 1616 = 1818 µs; k = 40:
  // 2 × 41 + 1640 = 1722 µs, so the estimate keeps 40.
  Chain f(3);
  f.send(0, 0, 1, 1600000);
  f.send(1, 1, 2, 1600000);
  EXPECT_EQ(pipeline_rounds(f.stages, f.lb, f.o), 40);
  EXPECT_NEAR(stage_cost(f.stages, {16, 16}, f.lb, f.o, RoundSizes::kEven), 1818 * kUs, 1e-9);
  EXPECT_NEAR(stage_cost(f.stages, {40, 40}, f.lb, f.o, RoundSizes::kEven), 1722 * kUs, 1e-9);
  // Two stages of 10,000 µs: sqrt(10000) = 100, clamped to 64.
  Chain g(3);
  g.send(0, 0, 1, 10000000);
  g.send(1, 1, 2, 10000000);
  EXPECT_EQ(pipeline_rounds(g.stages, g.lb, g.o), kMaxPipelineRounds);
  EXPECT_EQ(kMaxPipelineRounds, 64);
  // One stage: nothing to pipeline.
  Chain e(2);
  e.send(0, 0, 1, 100000);
  EXPECT_EQ(pipeline_rounds(e.stages, e.lb, e.o), 1);
}

}  // namespace
}  // namespace reshard::planning
