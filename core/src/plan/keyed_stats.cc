// Keyed rounds in the global statistics (rounds.h, key_volumes; a keyed
// pass, Context::keyed_keys): each piece's bytes by key, each stream's
// keys, and the choice of keyed cuts at the end of the pass.
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include "plan/stage_cost.h"
#include "plan/stats_pass.h"
#include "plan/sub_choice.h"

namespace reshard::planning {

namespace {

// The kinds of forward a piece feeds (bits 0-3: the scratch it writes, or
// a destination entry, which a relay may forward) and makes (bits 4-7: the
// scratch it reads, or a relay piece from a destination entry): 0 a
// sending-side transit (Emitted::scratch 6, then 7), 1 a receiving-side one
// (4, then 5), 2 a pre-reduction (1 or 3, then 2 or 3), 3 a destination
// entry's forward.
uint8_t keyed_kind(const Emitted& x) {
  switch (x.scratch) {
    case 6:
      return 1;
    case 7:
      return 1 << 4;
    case 4:
      return 2;
    case 5:
      return 2 << 4;
    case 1:
      return 4;
    case 2:
      return 4 << 4;
    case 3:
      return 4 | 4 << 4;
    default:
      return x.relay() ? (8 | 8 << 4) : 8;
  }
}

}  // namespace

void StatsPass::count_keys(const Emitted& x, uint32_t sd, uint32_t dd, bool inter, int64_t esum,
                           int64_t copies) {
  std::array<int64_t, 32> key_vol{};
  const int64_t blocks = key_volumes(x.region, group_blocks, nkeys, key_vol.data());
  while (key_acc.size() <= x.stage)
    key_acc.emplace_back(static_cast<size_t>(nkeys), std::vector<Acc>(ndev));
  // The piece of each of the group's tensors: its key r (offset 0) is key
  // (r + o) mod K of the tensors of offset o (group_key_esum; esum is the
  // group's, their sum).
  uint32_t mask = 0;
  const auto k = static_cast<size_t>(nkeys);
  for (size_t r = 0; r < k; ++r) {
    if (key_vol[r] <= 0) continue;
    for (size_t o = 0; o < k; ++o) {
      if (group_key_esum[o] == 0) continue;
      const size_t key = (r + o) % k;
      mask |= 1u << key;
      charge_rows(key_acc[x.stage][key], sd, dd,
                  mul_of(key_vol[r], group_key_esum[o], "network_bytes"), inter);
    }
  }
  key_streams[stage_stream_key(x.stage, sd, dd)] |= mask;
  key_stream_kinds[stage_stream_key(x.stage, sd, dd)] |= keyed_kind(x);
  count_subs(x, sd, dd, inter, esum, copies);
  if (blocks > 1) add_to(key_split, mul_of(blocks - 1, copies, "pieces"), "pieces");
  // The piece is split at every block boundary (counted where the cuts are
  // taken, finish).
  if (counts && blocks > 1) {
    if (key_send_split.empty()) key_send_split.assign(ndev, 0), key_recv_split.assign(ndev, 0);
    const int64_t more = mul_of(blocks - 1, copies, "pieces");
    add_to(key_send_split[sd], more, "pieces");
    add_to(key_recv_split[dd], more, "pieces");
  }
}

std::pair<int64_t, int64_t> StatsPass::sub_trial(size_t i) {
  if (forced_subs().first > 0) return i == 0 ? forced_subs() : std::pair<int64_t, int64_t>{1, 1};
  return kSubTrial[i];
}

void StatsPass::count_subs(const Emitted& x, uint32_t sd, uint32_t dd, bool inter, int64_t esum,
                           int64_t copies) {
  std::array<int64_t, 32> vol{};
  std::array<uint32_t, kSubTrials>& masks = sub_streams[stage_stream_key(x.stage, sd, dd)];
  for (size_t i = 0; i < kSubTrials; ++i) {
    SubTrial& t = sub_trials[i];
    const int64_t nsubs = sub_trial(i).first;
    vol.fill(0);
    const uint32_t mask = sub_volumes(x.region, t.blocks, nsubs, vol.data());
    while (t.acc.size() <= x.stage)
      t.acc.emplace_back(static_cast<size_t>(nsubs), std::vector<Acc>(ndev));
    for (int64_t j = 0; j < nsubs; ++j) {
      if (vol[static_cast<size_t>(j)] <= 0) continue;
      charge_rows(t.acc[x.stage][static_cast<size_t>(j)], sd, dd,
                  mul_of(vol[static_cast<size_t>(j)], esum, "network_bytes"), inter);
    }
    masks[i] |= mask;
    // Each run of one sub in one block is a piece of its own.
    const int64_t runs = sub_pieces(x.region, t.blocks, nsubs);
    if (runs > 1) {
      const int64_t more = mul_of(runs - 1, copies, "pieces");
      add_to(t.split, more, "pieces");
      if (counts) {
        if (t.send_split.empty()) t.send_split.assign(ndev, 0), t.recv_split.assign(ndev, 0);
        add_to(t.send_split[sd], more, "pieces");
        add_to(t.recv_split[dd], more, "pieces");
      }
    }
  }
}

// Keyed cuts (rounds.h, a keyed pass): a stream's messages are the keys
// it holds, a stage's rounds the highest key held in it plus one, and a
// round's bytes its key's. Taken where every device's bytes of one round
// stay below the budget and the estimate (lag 0, each round as long as
// its key's bytes make it) is no slower than the pipelined one: a tie
// goes to keyed cuts, whose lag of 0 holds by construction, while the
// pipelined estimate's lag of one round is a floor (forwards of
// rl_sync_uneven_replicas_4_to_2_hosts read three to four rounds late:
// both estimate 1.055 ms, simulated 1.231 pipelined and 1.047 keyed). On
// request (choice_override().keyed > 0) wherever the budget allows.
// Where taken, sets st.cost_seconds, stage_rounds and rule's keys.
StatsPass::KeyedChoice StatsPass::choose_keyed(int nstages, RoundRule& rule, const Bounds& lb,
                                               std::vector<int64_t>& stage_rounds) {
  // Keyed cuts are taken where they split at most kKeyedSplitPieces more
  // pieces (each block of a piece its own piece).
  constexpr int64_t kKeyedSplitPieces = int64_t{1} << 22;
  KeyedChoice c;
  if (!keyed || rule.pipeline.empty() ||
      *std::max_element(rule.spans.begin(), rule.spans.end()) != nkeys)
    return c;
  std::vector<uint32_t> stage_keys(static_cast<size_t>(nstages), 0);
  c.device_msgs.assign(ndev, 0);
  for (const auto& [key, mask] : key_streams) {
    const auto s = static_cast<size_t>(key >> 40);
    const size_t sd = key >> 20 & 0xfffff, dd = key & 0xfffff;
    const int n = std::popcount(mask);
    stage_keys[s] |= mask;
    c.messages += n;
    c.device_msgs[sd] += n;
    c.device_msgs[dd] += n;
  }
  const auto ns = static_cast<size_t>(nstages);
  std::vector<int64_t> rounds(ns, 0);
  KeyedRounds kr;
  kr.seconds.resize(ns);
  // Each round's links (link_loads), for the senders of stages above 0.
  std::vector<std::vector<std::vector<double>>> loads(ns);
  for (size_t s = 0; s < ns; ++s) {
    rounds[s] = std::bit_width(stage_keys[s]);
    for (size_t r = 0; r < static_cast<size_t>(rounds[s]) && s < key_acc.size(); ++r) {
      const std::vector<Acc>& x = key_acc[s][r];
      loads[s].push_back(link_loads(x, lb, o));
      const std::vector<double>& l = loads[s][r];
      kr.seconds[s].push_back(l.empty() ? 0.0 : *std::max_element(l.begin(), l.end()));
      for (const Acc& a : x) c.peak = std::max(c.peak, a.send + a.recv);
    }
  }
  // The senders of each stage above 0 (KeyedRounds::senders), one per
  // device and kind of forward (keyed_kind): per round its streams' links
  // of that kind, and per round of the stage before those of the streams
  // into it that feed that kind.
  kr.senders.resize(ns);
  constexpr size_t kKinds = KeyedRounds::kForwardKinds;
  std::vector<std::vector<int32_t>>& sender_of = kr.senders_at;
  sender_of.resize(ns);
  kr.streams.resize(ns);
  // Each device's process, numbered from 0 (the streams' lanes).
  std::vector<uint32_t> lane(ndev, 0);
  {
    std::map<int32_t, uint32_t> number;
    for (size_t d = 0; d < ndev; ++d) {
      const int32_t p = ctx.input.topology.info(ctx.devices[d]).process;
      lane[d] = number.try_emplace(p, static_cast<uint32_t>(number.size())).first->second;
    }
    kr.lanes = number.size();
  }
  auto each_bit = [](uint32_t mask, auto&& f) {
    for (uint32_t m = mask; m != 0; m &= m - 1) f(static_cast<size_t>(std::countr_zero(m)));
  };
  // Each stream decoded once: stage, ends, keys, kinds (keyed_kind) and
  // its two links.
  struct Decoded {
    size_t s, out, in;
    uint32_t sd, dd, mask, kinds;
  };
  std::vector<Decoded> decoded;
  decoded.reserve(key_streams.size());
  for (const auto& [key, mask] : key_streams) {
    const auto s = static_cast<size_t>(key >> 40);
    const auto sd = static_cast<uint32_t>(key >> 20 & 0xfffff);
    const auto dd = static_cast<uint32_t>(key & 0xfffff);
    if (mask == 0 || loads[s].empty()) continue;
    const auto kinds = key_stream_kinds.find(key);
    const auto [out, in] = stream_links(lb, ndev, sd, dd);
    decoded.push_back(
        {s, out, in, sd, dd, mask, kinds == key_stream_kinds.end() ? 0u : kinds->second});
  }
  // Per key of stream x, v[key] = the busier of its links in that key.
  auto charge_links = [&](std::vector<double>& v, const Decoded& x) {
    each_bit(x.mask, [&](size_t r) {
      v[r] = std::max({v[r], loads[x.s][r][x.out], loads[x.s][r][x.in]});
    });
  };
  for (const Decoded& x : decoded) {
    if (x.s == 0) continue;
    std::vector<int32_t>& at_of = sender_of[x.s];
    if (at_of.empty()) at_of.assign(ndev * kKinds, -1);
    const uint32_t made = x.kinds >> 4;
    kr.streams[x.s].push_back({x.sd, x.dd, x.mask, made, lane[x.sd], lane[x.dd]});
    each_bit(made, [&](size_t kind) {
      int32_t& at = at_of[x.sd * kKinds + kind];
      if (at < 0) {
        at = static_cast<int32_t>(kr.senders[x.s].size());
        kr.senders[x.s].push_back({std::vector<double>(loads[x.s - 1].size(), 0.0),
                                   std::vector<double>(loads[x.s].size(), 0.0)});
      }
      charge_links(kr.senders[x.s][static_cast<size_t>(at)].own, x);
    });
  }
  for (const Decoded& x : decoded) {
    if (x.s + 1 >= ns || x.sd == x.dd || sender_of[x.s + 1].empty()) continue;
    each_bit(x.kinds & 0xf, [&](size_t kind) {
      const int32_t at = sender_of[x.s + 1][x.dd * kKinds + kind];
      if (at < 0) return;
      KeyedRounds::Sender& to = kr.senders[x.s + 1][static_cast<size_t>(at)];
      double last_own = 0;
      for (double v : to.own) last_own = v > 0 ? v : last_own;
      if (kr.feed_links.size() <= x.s) kr.feed_links.resize(x.s + 1);
      std::vector<double>& fl = kr.feed_links[x.s];
      if (fl.empty()) fl.assign(loads[x.s][0].size(), 0.0);
      fl[x.out] = std::max(fl[x.out], last_own);
      fl[x.in] = std::max(fl[x.in], last_own);
      charge_links(to.feed, x);
    });
  }
  kr.loads = std::move(loads);
  const double cost = stage_cost(stage_acc, rounds, lb, o, RoundSizes::kEven, &kr);
  const bool forced = choice_override().keyed > 0;
  const bool fits = o.staging_budget_bytes <= 0 || c.peak < o.staging_budget_bytes;
  // A tie within rounding (the two estimates take the same busiest link by
  // different sums) is a tie.
  const bool no_slower = cost <= st.cost_seconds * (1 + 1e-9);
  if (fits && (forced || (no_slower && key_split <= kKeyedSplitPieces))) {
    c.taken = true;
    st.cost_seconds = cost;
    stage_rounds = std::move(rounds);
    rule.keys = nkeys;
    rule.key_granule = ctx.keyed_granule;
    rule.key_fine = ctx.keyed_fine;
  }
  return c;
}

// Sub-messages (rounds.h, RoundRule::subs) at each trial's (P, B): a
// stream's messages are its subs, each stage one round, priced by
// stage_cost's subs (sub_pipeline: each sub followed through the links of
// its streams); the cheapest trial is taken where it gains more than
// kSubMinGain on the estimate so far (the keyed or pipelined one), every
// device's stage fits the budget (its subs flow together) and the cuts add
// at most kSplitPieces pieces. Below kSubMinGain the estimate of subs
// still misses (H100 topology, P = 8, B = 256, estimated / simulated:
// rl_sync_uneven_replicas_4_to_2_hosts 1,025 / 1,196 us against 1,055 /
// 1,047 without subs; unseen psum_dp2_to_dp4_replicas 468 / 508 against
// 483 / 478). Where no trial gains so, the busiest-link estimate of subs
// (no sub rows: each sub fed from the stage before on its busiest link)
// still decides on plans of at most kSubStages stages where `by_busiest`
// (against a pipelined plan's estimate, as in planner 37):
// the pipelined estimate is below the simulator on some of those plans
// (default costs: mid_regions_one_holder_to_8_hosts 86.9 us estimated,
// 155.3 simulated on a topology of those costs; with subs 90 to 102 by
// sub_pipeline, 97 to 98 simulated). Not on request of keyed cuts
// (choice_override().keyed > 0).
void StatsPass::choose_subs(int nstages, RoundRule& rule, const RoundRule& base, const Bounds& lb,
                            std::vector<int64_t>& stage_rounds, KeyedChoice& c, bool by_busiest) {
  constexpr int64_t kSplitPieces = int64_t{1} << 22;
  constexpr double kSubMinGain = 0.05;
  const bool forced = forced_subs().first > 0;
  if (!keyed || forced_subs().first < 0 || base.pipeline.empty() ||
      (!forced && choice_override().keyed > 0))
    return;
  int64_t peak = 0;
  for (const std::vector<Acc>& stage : stage_acc)
    for (const Acc& a : stage) peak = std::max(peak, a.send + a.recv);
  if (o.staging_budget_bytes > 0 && peak >= o.staging_budget_bytes) return;
  std::vector<int64_t> rounds(static_cast<size_t>(nstages), 0);
  for (size_t s = 0; s < static_cast<size_t>(nstages); ++s) rounds[s] = stage_rounds[s] > 0 ? 1 : 0;
  // Per trial its estimate (sub_pipeline) and the busiest link's (no rows).
  const double bar = forced ? HUGE_VAL : st.cost_seconds * (1 - kSubMinGain);
  double best = bar, best_busiest = bar;
  size_t pick = kSubTrials, pick_busiest = kSubTrials;
  for (size_t i = 0; i < kSubTrials; ++i) {
    const SubTrial& t = sub_trials[i];
    if (t.split > kSplitPieces || (forced && i != 0)) continue;
    KeyedRounds kr;
    kr.subs = true;
    kr.seconds.resize(static_cast<size_t>(nstages));
    for (size_t s = 0; s < static_cast<size_t>(nstages) && s < t.acc.size(); ++s)
      for (const std::vector<Acc>& x : t.acc[s])
        kr.seconds[s].push_back(busiest_link_seconds(x, lb, o));
    if (!forced && by_busiest && nstages <= kSubStages) {
      const double cost = stage_cost(stage_acc, rounds, lb, o, RoundSizes::kEven, &kr);
      if (cost < best_busiest) best_busiest = cost, pick_busiest = i;
    }
    kr.sub_rows = &t.acc;
    kr.sub_streams.resize(static_cast<size_t>(nstages));
    for (const auto& [key, masks] : sub_streams) {
      const auto s = static_cast<size_t>(key >> 40);
      if (s < kr.sub_streams.size() && masks[i] != 0)
        kr.sub_streams[s].push_back({static_cast<uint32_t>(key >> 20 & 0xfffff),
                                     static_cast<uint32_t>(key & 0xfffff), masks[i]});
    }
    const double cost = stage_cost(stage_acc, rounds, lb, o, RoundSizes::kEven, &kr);
    if (cost < best) {
      best = cost;
      pick = i;
    }
  }
  if (pick == kSubTrials) best = best_busiest, pick = pick_busiest;
  if (pick == kSubTrials) return;
  const SubTrial& t = sub_trials[pick];
  c = KeyedChoice{};
  c.taken = true;
  c.peak = peak;
  c.device_msgs.assign(ndev, 0);
  for (const auto& [key, masks] : sub_streams) {
    const size_t sd = key >> 20 & 0xfffff, dd = key & 0xfffff;
    const int n = std::popcount(masks[pick]);
    c.messages += n;
    c.device_msgs[sd] += n;
    c.device_msgs[dd] += n;
  }
  if (counts && !t.send_split.empty())
    for (size_t d = 0; d < ndev; ++d) {
      (*counts)[d].send_pieces += t.send_split[d];
      (*counts)[d].recv_pieces += t.recv_split[d];
      (*counts)[d].regions += t.send_split[d] + t.recv_split[d];
    }
  st.cost_seconds = best;
  stage_rounds = std::move(rounds);
  rule = base;
  rule.keys = 0;
  rule.spread.clear();
  rule.subs = sub_trial(pick).first;
  rule.sub_block = sub_trial(pick).second;
}

}  // namespace reshard::planning
