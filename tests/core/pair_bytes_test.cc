// PairBytes (core/src/plan/pair_bytes.h): the stage-0 stream bytes the round
// schedule reads are the same whether they stay in the hash map, move to
// the table part way (once the map outgrows it), or start in it.
#include "plan/pair_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <span>
#include <tuple>
#include <vector>

using reshard::planning::PairBytes;

namespace {

using Streams = std::map<std::pair<uint32_t, uint32_t>, int64_t>;

Streams read(const PairBytes& p) {
  Streams out;
  p.each([&](uint32_t sd, uint32_t dd, int64_t b) { out[{sd, dd}] += b; });
  return out;
}

}  // namespace

TEST(PairBytes, MapTableAndMigrationHoldTheSameStreams) {
  constexpr size_t kDevices = 64;
  // Devices 0..31 send, 32..63 receive; 5 and 40 both (a row and a column).
  std::vector<uint8_t> rows(kDevices, 0), cols(kDevices, 0);
  for (size_t d = 0; d < 32; ++d) cols[d] = 1;
  for (size_t d = 32; d < kDevices; ++d) rows[d] = 1;
  rows[5] = 1;
  cols[40] = 1;
  PairBytes sparse(rows, cols, 0);           // never dense (cap 0)
  PairBytes migrating(rows, cols, 1 << 20);  // dense once the map outgrows the table
  PairBytes dense(rows, cols, 1 << 20);
  dense.make_dense();
  ASSERT_TRUE(dense.dense());
  std::mt19937 rng(36);
  Streams want;
  int64_t fresh_after_dense = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint32_t sd = rng() % 2 ? static_cast<uint32_t>(rng() % 32) : 40;
    const uint32_t dd = rng() % 8 ? static_cast<uint32_t>(32 + rng() % 32) : 5;
    const int64_t b = 1 + static_cast<int64_t>(rng() % 1000);
    want[{sd, dd}] += b;
    (void)sparse.add(sd, dd, b, 48);
    const bool fresh = migrating.add(sd, dd, b, 48);
    if (migrating.dense() && fresh) ++fresh_after_dense;
    EXPECT_FALSE(dense.add(sd, dd, b, 48));  // the table has no map entries
  }
  EXPECT_FALSE(sparse.dense());
  EXPECT_TRUE(migrating.dense());  // 33 x 33 streams at 48 bytes > the 4-byte table
  EXPECT_EQ(fresh_after_dense, 0);
  EXPECT_EQ(read(sparse), want);
  EXPECT_EQ(read(migrating), want);
  EXPECT_EQ(read(dense), want);
  for (const auto& [k, b] : want) {
    EXPECT_EQ(sparse.get(k.first, k.second), b);
    EXPECT_EQ(migrating.get(k.first, k.second), b);
    EXPECT_EQ(dense.get(k.first, k.second), b);
  }
  EXPECT_EQ(dense.get(0, 0), 0);  // not a row: none
}

TEST(PairBytes, StreamsOutsideTheTableStayInTheMap) {
  std::vector<uint8_t> rows = {0, 1, 0, 0}, cols = {1, 0, 0, 0};
  PairBytes p(rows, cols, 1 << 20);
  p.make_dense();
  EXPECT_FALSE(p.add(0, 1, 7, 48));  // in the table
  EXPECT_TRUE(p.add(2, 3, 5, 48));   // neither a row nor a column: the map
  EXPECT_EQ(p.get(0, 1), 7);
  EXPECT_EQ(p.get(2, 3), 5);
  EXPECT_EQ(read(p), (Streams{{{0, 1}, 7}, {{2, 3}, 5}}));
}

TEST(PairBytes, StreamsOf4GiBMoveFromTheTableToTheMap) {
  std::vector<uint8_t> rows = {0, 1, 1}, cols = {1, 1, 0};
  PairBytes p(rows, cols, 1 << 20);
  p.make_dense();
  const int64_t big = (int64_t{1} << 32) - 2;  // the most a cell holds
  EXPECT_FALSE(p.add(0, 1, big, 48));          // in its cell
  EXPECT_EQ(read(p), (Streams{{{0, 1}, big}}));
  EXPECT_TRUE(p.add(0, 1, 1, 48));  // 2^32 - 1: into the map, a new entry
  EXPECT_FALSE(p.add(0, 1, 5, 48));
  EXPECT_EQ(p.get(0, 1), big + 6);
  // Through a row, as the per-cell arithmetic writes: a stream of 8 GiB at
  // once goes to the map too.
  uint32_t* row = p.row(2);
  ASSERT_NE(row, nullptr);
  EXPECT_FALSE(p.add_cell(row, 2, p.column(1), 7));
  EXPECT_TRUE(p.add_cell(row, 2, p.column(0), int64_t{8} << 30));
  EXPECT_EQ(read(p), (Streams{{{0, 1}, big + 6}, {{1, 2}, 7}, {{0, 2}, int64_t{8} << 30}}));
  // The map turned into the table keeps such a stream in the map.
  PairBytes m(rows, cols, 1 << 20);
  EXPECT_TRUE(m.add(0, 1, int64_t{5} << 32, 0));  // (nodes of 0 bytes: the map stays)
  EXPECT_TRUE(m.add(1, 2, 3, 0));
  ASSERT_FALSE(m.dense());
  m.make_dense();
  EXPECT_EQ(read(m), (Streams{{{0, 1}, int64_t{5} << 32}, {{1, 2}, 3}}));
  EXPECT_FALSE(m.add(0, 1, 1, 48));
  EXPECT_EQ(m.get(0, 1), (int64_t{5} << 32) + 1);
}

// add_run (consecutive columns of a row, summed a block at a time) against
// add_cell column by column: the same cells, the same map entries in the
// same order, the same count of new ones, where some streams reach 4 GiB
// (a block then goes add_cell by add_cell) and runs start and end anywhere.
TEST(PairBytes, AddRunAddsAsAddCellDoesOneByOne) {
  constexpr uint32_t kRows = 6, kCols = 300;
  std::vector<uint8_t> rows(kCols, 0), cols(kCols, 1);
  for (uint32_t d = 0; d < kRows; ++d) rows[d * 7] = 1;
  PairBytes run(rows, cols, 1 << 20), one(rows, cols, 1 << 20);
  run.make_dense();
  one.make_dense();
  std::mt19937 rng(3636);
  size_t fresh_run = 0, fresh_one = 0;
  std::vector<uint32_t> bytes;
  auto both = [&](uint32_t dd, int32_t c0) {
    fresh_run += run.add_run(run.row(dd), dd, c0, bytes.data(), bytes.size());
    uint32_t* row = one.row(dd);
    for (size_t k = 0; k < bytes.size(); ++k)
      fresh_one += one.add_cell(row, dd, c0 + static_cast<int32_t>(k), bytes[k]);
  };
  // Row 7, columns 3..202: 1000 + k, then sums of 2^32 - 1 - k % 3 (2^32
  // - 1 exactly: into the map), then 1 more each (2^32 - 1 again).
  bytes.resize(200);
  for (uint32_t k = 0; k < 200; ++k) bytes[k] = 1000 + k;
  both(7, 3);
  for (uint32_t k = 0; k < 200; ++k) bytes[k] = PairBytes::kInMap - (1000 + k) - k % 3;
  both(7, 3);
  std::fill(bytes.begin(), bytes.end(), 1);
  both(7, 3);
  for (int i = 0; i < 400; ++i) {
    const uint32_t dd = (rng() % kRows) * 7;
    const auto c0 = static_cast<int32_t>(rng() % kCols);
    const size_t n = rng() % (kCols - static_cast<size_t>(c0) + 1);
    bytes.resize(n);
    // Mostly small; now and then near 2^32 - 1 or 1..4 (sums then land
    // on 2^32 - 1 exactly, past it, or below it).
    for (uint32_t& b : bytes) {
      const uint32_t pick = static_cast<uint32_t>(rng() % 16);
      b = pick == 0   ? PairBytes::kInMap - 1 - static_cast<uint32_t>(rng() % 4)
          : pick == 1 ? 1 + static_cast<uint32_t>(rng() % 4)
                      : static_cast<uint32_t>(rng() % 5000);
    }
    both(dd, c0);
  }
  EXPECT_GT(fresh_one, 0u);  // streams went to the map
  EXPECT_EQ(fresh_run, fresh_one);
  EXPECT_EQ(read(run), read(one));
  using Entries = std::vector<std::tuple<uint32_t, uint32_t, int64_t>>;
  Entries map_run, map_one;
  run.each_sparse([&](uint32_t sd, uint32_t dd, int64_t b) { map_run.emplace_back(sd, dd, b); });
  one.each_sparse([&](uint32_t sd, uint32_t dd, int64_t b) { map_one.emplace_back(sd, dd, b); });
  EXPECT_EQ(map_run, map_one);  // the same order too
  size_t cells = 0;
  run.each_row([&](uint32_t, std::span<const uint32_t> sources, const uint32_t*) {
    cells += sources.size();
  });
  EXPECT_EQ(cells, size_t{kRows} * kCols);
}
