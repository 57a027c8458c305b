// The round schedule's figures (plan/round_figures.h).
#include "plan/round_figures.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "plan/stream_map.h"
#include "reshard/error.h"

namespace reshard::planning {

const SpreadCount& SpreadStreams::at(uint64_t key, int64_t bytes) const {
  const auto it = std::lower_bound(keys.begin(), keys.end(), key);
  const size_t i = static_cast<size_t>(it - keys.begin());
  if (it == keys.end() || *it != key || counts[i].bytes != bytes)
    fail(ErrorCode::kInternal, "stats.messages",
         "spread cuts: stream " + std::to_string(key) + " of " + std::to_string(bytes) +
             " bytes not counted by its pieces");
  return counts[i];
}

int64_t& stage_zero_figures_computed() {
  static int64_t n = 0;
  return n;
}

namespace {

// A stage-0 stream's rounds and the most bytes a round of it stages
// (stream_rounds, round_cap at RoundRule::chunk), which depend on its bytes
// and its two devices' loads alone: kept in a direct-mapped cache. A row of
// the 405B plan's table at 16,384 devices (16,384 streams) repeats a few
// figures, each from a different source than the stream before it, and
// the chunk's divisions took a tenth of its global statistics.
struct StreamFigures {
  int64_t rounds = 0, cap = 0;
};

class StageZeroFigures {
 public:
  explicit StageZeroFigures(const RoundRule& rule) : rule_(rule), slots_(kSlots) {}
  StreamFigures get(int64_t all, DeviceLoad a, DeviceLoad b) {
    uint64_t h = static_cast<uint64_t>(all) * 0x9e3779b97f4a7c15ull;
    h ^= static_cast<uint64_t>(a.bytes) + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(a.peers) * 0xff51afd7ed558ccdull + (h >> 29);
    h ^= static_cast<uint64_t>(b.bytes) + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(b.peers) * 0xc4ceb9fe1a85ec53ull + (h >> 31);
    Slot& s = slots_[(h * 0x9e3779b97f4a7c15ull) >> (64 - kBits)];
    if (s.all == all && s.a.peers == a.peers && s.a.bytes == a.bytes && s.b.peers == b.peers &&
        s.b.bytes == b.bytes)
      return s.f;
    const int64_t chunk = rule_.chunk(0, a, b, all);
    std::atomic_ref<int64_t>(stage_zero_figures_computed()).fetch_add(1);  // plans side by side
    s = {all, a, b, {stream_rounds(all, chunk), round_cap(all, chunk)}};
    return s.f;
  }

 private:
  static constexpr int kBits = 10;
  static constexpr size_t kSlots = size_t{1} << kBits;
  struct Slot {
    int64_t all = -1;  // none (streams have bytes above 0)
    DeviceLoad a, b;
    StreamFigures f;
  };
  const RoundRule& rule_;
  std::vector<Slot> slots_;
};

}  // namespace

RoundFigures round_schedule(size_t ndev, int nstages, const RoundRule& rule,
                            const std::vector<DeviceLoad>& loads, const StreamBytes& in,
                            std::vector<DeviceCounts>* counts) {
  RoundFigures out;
  std::vector<int64_t> staged(ndev, 0);
  int64_t rounds = 0;
  // Spread cuts: the stage's rounds are its highest round number plus one.
  int64_t spread_rounds = 0;
  auto load = [&](int s, size_t d) { return loads[static_cast<size_t>(s) * ndev + d]; };
  // A stream of `bytes` outside bands above 0 and the bands `b` (may be
  // null): its segments cut one after the other at the whole stream's
  // chunk (rounds.h); in a pipelined plan, one segment (order_pieces merges
  // a stream's bands).
  // The figures of the last stream without bands: a row of the stage-0
  // table repeats them where its sources' loads and bytes are alike (the
  // 405B plan at 16,384 devices has 2^28 streams).
  struct Last {
    bool valid = false;
    int s = 0;
    int64_t all = 0;
    DeviceLoad a, b;
    int64_t r = 0, segments = 0, cap = 0;
  } last;
  auto visit = [&](int s, size_t sd, size_t dd, int64_t bytes, const BandStream* b) {
    int64_t all = bytes;
    if (b)
      for (int64_t v : b->bytes) add_to(all, v, "network_bytes");
    if (all <= 0) return;
    const DeviceLoad la = load(s, sd), lb = load(s, dd);
    int64_t r = 0, segments = 0, cap = 0;
    if (!b && last.valid && last.s == s && last.all == all && last.a.peers == la.peers &&
        last.a.bytes == la.bytes && last.b.peers == lb.peers && last.b.bytes == lb.bytes) {
      r = last.r;
      segments = last.segments;
      cap = last.cap;
    } else if (rule.spread_stage(static_cast<uint32_t>(s))) {
      // Spread cuts (rounds.h) depend on the stream's tensors: counted from
      // its pieces (spread_stream_cuts), as the plan cuts it.
      if (!in.spread) fail(ErrorCode::kInternal, "stats.messages", "spread cuts not counted");
      const SpreadCount& c = in.spread->at(stage_stream_key(static_cast<uint32_t>(s), sd, dd), all);
      r = c.rounds;
      spread_rounds = std::max(spread_rounds, c.last_round + 1);
      segments = 1;
      cap = all;
    } else {
      const int64_t chunk = rule.chunk(static_cast<uint32_t>(s), la, lb, all);
      auto segment = [&](int64_t v) {
        if (v <= 0) return;
        add_to(r, stream_rounds(v, chunk), "rounds");
        ++segments;
        // Most bytes any round of the segment stages.
        cap = std::max(cap, round_cap(v, chunk));
      };
      if (!rule.pipeline.empty()) {
        segment(all);
      } else {
        segment(bytes);
        if (b)
          for (int64_t v : b->bytes) segment(v);
      }
      if (!b) last = {true, s, all, la, lb, r, segments, cap};
    }
    rounds = std::max(rounds, r);
    add_to(out.messages, r, "messages");
    if (counts) {
      (*counts)[sd].messages += r;
      (*counts)[dd].messages += r;
      (*counts)[sd].cuts += r - segments;
      (*counts)[dd].cuts += r - segments;
    }
    add_to(staged[sd], cap, "peak_staging_bytes");
    add_to(staged[dd], cap, "peak_staging_bytes");
  };
  auto bands_of = [&](uint32_t s, size_t sd, size_t dd) -> const BandStream* {
    if (in.bands->empty()) return nullptr;
    return in.bands->find(stage_stream_key(s, sd, dd));
  };
  // Streams with bands only (no bytes counted with the pairs).
  auto band_only = [&](uint32_t s, auto&& plain_bytes) {
    in.bands->each([&](uint64_t key, const BandStream& b) {
      if (static_cast<uint32_t>(key >> 40) != s) return;
      const size_t sd = key >> 20 & 0xfffff, dd = key & 0xfffff;
      if (plain_bytes(sd, dd) <= 0) visit(static_cast<int>(s), sd, dd, 0, &b);
    });
  };
  // Stage by stage: rounds add up (a stage of forwards numbered late spans
  // at least its K_t: RoundRule::round_number), staging peaks per stage.
  auto end_stage = [&](int s) {
    for (int64_t v : staged) out.peak_staging = std::max(out.peak_staging, v);
    if (rule.spread_stage(static_cast<uint32_t>(s)))
      add_to(out.rounds, spread_rounds, "rounds");
    else if (rounds > 0)
      add_to(out.rounds, rule.stage_rounds(static_cast<uint32_t>(s), rounds), "rounds");
    rounds = 0;
    spread_rounds = 0;
    staged.assign(ndev, 0);
  };
  in.pairs->each_sparse(
      [&](uint32_t sd, uint32_t dd, int64_t b) { visit(0, sd, dd, b, bands_of(0, sd, dd)); });
  // The table a row (destination) at a time: the 405B plan at 16,384
  // devices has 2^28 streams there. Without bands a row's streams differ
  // only in their bytes and their source's load, so the destination's sums
  // are kept aside and added once per row, and a stream's figures are
  // those of the last one of the same bytes and source load (round_chunk
  // depends on nothing else). The figures are visit's, summed in another
  // order.
  StageZeroFigures figures(rule);
  // Each source's messages and cuts over the rows, by column (added to
  // counts after the last row): 16 bytes a column in cache rather than a
  // DeviceCounts a source (56 bytes: 0.9 MB at 16,384 devices) each stream.
  std::vector<int64_t> col_messages, col_cuts;
  std::span<const uint32_t> columns;
  in.pairs->each_row([&](uint32_t dd, std::span<const uint32_t> sources, const uint32_t* bytes) {
    if (!in.bands->empty() || rule.spread_stage(0)) {
      for (size_t c = 0; c < sources.size(); ++c)
        if (bytes[c] > 0 && bytes[c] != PairBytes::kInMap)
          visit(0, sources[c], dd, bytes[c], bands_of(0, sources[c], dd));
      return;
    }
    const DeviceLoad lb = load(0, dd);
    if (counts && columns.empty()) {
      columns = sources;
      col_messages.assign(sources.size(), 0);
      col_cuts.assign(sources.size(), 0);
    }
    int64_t row_messages = 0, row_cuts = 0, row_staged = 0, row_rounds = 0;
    int64_t last_all = -1, last_peers = -1, last_load = -1, r = 0, cap = 0;
    for (size_t c = 0; c < sources.size(); ++c) {
      if (bytes[c] == 0 || bytes[c] == PairBytes::kInMap) continue;  // kInMap: each_sparse's
      const int64_t all = bytes[c];
      const uint32_t sd = sources[c];
      const DeviceLoad la = load(0, sd);
      if (all != last_all || la.peers != last_peers || la.bytes != last_load) {
        const StreamFigures f = figures.get(all, la, lb);
        r = f.rounds;
        cap = f.cap;
        last_all = all;
        last_peers = la.peers;
        last_load = la.bytes;
      }
      row_rounds = std::max(row_rounds, r);
      add_to(row_messages, r, "messages");
      if (counts) {
        col_messages[c] += r;
        col_cuts[c] += r - 1;
        row_cuts += r - 1;
      }
      add_to(staged[sd], cap, "peak_staging_bytes");
      add_to(row_staged, cap, "peak_staging_bytes");
    }
    rounds = std::max(rounds, row_rounds);
    add_to(out.messages, row_messages, "messages");
    if (counts) {
      (*counts)[dd].messages += row_messages;
      (*counts)[dd].cuts += row_cuts;
    }
    add_to(staged[dd], row_staged, "peak_staging_bytes");
  });
  for (size_t c = 0; c < columns.size(); ++c) {
    (*counts)[columns[c]].messages += col_messages[c];
    (*counts)[columns[c]].cuts += col_cuts[c];
  }
  band_only(0, [&](size_t sd, size_t dd) {
    return in.pairs->get(static_cast<uint32_t>(sd), static_cast<uint32_t>(dd));
  });
  end_stage(0);
  for (int s = 1; s < nstages; ++s) {
    const auto& relay = (*in.relay)[static_cast<size_t>(s)];
    relay.each([&](uint64_t k, int64_t b) {
      visit(s, k >> 32, k & 0xffffffffu, b,
            bands_of(static_cast<uint32_t>(s), k >> 32, k & 0xffffffffu));
    });
    band_only(static_cast<uint32_t>(s), [&](size_t sd, size_t dd) {
      const int64_t* b = relay.find(device_pair_key(sd, dd));
      return b ? *b : int64_t{0};
    });
    end_stage(s);
  }
  return out;
}

void bound_cuts(size_t ndev, int nstages, const RoundRule& rule,
                const std::vector<DeviceLoad>& loads, std::vector<DeviceCounts>& counts) {
  std::vector<double> cuts(ndev, 0);
  for (int s = 0; s < nstages; ++s) {
    const DeviceLoad* stage = loads.data() + static_cast<size_t>(s) * ndev;
    int64_t max_peers = 0, max_t = 0;
    double sum_t = 0;
    for (size_t d = 0; d < ndev; ++d) {
      max_peers = std::max(max_peers, stage[d].peers);
      max_t = std::max(max_t, stage[d].bytes);
      sum_t += static_cast<double>(stage[d].bytes);
    }
    const int64_t pipe = static_cast<size_t>(s) < rule.pipeline.size() ? rule.pipeline[s] : 0;
    if (max_peers == 0) continue;
    const double w =
        std::max(1.0, static_cast<double>(rule.budget - 16 * max_peers) * 16.0 / 17.0 - 8.0);
    for (size_t d = 0; d < ndev; ++d) {
      const double streams = static_cast<double>(stage[d].peers);
      const double t_d = static_cast<double>(stage[d].bytes);
      if (rule.budget > 0)
        cuts[d] += std::min({streams * std::ceil(static_cast<double>(max_t) / w),
                             (streams * t_d + 2 * sum_t) / w, t_d / 8.0});
      if (rule.spread_stage(static_cast<uint32_t>(s)))  // spread cuts: at most K - 1 a stream
        cuts[d] += streams * static_cast<double>(rule.spread.size());
      else if (pipe > 0)
        cuts[d] +=
            std::min(streams * std::ceil(static_cast<double>(max_t) / static_cast<double>(pipe)),
                     t_d / static_cast<double>(std::max<int64_t>(rule.min_chunk, 1)));
    }
  }
  for (size_t d = 0; d < ndev; ++d) {
    DeviceCounts& c = counts[d];
    c.cuts = static_cast<int64_t>(std::min(cuts[d], 9e18));
    c.messages = c.streams + c.cuts;
  }
}

}  // namespace reshard::planning
