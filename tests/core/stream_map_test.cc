// StreamMap (core/src/plan/stream_map.h): the global statistics keep an
// index into it across later insertions, so an index must name the same
// key's value however much the table grows, and the table must hold exactly
// what a std::map given the same additions holds.
#include "plan/stream_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

using reshard::planning::StreamMap;

TEST(StreamMap, IndicesStayValidAndValuesMatchAMapAsTheTableGrows) {
  StreamMap<int64_t> m;
  std::map<uint64_t, int64_t> want;
  std::map<uint64_t, uint32_t> index_of;
  std::mt19937_64 rng(36);
  // Keys as the statistics make them: stage << 40 | source << 20 | destination.
  for (int i = 0; i < 200000; ++i) {
    const uint64_t key = (rng() % 3) << 40 | (rng() % 700) << 20 | (rng() % 700);
    const auto bytes = static_cast<int64_t>(rng() % 1000);
    bool fresh = false;
    const uint32_t idx = m.index(key, &fresh);
    EXPECT_EQ(fresh, index_of.count(key) == 0);
    if (!fresh) {
      ASSERT_EQ(idx, index_of[key]) << "index of key " << key << " moved";
    }
    index_of[key] = idx;
    m.at(idx) += bytes;
    want[key] += bytes;
  }
  ASSERT_EQ(m.size(), want.size());
  for (const auto& [key, bytes] : want) {
    ASSERT_NE(m.find(key), nullptr);
    EXPECT_EQ(*m.find(key), bytes);
    EXPECT_EQ(m.at(index_of[key]), bytes);
  }
  EXPECT_EQ(m.find(uint64_t{3} << 40), nullptr);
  // each: every entry once, in insertion (index) order.
  uint32_t next = 0;
  m.each([&](uint64_t key, int64_t bytes) {
    EXPECT_EQ(index_of[key], next++);
    EXPECT_EQ(bytes, want[key]);
  });
  EXPECT_EQ(next, want.size());
}

TEST(StreamMap, AnEmptyMapFindsNothing) {
  const StreamMap<int64_t> m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.find(0), nullptr);
  EXPECT_EQ(m.find(uint64_t{1} << 40 | 5), nullptr);
}
