// The round schedule's figures from each stream's bytes (global statistics,
// plan/stats.cc): rounds, messages and peak staging of a plan cut at its
// budget (plan/rounds.h), and a bound on each device's cuts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "plan/context.h"
#include "plan/pair_bytes.h"
#include "plan/rounds.h"
#include "plan/stream_map.h"

namespace reshard::planning {

// A stream cut into relay bands (enumerate/types.h, Bands): the bands above 0 it
// carries, each its own message (band 0 travels with the stream's pieces of
// no band, counted with the pairs), and under a budget their bytes.
struct BandStream {
  uint32_t mask = 0;
  std::array<int64_t, kRelayBands> bytes{};
};
// Keyed stage << 40 | source dense << 20 | destination dense.
using BandStreams = StreamMap<BandStream>;

// The spread cuts (rounds.h, spread_stream_cuts) of every stream of the
// stages that take them, keyed as BandStreams, sorted: its bytes, its
// rounds (kept cuts + 1) and the round number its last round has (stage 0:
// the last kept cut's bound; a forward: K - 1).
struct SpreadCount {
  int64_t bytes = 0, rounds = 0, last_round = 0;
};
struct SpreadStreams {
  std::vector<uint64_t> keys;
  std::vector<SpreadCount> counts;
  // The stream's count; fails (an internal error) where the statistics did
  // not see it with these bytes.
  const SpreadCount& at(uint64_t key, int64_t bytes) const;
};

// Every stream's bytes, which the round schedule's figures need: stage 0's
// pairs (PairBytes: a hash map, or a table of destination rows and source
// columns), later stages' relay streams (relay[s], index 0 unused) and the
// band streams; with spread cuts, each stream's (`spread`, needed then).
struct StreamBytes {
  const PairBytes* pairs;
  const std::deque<StreamMap<int64_t>>* relay;
  const BandStreams* bands;
  const SpreadStreams* spread = nullptr;
};

struct RoundFigures {
  int64_t rounds = 0, messages = 0, peak_staging = 0;
};

// Rounds, messages and peak staging of the plan cut at `budget` (rounds.h),
// from each stream's bytes and each device's load per stage (`loads`,
// [stage * ndev + device]), without cutting any piece; with `counts`, each
// device's messages and cuts too.
RoundFigures round_schedule(size_t ndev, int nstages, const RoundRule& rule,
                            const std::vector<DeviceLoad>& loads, const StreamBytes& in,
                            std::vector<DeviceCounts>* counts);

// The stage-0 streams of PairBytes' table whose rounds were computed (not
// taken from those of a stream of the same bytes and loads) so far in this
// process (tests read it).
int64_t& stage_zero_figures_computed();

// Without the streams' bytes, bounds each device's cuts (rounds.h), stage by
// stage: a stream of stage s of B bytes between a and b has chunk
// c > W_s * B / max(T_s(a), T_s(b)), so at most B / c < max(T_s(a),
// T_s(b)) / W_s cuts, W_s >= (budget - 16 * most peers in s) * 16/17.
// Pipelined (RoundRule), a stream's chunk is also at least
// min(P_s * B / max(T_s(a), T_s(b)), m) unless the stream is one round, so
// it adds at most min(max T_s / P_s, B / m) cuts: over d's streams at most
// min(streams_s(d) * ceil(max T_s / P_s), T_s(d) / m). A chunk under both
// rules is the smaller one, so the cuts are at most the two bounds added.
// Spread cuts (RoundRule::spread, no budget) cut a stream at most K - 1
// times.
// Summed over device d's streams of stage s that is below both
// streams_s(d) * max T_s / W_s and (streams_s(d) * T_s(d) + 2 * sum T_s) / W_s
// (a peer is at most two of d's streams), and below T_s(d) / 8: a chunk is
// at least 8 bytes whatever W_s (rounds.h), which holds where the peers
// nearly fill the budget and W_s is a byte or two. Sets counts' cuts and messages
// (streams set).
void bound_cuts(size_t ndev, int nstages, const RoundRule& rule,
                const std::vector<DeviceLoad>& loads, std::vector<DeviceCounts>& counts);

}  // namespace reshard::planning
