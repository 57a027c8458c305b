// Keyed rounds in the global statistics (rounds.h, key_volumes; a keyed
// pass, Context::keyed_keys): each piece's bytes by key, each stream's
// keys, and the choice of keyed cuts at the end of the pass.
#include <algorithm>
#include <bit>

#include "plan/stage_cost.h"
#include "plan/stats_pass.h"

namespace reshard::planning {

void StatsPass::count_keys(const Emitted& x, uint32_t sd, uint32_t dd, bool inter, int64_t esum,
                           int64_t copies) {
  std::array<int64_t, 32> key_vol{};
  const int64_t blocks = key_volumes(x.region, group_blocks, nkeys, key_vol.data());
  while (key_acc.size() <= x.stage)
    key_acc.emplace_back(static_cast<size_t>(nkeys), std::vector<Acc>(ndev));
  uint32_t mask = 0;
  for (int64_t r = 0; r < nkeys; ++r) {
    if (key_vol[static_cast<size_t>(r)] <= 0) continue;
    mask |= 1u << r;
    std::vector<Acc>& k = key_acc[x.stage][static_cast<size_t>(r)];
    const int64_t v = mul_of(key_vol[static_cast<size_t>(r)], esum, "network_bytes");
    add_to(k[sd].send, v, "max_send_bytes");
    add_to(k[dd].recv, v, "max_recv_bytes");
    if (inter) {
      add_to(k[sd].send_inter, v, "max_host_send_bytes");
      add_to(k[dd].recv_inter, v, "max_host_recv_bytes");
    }
  }
  key_streams[stage_stream_key(x.stage, sd, dd)] |= mask;
  if (blocks > 1) add_to(key_split, mul_of(blocks - 1, copies, "pieces"), "pieces");
  // The piece is split at every block boundary.
  if (counts && blocks > 1) count_pieces(sd, dd, mul_of(blocks - 1, copies, "pieces"));
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
  std::vector<int64_t> rounds(static_cast<size_t>(nstages), 0);
  KeyedRounds kr;
  kr.seconds.resize(static_cast<size_t>(nstages));
  for (size_t s = 0; s < static_cast<size_t>(nstages); ++s) {
    rounds[s] = std::bit_width(stage_keys[s]);
    for (size_t r = 0; r < static_cast<size_t>(rounds[s]) && s < key_acc.size(); ++r) {
      const std::vector<Acc>& x = key_acc[s][r];
      kr.seconds[s].push_back(busiest_link_seconds(x, lb, o));
      for (const Acc& a : x) c.peak = std::max(c.peak, a.send + a.recv);
    }
  }
  const double cost = stage_cost(stage_acc, rounds, lb, o, RoundSizes::kEven, &kr);
  const bool forced = choice_override().keyed > 0;
  const bool fits = o.staging_budget_bytes <= 0 || c.peak < o.staging_budget_bytes;
  if (fits && (forced || (cost <= st.cost_seconds && key_split <= kKeyedSplitPieces))) {
    c.taken = true;
    st.cost_seconds = cost;
    stage_rounds = std::move(rounds);
    rule.keys = nkeys;
    rule.key_granule = ctx.keyed_granule;
  }
  return c;
}

}  // namespace reshard::planning
