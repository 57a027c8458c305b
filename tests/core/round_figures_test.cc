// round_schedule (core/src/plan/round_figures.h) over PairBytes' table: a
// stream's rounds and staging depend on its bytes and its devices' loads
// alone, and the table's streams take them from those of a stream alike
// (computed once per bytes and loads) with the figures of every stream
// computed on its own (the map's path).
#include "plan/round_figures.h"

#include <gtest/gtest.h>

#include <random>

using namespace reshard::planning;

namespace {

struct Figures {
  RoundFigures f;
  std::vector<DeviceCounts> counts;
  int64_t computed = 0;
};

Figures schedule(const PairBytes& pairs, size_t ndev, const RoundRule& rule,
                 const std::vector<DeviceLoad>& loads) {
  std::deque<StreamMap<int64_t>> relay(1);
  BandStreams bands;
  Figures out;
  out.counts.assign(ndev, DeviceCounts{});
  const int64_t before = stage_zero_figures_computed();
  out.f = round_schedule(ndev, 1, rule, loads, {&pairs, &relay, &bands}, &out.counts);
  out.computed = stage_zero_figures_computed() - before;
  return out;
}

}  // namespace

TEST(RoundFigures, TableStreamsAlikeTakeTheirFiguresOnce) {
  // 64 senders (0..63) to 64 receivers (64..127); senders alternate between
  // two loads, so no stream is alike the one before it in its row; bytes
  // take 3 values.
  constexpr size_t kSenders = 64, kDevices = 128;
  std::vector<uint8_t> rows(kDevices, 0), cols(kDevices, 0);
  for (size_t d = 0; d < kSenders; ++d) cols[d] = 1;
  for (size_t d = kSenders; d < kDevices; ++d) rows[d] = 1;
  PairBytes map(rows, cols, 0), table(rows, cols, size_t{1} << 20);
  table.make_dense();
  ASSERT_TRUE(table.dense());
  std::vector<DeviceLoad> loads(kDevices);
  for (size_t d = 0; d < kSenders; ++d) loads[d] = {64, d % 2 ? 900'000 : 700'000};
  for (size_t d = kSenders; d < kDevices; ++d) loads[d] = {64, 800'000};
  for (uint32_t dd = kSenders; dd < kDevices; ++dd)
    for (uint32_t sd = 0; sd < kSenders; ++sd) {
      const int64_t b = 10'000 + 1'000 * ((sd / 2 + dd) % 3);
      (void)map.add(sd, dd, b, 48);
      (void)table.add(sd, dd, b, 48);
    }
  RoundRule rule;
  rule.budget = 64 << 10;
  const Figures whole = schedule(map, kDevices, rule, loads);
  const Figures cached = schedule(table, kDevices, rule, loads);
  EXPECT_GT(whole.f.messages, int64_t{kSenders * kSenders});  // streams are cut
  EXPECT_EQ(cached.f.rounds, whole.f.rounds);
  EXPECT_EQ(cached.f.messages, whole.f.messages);
  EXPECT_EQ(cached.f.peak_staging, whole.f.peak_staging);
  for (size_t d = 0; d < kDevices; ++d) {
    EXPECT_EQ(cached.counts[d].messages, whole.counts[d].messages) << d;
    EXPECT_EQ(cached.counts[d].cuts, whole.counts[d].cuts) << d;
  }
  // 3 bytes x 2 sender loads x 1 receiver load, against one per stream
  // (4,096) where each is computed unless alike the one before it.
  EXPECT_EQ(cached.computed, 6);
}
