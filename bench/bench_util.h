// Shared helpers of the benchmark programs.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "reshard/wait.h"

namespace reshard::bench {

// Median wall time of `repeat` calls of f.
inline double median_seconds(int repeat, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto a = WaitClock::now();
    f();
    t.push_back(seconds_since(a));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace reshard::bench
