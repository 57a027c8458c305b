// engine_detail::sort_runs (exec/schedule/interleave.h): the sort of the
// interleaving's items, which merges a few ascending runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "exec/schedule/interleave.h"

namespace reshard::engine_detail {
namespace {

// Invariant: whatever the number of ascending runs (one, odd, even, more
// than kMaxMergedRuns, where it sorts), the result is std::sort's.
TEST(SortRuns, GivesStdSortsOrderForAnyNumberOfRuns) {
  std::mt19937_64 rng(7);
  const auto less = [](uint64_t a, uint64_t b) { return a < b; };
  for (size_t runs : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{56},
                      kMaxMergedRuns - 1, kMaxMergedRuns + 40}) {
    for (int trial = 0; trial < 3; ++trial) {
      // Distinct values (a total order), dealt into `runs` ascending runs.
      std::vector<uint64_t> values(runs * (1 + rng() % 40));
      for (size_t i = 0; i < values.size(); ++i) values[i] = i * 1000 + rng() % 1000;
      std::shuffle(values.begin(), values.end(), rng);
      std::vector<uint64_t> v;
      const size_t per = runs == 0 ? 0 : values.size() / runs;
      for (size_t r = 0; r < runs; ++r) {
        auto b = values.begin() + static_cast<std::ptrdiff_t>(r * per);
        auto e = r + 1 == runs ? values.end() : b + static_cast<std::ptrdiff_t>(per);
        std::vector<uint64_t> run(b, e);
        std::sort(run.begin(), run.end());
        v.insert(v.end(), run.begin(), run.end());
      }
      std::vector<uint64_t> want = v;
      std::sort(want.begin(), want.end());
      sort_runs(v, less);
      EXPECT_EQ(v, want) << runs << " runs, trial " << trial;
    }
  }
}

}  // namespace
}  // namespace reshard::engine_detail
