// PairBytes (core/src/plan/pair_bytes.h): the stage-0 stream bytes the round
// schedule reads are the same whether they stay in the hash map, move to
// the table part way (once the map outgrows it), or start in it.
#include "plan/pair_bytes.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

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
