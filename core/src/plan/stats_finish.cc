// The end of a pass of the global statistics (stats_pass.h, finish):
// streams and messages per device and stage, the round rule chosen by the
// estimate (pipelined or keyed cuts), the bounds and the figures of PlanStats.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <string>

#include "plan/round_figures.h"
#include "plan/scratch_layout.h"
#include "plan/stage_cost.h"
#include "plan/stats_pass.h"
#include "plan/stream_map.h"
#include "reshard/error.h"

namespace reshard::planning {

// Keyed cuts (rounds.h) are tried on plans of at most kKeyedPieces pieces
// (the keyed pass enumerates every piece).
constexpr int64_t kKeyedPieces = int64_t{1} << 20;
// Spread cuts are priced on plans of at most kSpreadPieces pieces: their
// statistics enumerate every piece (Context::track_spread), about 60 ns a
// piece (bench/weight_sync.py's kimi_k2 on GB200, 15.5 M pieces: 0.09 ->
// 0.87 s of global statistics).
constexpr int64_t kSpreadPieces = int64_t{1} << 26;

// Each spread-cut stream's cuts from its pieces' elements per group of like
// tensors (spread_records), by the function that cuts it in the plan
// (spread_stream_cuts): its tensors in its pieces' order (order_pieces:
// by pipeline_ranks' rank), each its elements times its own element size.
SpreadStreams StatsPass::spread_streams(const RoundRule& rule) const {
  const std::vector<TensorSpec>& specs = ctx.input.tensors;
  const std::vector<double> shares = key_shares(specs);
  const std::vector<uint32_t> rank = pipeline_ranks(specs);
  std::vector<SpreadRecord> recs = spread_records;
  std::sort(recs.begin(), recs.end(), [](const SpreadRecord& a, const SpreadRecord& b) {
    return a.stream != b.stream ? a.stream < b.stream : a.group < b.group;
  });
  SpreadStreams out;
  std::vector<std::pair<uint32_t, int64_t>> tensors;  // (rank, bytes)
  std::vector<uint32_t> by_rank(rank.size());
  for (size_t i = 0; i < rank.size(); ++i) by_rank[rank[i]] = static_cast<uint32_t>(i);
  std::vector<SpreadRun> runs;
  const auto last = static_cast<int64_t>(rule.spread.size());
  for (size_t a = 0; a < recs.size();) {
    const uint64_t stream = recs[a].stream;
    const auto stage = static_cast<uint32_t>(stream >> 40);
    tensors.clear();
    for (; a < recs.size() && recs[a].stream == stream; ++a) {
      int64_t volume = recs[a].volume;
      while (a + 1 < recs.size() && recs[a + 1].stream == stream &&
             recs[a + 1].group == recs[a].group)
        add_to(volume, recs[++a].volume, "network_bytes");
      for (size_t i : groups_seen[recs[a].group])
        tensors.push_back({rank[i], mul_of(volume, ctx.tensors[i].esize, "network_bytes")});
    }
    if (!rule.spread_stage(stage)) continue;
    std::sort(tensors.begin(), tensors.end());
    runs.clear();
    int64_t bytes = 0;
    for (const auto& [r, b] : tensors) {
      if (b <= 0) continue;
      const uint32_t t = by_rank[r];
      runs.push_back({b, shares[2 * t], shares[2 * t + 1]});
      add_to(bytes, b, "network_bytes");
    }
    if (bytes <= 0) continue;
    const SpreadCuts c = spread_stream_cuts(rule, stage, bytes, runs, nullptr, nullptr);
    out.keys.push_back(stream);
    out.counts.push_back({bytes, c.kept + 1, stage == 0 ? c.last_key : last});
  }
  return out;
}

PassEnd StatsPass::finish(bool schedule, std::vector<DeviceLoad>* stage_loads,
                          RoundRule* rounds_out) {
  assigned.flush_rows();
  if (stopped) {
    // The guard takes the single-hop plan (GuardStop): what it reads.
    st.cost_seconds = guard_floor;
    st.stages = 1 + last_stage;
    apply_bounds(ctx, *guard_lb, o, st);
    guard->stopped = true;
    std::atomic_ref<int64_t>(guard_stops_taken()).fetch_add(1);  // plans run side by side
    return PassEnd::kDone;
  }
  // Streams (device pairs with a message) per device: stage 0 from the bit
  // rows or the pair set, stage 1 from the relay pairs.
  std::vector<int64_t> send_msgs(ndev, 0), recv_msgs(ndev, 0);
  const auto nstages = static_cast<int>(stage_acc.size());
  std::vector<std::vector<int64_t>> stage_send_msgs(stage_acc.size(),
                                                    std::vector<int64_t>(ndev, 0));
  std::vector<std::vector<int64_t>> stage_recv_msgs = stage_send_msgs;
  if (dense_pairs) {
    // Each column's bits counted bit-sliced: per word of the row, plane i
    // holds bit i of the 64 columns' counts, and a row adds with carries
    // (a column per set bit was most of this loop's time where every
    // device talks to every other: 2^28 bits at 16,384 devices).
    const int nplanes = std::bit_width(ndev);
    std::vector<uint64_t> planes(words * static_cast<size_t>(nplanes), 0);
    for (size_t dd = 0; dd < ndev; ++dd) {
      uint64_t* row = bits.data() + dd * words;
      row[dd >> 6] &= ~(uint64_t{1} << (dd & 63));  // a device never messages itself
      for (size_t w = 0; w < words; ++w) {
        uint64_t carry = row[w];
        stage_recv_msgs[0][dd] += __builtin_popcountll(carry);
        for (uint64_t* c = planes.data() + w * static_cast<size_t>(nplanes); carry; ++c) {
          const uint64_t next = *c & carry;
          *c ^= carry;
          carry = next;
        }
      }
    }
    for (size_t w = 0; w < words; ++w)
      for (int i = 0; i < nplanes; ++i)
        for (uint64_t v = planes[w * static_cast<size_t>(nplanes) + static_cast<size_t>(i)]; v;
             v &= v - 1)
          stage_send_msgs[0][w * 64 + static_cast<size_t>(__builtin_ctzll(v))] += int64_t{1} << i;
  } else {
    for (uint64_t pr : pair_set) {
      ++stage_send_msgs[0][pr >> 32];
      ++stage_recv_msgs[0][pr & 0xffffffffu];
    }
  }
  for (int s = 1; s < nstages; ++s) {
    relay_pairs[s].each([&](uint32_t sd, uint32_t dd) {
      ++stage_send_msgs[s][sd];
      ++stage_recv_msgs[s][dd];
    });
  }
  // Streams cut into bands: a message per band above 0 (a stream with no
  // piece outside them was not counted above); per stage, the most messages
  // one stream has (its rounds without a budget).
  std::vector<int64_t> stage_rounds(stage_acc.size(), 0);
  for (int s = 0; s < nstages; ++s)
    for (size_t d = 0; d < ndev && stage_rounds[s] == 0; ++d)
      if (stage_recv_msgs[s][d] > 0) stage_rounds[s] = 1;
  auto plain_pair = [&](uint32_t s, uint32_t sd, uint32_t dd) {
    if (s > 0) return relay_pairs[s].contains(sd, dd);
    if (dense_pairs) return (bits[dd * words + (sd >> 6)] >> (sd & 63) & 1) != 0;
    return pair_set.count(device_pair_key(sd, dd)) > 0;
  };
  band_streams.each([&](uint64_t key, const BandStream& b) {
    const auto s = static_cast<uint32_t>(key >> 40);
    const auto sd = static_cast<uint32_t>(key >> 20 & 0xfffff);
    const auto dd = static_cast<uint32_t>(key & 0xfffff);
    const int bands = __builtin_popcount(b.mask);
    stage_send_msgs[s][sd] += bands;
    stage_recv_msgs[s][dd] += bands;
    stage_rounds[s] = std::max<int64_t>(stage_rounds[s], bands + (plain_pair(s, sd, dd) ? 1 : 0));
  });
  // Every stage together: the figures of the statistics. Round cutting
  // takes each stage's alone (rounds.h): a round belongs to one stage.
  std::vector<DeviceLoad> loads(static_cast<size_t>(nstages) * ndev);
  for (int s = 0; s < nstages; ++s)
    for (size_t d = 0; d < ndev; ++d)
      loads[static_cast<size_t>(s) * ndev + d] = {stage_send_msgs[s][d] + stage_recv_msgs[s][d],
                                                  stage_acc[s][d].send + stage_acc[s][d].recv};
  for (int s = 0; s < nstages; ++s)
    for (size_t d = 0; d < ndev; ++d) {
      stage_acc[s][d].send_msgs = stage_send_msgs[s][d];
      stage_acc[s][d].recv_msgs = stage_recv_msgs[s][d];
    }
  std::vector<Acc> total(ndev);
  for (int s = 0; s < nstages; ++s) {
    for (size_t d = 0; d < ndev; ++d) {
      const Acc& x = stage_acc[s][d];
      add_to(total[d].send, x.send, "max_send_bytes");
      add_to(total[d].recv, x.recv, "max_recv_bytes");
      add_to(total[d].local, x.local, "local_bytes");
      add_to(total[d].send_inter, x.send_inter, "max_host_send_bytes");
      add_to(total[d].recv_inter, x.recv_inter, "max_host_recv_bytes");
      send_msgs[d] += stage_send_msgs[s][d];
      recv_msgs[d] += stage_recv_msgs[s][d];
    }
  }
  std::vector<int64_t> host_send, host_recv;
  const Bounds lb = compute_bounds(ctx);
  host_send.assign(lb.hosts.size(), 0);
  host_recv.assign(lb.hosts.size(), 0);
  st.per_device.resize(ndev);
  for (size_t d = 0; d < ndev; ++d) {
    const Acc& x = total[d];
    DeviceTraffic& dt = st.per_device[d];
    dt.device = ctx.devices[d];
    dt.send_bytes = x.send;
    dt.recv_bytes = x.recv;
    dt.local_bytes = x.local;
    dt.send_messages = send_msgs[d];
    dt.recv_messages = recv_msgs[d];
    add_to(st.network_bytes, x.recv, "network_bytes");
    add_to(st.local_bytes, x.local, "local_bytes");
    add_to(st.messages, recv_msgs[d], "messages");
    st.max_send_bytes = std::max(st.max_send_bytes, x.send);
    st.max_recv_bytes = std::max(st.max_recv_bytes, x.recv);
    add_to(host_send[lb.host_of_device[d]], x.send_inter, "max_host_send_bytes");
    add_to(host_recv[lb.host_of_device[d]], x.recv_inter, "max_host_recv_bytes");
    if (!budgeted) {
      int64_t staged = x.send;
      add_to(staged, x.recv, "peak_staging_bytes");
      st.peak_staging_bytes = std::max(st.peak_staging_bytes, staged);
    }
  }
  // Pipelined stages (rounds.h, RoundRule): k rounds, stage s's pipeline
  // budget P_s from its busiest device; the estimate counts the rounds the
  // busiest device's streams then span (fewer where the smallest pipelined
  // round m allows fewer). Kept only where the estimate is faster for it:
  // where a link busy over every stage binds, more rounds only add α.
  RoundRule rule;
  rule.budget = o.staging_budget_bytes;
  rule.min_chunk = std::max<int64_t>(1, cross_min_bytes(o));
  st.cost_seconds = stage_cost(stage_acc, stage_rounds, lb, o);
  // k from pipeline_rounds, at most kFewPipelineRounds on plans of at most
  // kKeyedPieces pieces, where keyed cuts are tried (they remove the
  // forwards' lag, and a keyed pass counts at most 32 keys:
  // one_holder_to_8_hosts, keyed at 16, simulates 2.916 ms against 2.919
  // pipelined at 64). Above kFewPipelineRounds both counts
  // are priced and the cheaper by the estimate is kept, so a plan is never
  // slower by it than with at most kFewPipelineRounds rounds.
  std::vector<int64_t> piped_rounds;
  // The last rule priced, kept where it lost: keyed cuts are tried on it
  // too (their lag of 0 can win where forwards one round late lose).
  RoundRule priced;
  auto try_pipeline = [&](int64_t k) {
    std::vector<int64_t> piped = stage_rounds;
    std::vector<int64_t> budgets(static_cast<size_t>(nstages), 0);
    std::vector<int64_t> spans(static_cast<size_t>(nstages), 0);
    for (int s = 0; s < nstages; ++s) {
      int64_t most = 0;
      for (size_t d = 0; d < ndev; ++d)
        most = std::max(most, loads[static_cast<size_t>(s) * ndev + d].bytes);
      if (most <= 0) continue;
      budgets[static_cast<size_t>(s)] = most / k + (most % k != 0 ? 1 : 0);
      spans[static_cast<size_t>(s)] = std::min(k, most / rule.min_chunk + 1);
      piped[static_cast<size_t>(s)] =
          std::max(piped[static_cast<size_t>(s)], spans[static_cast<size_t>(s)]);
    }
    const double cost = stage_cost(stage_acc, piped, lb, o, RoundSizes::kEven);
    priced.pipeline = budgets;
    priced.spans = spans;
    if (cost < st.cost_seconds) {
      st.cost_seconds = cost;
      rule.pipeline = std::move(budgets);
      rule.spans = std::move(spans);
      piped_rounds = std::move(piped);
    }
  };
  // A plan of several stages that move data whose pipeline_rounds is 1
  // (rounds of α each would cost more than their overlap gains) is still
  // priced at 2: the keyed cuts and sub-messages tried on the priced rule
  // need one (below), and sub-messages pay α once a stream, not once a
  // round. On H100 (planner 41): mid_regions_one_holder_to_8_hosts 38.3 ->
  // 33.2 us simulated, psum_dp16_replicated 29.7 -> 25.5.
  int moving = 0;
  int64_t k = pipeline_rounds(stage_acc, lb, o, &moving);
  if (k == 1 && moving >= 2) k = 2;
  if (k > 1) {
    const bool keyed_tried = keyed || pieces <= kKeyedPieces || choice_override().keyed > 0;
    if (k > kFewPipelineRounds && !keyed_tried) try_pipeline(kFewPipelineRounds);
    try_pipeline(keyed_tried ? std::min(k, kFewPipelineRounds) : k);
  }
  if (!piped_rounds.empty()) stage_rounds = std::move(piped_rounds);
  // Spread cuts (rounds.h, RoundRule::spread) on a pipelined plan without
  // a staging budget (their rounds are cut by keys, not by the budget):
  // priced by stage_cost's critical path of their rounds (spread_rounds)
  // and taken where faster than the pipelined estimate by more than
  // kSpreadMinGain of it: the estimate takes every stream's bytes as spread
  // over the keys like its stage's, and gains below that were not real in
  // the simulator (bench/weight_sync.py on H100, --budget 0: kimi_k2_fp8
  // 1.28551 -> 1.28547 s estimated, 1.28706 -> 1.28876 simulated; qwen3_m2n
  // 1.18230 -> 1.18228, 1.18288 -> 1.18262), while on GB200 it gains 0.8%
  // (qwen3_m2n) and 0.2% (kimi_k2_fp8).
  const int64_t spread_pieces =
      choice_override().spread_pieces > 0 ? choice_override().spread_pieces : kSpreadPieces;
  if (!rule.pipeline.empty() && o.staging_budget_bytes <= 0 && choice_override().spread != 0 &&
      (pieces <= spread_pieces || choice_override().spread < 0)) {
    const bool forced = choice_override().spread < 0;
    const std::vector<double> q = spread_bounds(std::abs(choice_override().spread));
    std::vector<int64_t> rounds = stage_rounds;
    for (int s = 0; s < nstages; ++s)
      if (s < static_cast<int>(rule.pipeline.size()) && rule.pipeline[static_cast<size_t>(s)] > 0)
        rounds[static_cast<size_t>(s)] = static_cast<int64_t>(q.size()) + 1;
    const KeyedRounds kr = spread_rounds(static_cast<size_t>(nstages), q);
    const double cost = stage_cost(stage_acc, rounds, lb, o, RoundSizes::kEven, &kr);
    constexpr double kSpreadMinGain = 1e-3;
    if (forced || cost < st.cost_seconds * (1 - kSpreadMinGain)) {
      st.cost_seconds = cost;
      rule.spread = q;
      stage_rounds = std::move(rounds);
    }
  }
  // Keyed cuts, at the end of a keyed pass (keyed_stats.cc). Where the
  // pipelined rule lost to the unpipelined plan, keyed cuts are priced on
  // it and taken only where strictly faster by the estimate.
  KeyedChoice kc;
  if (!rule.pipeline.empty()) {
    kc = choose_keyed(nstages, rule, lb, stage_rounds);
    if (kc.taken) rule.spread.clear();
    const RoundRule base = rule;
    choose_subs(nstages, rule, base, lb, stage_rounds, kc);
  } else if (keyed && !priced.pipeline.empty() && choice_override().keyed == 0) {
    RoundRule r = rule;
    r.pipeline = priced.pipeline;
    r.spans = priced.spans;
    std::vector<int64_t> rounds = stage_rounds;
    const double unpiped = st.cost_seconds;
    // A tie keeps the plan unpipelined (choose_keyed takes ties within 1e-9).
    st.cost_seconds = unpiped * (1 - 1e-8);
    kc = choose_keyed(nstages, r, lb, rounds);
    if (kc.taken) {
      rule = std::move(r);
      stage_rounds = std::move(rounds);
    } else {
      st.cost_seconds = unpiped;
    }
    // Sub-messages on the priced rule, where strictly faster than the plan.
    // Against the unpipelined plan's estimate only by sub_pipeline's (the
    // busiest-link estimate of subs corrects a pipelined plan's, which is
    // below the simulator on some plans): on the default costs
    // mid_regions_one_holder_to_8_hosts took subs at 75.0 us by it, 106.6
    // simulated, against 81.2 / 98.1 unpipelined.
    const RoundRule base = kc.taken ? rule : r;
    choose_subs(nstages, rule, base, lb, stage_rounds, kc, false);
  }
  if (keyed) ctx.keyed_taken = kc.taken && rule.keys > 0;
  // The pieces keyed cuts split, where they are taken (count_keys).
  if (counts && kc.taken && rule.keys > 0 && !key_send_split.empty())
    for (size_t d = 0; d < ndev; ++d) {
      DeviceCounts& c = (*counts)[d];
      c.send_pieces += key_send_split[d];
      c.recv_pieces += key_recv_split[d];
      c.regions += key_send_split[d] + key_recv_split[d];
    }
  for (size_t h = 0; h < lb.hosts.size(); ++h) {
    st.max_host_send_bytes = std::max(st.max_host_send_bytes, host_send[h]);
    st.max_host_recv_bytes = std::max(st.max_host_recv_bytes, host_recv[h]);
  }
  apply_bounds(ctx, lb, o, st);
  // validate(PlanOptions) keeps the estimate finite; should a plan still
  // come out with an infinite one, refuse it here rather than write bytes
  // that no reader accepts (decode checks stats.cost_seconds).
  if (!std::isfinite(st.cost_seconds) || !std::isfinite(st.lower_bound_cost_seconds))
    fail(ErrorCode::kInvalidArgument, "options",
         "the cost estimate of this plan is not finite (alpha_seconds " +
             std::to_string(o.alpha_seconds) + ", intra_host_bytes_per_second " +
             std::to_string(o.intra_host_bytes_per_second) + ", inter_host_bytes_per_second " +
             std::to_string(o.inter_host_bytes_per_second) + ")");
  st.pieces = pieces;
  int64_t all_stage_rounds = 0;
  for (int64_t r : stage_rounds) add_to(all_stage_rounds, r, "rounds");
  if (all_stage_rounds > INT32_MAX) stat_overflow("rounds");  // stages, not budget rounds
  st.rounds = static_cast<int32_t>(all_stage_rounds);
  if (!scratch_use.empty()) {
    std::vector<ScratchLife> lives;
    for (const auto& [key, u] : scratch_use) {
      for (size_t i : groups_seen[std::get<0>(key)]) {
        ScratchLife l;
        l.device = ctx.devices[std::get<1>(key)];
        l.bytes = mul_of(u.volume, ctx.tensors[i].esize, "max_scratch_bytes");
        l.first = u.first == UINT32_MAX ? 0 : u.first;
        l.last = std::max(u.last, l.first);
        lives.push_back(l);
      }
    }
    st.max_scratch_bytes = most_scratch(lives);
  }
  st.stages = pieces > 0 ? 1 + last_stage : 0;
  if (budgeted) {
    const int64_t budget = o.staging_budget_bytes;
    for (int s = 0; s < nstages; ++s) {
      for (size_t d = 0; d < ndev; ++d) {
        const int64_t peers = loads[static_cast<size_t>(s) * ndev + d].peers;
        if (peers > 0 && budget <= 16 * peers && ctx.relay_split && en.split_runs() > 0)
          return PassEnd::kWithoutSplit;  // without sub-runs (Context::relay_split)
        if (peers > 0 && budget <= 16 * peers)
          fail(ErrorCode::kInvalidArgument,
               "options.staging_budget_bytes: " + std::to_string(budget) +
                   " bytes cannot stage device " + std::to_string(ctx.devices[d]) + " with " +
                   std::to_string(peers) + " peers in stage " + std::to_string(s) +
                   " (needs more than 16 bytes per peer)");
      }
    }
  }
  // A pipelined plan of few pieces tries keyed cuts (rounds.h): from the
  // start in a keyed pass with K the most rounds of a stage and the streams
  // tracked (the pass falls back to the pipelined cuts where keyed ones are
  // slower or do not fit the budget). With or without the round schedule:
  // a process planning its part without statistics decides as the whole
  // plan does. Not tried where one round of a stage
  // would hold more than the budget on some device (a device's busiest
  // round holds at least 1/K of its bytes in the stage).
  // Also where the pipelined rule lost, by the estimate's choice alone
  // (planner 41: on every plan, not only those with a reduce route; of 67
  // specs simulated on H100, 11 faster, none slower: three_level_hosts_dp_tp
  // 192.1 -> 181.9 us, f32_dp4tp2_to_2x_tp4_100 155.6 -> 144.5).
  const RoundRule& tried = rule.pipeline.empty() && choice_override().keyed == 0 ? priced : rule;
  if (!keyed && !tried.pipeline.empty() && choice_override().keyed >= 0) {
    const int64_t k = *std::max_element(tried.spans.begin(), tried.spans.end());
    bool worth = k > 1 && k <= 32 && (choice_override().keyed > 0 || pieces <= kKeyedPieces);
    for (const DeviceLoad& l : loads)
      if (o.staging_budget_bytes > 0 && l.bytes / k >= o.staging_budget_bytes) worth = false;
    if (worth) {
      ctx.track_streams = true;
      // A keyed pass enumerates every piece: spread cuts, where kept, are
      // counted in it.
      if (!rule.spread.empty()) ctx.track_spread = true;
      ctx.keyed_keys = k;
      ctx.keyed_granule = choice_override().keyed > 0 ? choice_override().keyed : kKeyGranule;
      return PassEnd::kKeyed;
    }
  }
  if (schedule && !rule.spread.empty() && !spread_runs) {
    // Spread cuts: their rounds are counted from every stream's pieces
    // (spread_streams); from the start with them kept.
    ctx.track_streams = true;
    ctx.track_spread = true;
    return PassEnd::kTracked;
  }
  if (!track_pairs && schedule && !rule.pipeline.empty()) {
    // Pipelined without a budget: the round schedule needs every stream's
    // bytes; from the start with them tracked.
    ctx.track_streams = true;
    return PassEnd::kTracked;
  }
  if (stage_loads && rule.cuts()) *stage_loads = loads;
  if (rounds_out) *rounds_out = rule;
  if (kc.taken) {
    st.peak_staging_bytes = std::max(st.peak_staging_bytes, kc.peak);
    st.messages = kc.messages;
  } else if (track_pairs && rule.cuts()) {
    const SpreadStreams spread = rule.spread.empty() ? SpreadStreams{} : spread_streams(rule);
    const RoundFigures r = round_schedule(
        ndev, nstages, rule, loads, {&pair_bytes, &relay_bytes, &band_streams, &spread}, counts);
    st.peak_staging_bytes = std::max(st.peak_staging_bytes, r.peak_staging);
    // A plan's rounds are int32 (PlanStats) and its messages' uint32: never
    // saturated, an error naming the budget that needs them.
    if (r.rounds > INT32_MAX)
      fail(ErrorCode::kOverflow, "stats.rounds",
           std::to_string(r.rounds) + " rounds exceed 2^31 - 1: options.staging_budget_bytes (" +
               std::to_string(o.staging_budget_bytes) + ") is too small for these tensors");
    st.rounds = static_cast<int32_t>(r.rounds);
    st.messages = r.messages;
  }
  if (!counts) return PassEnd::kDone;
  for (size_t d = 0; d < ndev; ++d) (*counts)[d].streams = send_msgs[d] + recv_msgs[d];
  if (kc.taken) {
    for (size_t d = 0; d < ndev; ++d) {
      DeviceCounts& c = (*counts)[d];
      c.messages = kc.device_msgs[d];
      c.cuts = std::max<int64_t>(0, c.messages - c.streams);
    }
    return PassEnd::kDone;
  }
  if (track_pairs && rule.cuts()) return PassEnd::kDone;  // exact messages and cuts above
  if (!rule.cuts()) {
    for (DeviceCounts& c : *counts) c.messages = c.streams;
    return PassEnd::kDone;
  }
  bound_cuts(ndev, nstages, rule, loads, *counts);
  return PassEnd::kDone;
}

}  // namespace reshard::planning
