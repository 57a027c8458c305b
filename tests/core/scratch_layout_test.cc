// Scratch placement (plan/scratch_layout.h): buffers whose stages do not
// overlap share bytes, those whose stages do never do, offsets are
// 8-aligned, and the peak depends on the buffers, not on their order.
#include "plan/scratch_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "test_scale.h"

namespace reshard {
namespace {

using planning::place_scratch;
using planning::ScratchLife;

TEST(ScratchLayout, BandsTwoStagesApartShareBytes) {
  // Band i written in stage i, read in i + 1, on one device: two live at a
  // time, so two bands' worth of memory.
  std::vector<ScratchLife> bands;
  for (uint32_t i = 0; i < 8; ++i) bands.push_back({7, 1000, i, i + 1});
  const auto placed = place_scratch(bands);
  EXPECT_EQ(placed.peak.at(7), 2000);
  for (size_t i = 0; i < bands.size(); ++i) EXPECT_EQ(placed.offset[i], i % 2 == 0 ? 0 : 1000);
  // Written and read in the same stage span: every one apart.
  std::vector<ScratchLife> star(4, ScratchLife{7, 1000, 0, 1});
  EXPECT_EQ(place_scratch(star).peak.at(7), 4000);
}

TEST(ScratchLayout, SizesAreAlignedAndDevicesApart) {
  const auto placed = place_scratch({{1, 6, 0, 1}, {1, 10, 0, 1}, {2, 3, 0, 0}});
  EXPECT_EQ(placed.peak.at(1), 24);  // 16 + 8
  EXPECT_EQ(placed.peak.at(2), 8);
  for (int64_t o : placed.offset) EXPECT_EQ(o % 8, 0);
  EXPECT_EQ(planning::most_scratch({}), 0);
}

TEST(ScratchLayout, RandomLivesNeverOverlapWhileLiveAndPeakIgnoresOrder) {
  std::mt19937_64 rng(11);
  for (int c = 0; c < scaled_cases(300); ++c) {
    std::vector<ScratchLife> lives;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      const auto first = static_cast<uint32_t>(rng() % 6);
      lives.push_back({static_cast<int64_t>(rng() % 3), 1 + static_cast<int64_t>(rng() % 300),
                       first, first + static_cast<uint32_t>(rng() % 3)});
    }
    const auto placed = place_scratch(lives);
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        const ScratchLife &x = lives[static_cast<size_t>(i)], &y = lives[static_cast<size_t>(j)];
        if (x.device != y.device || x.last < y.first || y.last < x.first) continue;
        const int64_t xo = placed.offset[static_cast<size_t>(i)];
        const int64_t yo = placed.offset[static_cast<size_t>(j)];
        EXPECT_TRUE(xo + x.bytes <= yo || yo + y.bytes <= xo) << "case " << c;
      }
    std::vector<ScratchLife> shuffled = lives;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    EXPECT_EQ(place_scratch(shuffled).peak, placed.peak) << "case " << c;
  }
}

}  // namespace
}  // namespace reshard
